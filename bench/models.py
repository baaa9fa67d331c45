"""The local OpenAI-compatible LLM server (SmolLM2-135M) with and without request batching.

    python -m bench.models --quick
    python -m bench.models [--clients 1,4,8] [--rounds R] [--max-tokens T] [--out PATH]

The local server (``serve/llm_server.py``, SmolLM2-135M on one replica with one CPU thread) runs
as two apps side by side on a local Ray: with ``@serve.batch`` up to 8 requests per ``generate``
call, and with batching off (``max_batch_size: 1``, the baseline); one is measured at a time while the
other idles. For each number of concurrent clients,
every client sends ``rounds`` chat requests one after another (greedy, ``max_tokens`` fixed, a
different question each); the bench records completion tokens per second over the whole run and
the p50/p90 request latency. ``server_batching_speedup_<n>`` is tokens/s batched ÷ tokens/s
unbatched at ``n`` clients, measured in the same run. Writes ``bench/results/models.json`` whole.

The planner on the tiny vs the pretrained base is :mod:`bench.planner_bases` and the tuned reader
:mod:`bench.reader_tuned`, each with its own results file.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import statistics
import time
import urllib.request
from pathlib import Path
from typing import Any

from bench.machine import RunRecord, write_report
from rg.run.ports import free_port

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "models.json"
TOPICS = ("rivers", "the moon", "bread", "trains", "owls", "glass", "chess", "rain", "copper", "tea",
          "maps", "bees", "clocks", "salt", "kites", "snow")


def _post(url: str, body: dict[str, Any]) -> tuple[float, int]:
    """One request: (latency in seconds, completion tokens)."""
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    start = time.perf_counter()
    with urllib.request.urlopen(request, timeout=600) as response:
        reply = json.loads(response.read())
    return time.perf_counter() - start, int(reply["usage"]["completion_tokens"])


def load_clients(url: str, clients: int, rounds: int, max_tokens: int) -> dict[str, float]:
    """``clients`` threads each sending ``rounds`` requests in turn; throughput and latency."""

    def client(index: int) -> list[tuple[float, int]]:
        out = []
        for r in range(rounds):
            topic = TOPICS[(index * rounds + r) % len(TOPICS)]
            body = {"messages": [{"role": "user", "content": f"Write two sentences about {topic}."}],
                    "max_tokens": max_tokens, "temperature": 0}
            out.append(_post(url, body))
        return out

    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(clients) as pool:
        results = [x for part in pool.map(client, range(clients)) for x in part]
    wall = time.perf_counter() - start
    latencies = sorted(x[0] for x in results)
    tokens = sum(x[1] for x in results)
    return {
        "clients": clients,
        "requests": len(results),
        "completion_tokens": tokens,
        "wall_s": round(wall, 3),
        "tokens_per_s": round(tokens / wall, 2),
        "p50_latency_s": round(statistics.median(latencies), 3),
        "p90_latency_s": round(latencies[min(len(latencies) - 1, int(0.9 * len(latencies)))], 3),
    }


class ServerPair:
    """The server as two apps on a local Ray (or the Ray this process already joined): with
    ``@serve.batch`` up to 8 requests per ``generate`` call, and without (``max_batch_size: 1``).
    Both start at once, their replicas loading the model side by side; each is measured alone.
    :meth:`start` may run in a background thread while other work goes on."""

    MODES = ("batched", "unbatched")

    def __init__(self) -> None:
        self.port: int | None = None
        self.owns_ray = False

    def start(self) -> None:
        import ray
        from ray import serve

        from serve.llm_server import build_app

        self.owns_ray = not ray.is_initialized()
        if self.owns_ray:
            ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
        self.port = free_port()
        serve.start(http_options={"host": "127.0.0.1", "port": self.port})
        serve.run_many([serve.RunTarget(build_app({
            "base": "smollm2-135m", "max_batch_size": 8 if label == "batched" else 1, "max_ongoing_requests": 16,
            "max_queued_requests": 256, "batch_wait_timeout_s": 0.05, "num_cpus": 1}), name=label, route_prefix=f"/{label}")
            for label in self.MODES])

    def measure(self, clients: list[int], rounds: int, max_tokens: int) -> dict[str, Any]:
        """Each app at each client count; ``server_batching_speedup_<n>`` = tokens/s batched ÷ unbatched."""
        runs: dict[str, list[dict[str, float]]] = {}
        for label in self.MODES:
            url = f"http://127.0.0.1:{self.port}/{label}/v1/chat/completions"
            load_clients(url, 1, 1, 4)  # warm-up
            runs[label] = [load_clients(url, n, rounds, max_tokens) for n in clients]
        result: dict[str, Any] = {"server": runs, "server_max_tokens": max_tokens, "server_rounds": rounds}
        for on, off in zip(runs["batched"], runs["unbatched"]):
            result[f"server_batching_speedup_{on['clients']}"] = round(on["tokens_per_s"] / off["tokens_per_s"], 2)
        return result

    def stop(self) -> None:
        import ray
        from ray import serve

        if not ray.is_initialized():
            return
        if self.owns_ray:
            ray.shutdown()  # takes Serve down with it
        else:
            serve.shutdown()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.models", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="under a minute: 8 clients, 1 round, 8 tokens")
    parser.add_argument("--clients", default="1,4,8", help="comma-separated concurrent client counts")
    parser.add_argument("--rounds", type=int, default=3, help="requests per client")
    parser.add_argument("--max-tokens", type=int, default=48, help="completion tokens per request")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    record = RunRecord("bench.models", argv)
    clients = [8] if args.quick else [int(x) for x in args.clients.split(",")]
    rounds, max_tokens = (1, 8) if args.quick else (args.rounds, args.max_tokens)
    result: dict[str, Any] = {"bench": "models", "quick": args.quick,
                              "baseline": "the same server with batching off (max_batch_size: 1)"}
    server = ServerPair()
    try:
        started = time.perf_counter()
        server.start()
        result["server_start_s"] = round(time.perf_counter() - started, 1)
        result.update(server.measure(clients, rounds, max_tokens))
    finally:
        server.stop()
    write_report(args.out, result, record)
    top = max(clients)
    batched = result["server"]["batched"][-1]
    print(f"models: server {batched['tokens_per_s']} tokens/s at {top} clients batched, "
          f"{result[f'server_batching_speedup_{top}']}x unbatched (p50 {batched['p50_latency_s']} s) -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
