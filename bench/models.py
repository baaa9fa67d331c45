"""Local pretrained models: the planner on the tiny vs the pretrained base, and the OpenAI-compatible
server with and without request batching.

    python -m bench.models --quick
    python -m bench.models [--clients 1,4,8] [--rounds R] [--max-tokens T] [--out PATH]
                           [--metaqa-subgraphs DIR] [--metaqa-data DIR] [--planner-only | --server-only | --reader-only]
    python -m bench.models --reader-only --metaqa-subgraphs DIR [--mlp RETRIEVER] [--reader READER] [--demo DIR]

**Planner** (:mod:`bench.planner_bases`): the relation-path planner trained on the tiny random
LLaMA and on SmolLM2-135M (LoRA) with the same training questions, scored on held-out questions
of seen wordings and on paraphrases in wordings no training question has: path exact match, QA
Hits@1 through the demo's ``paths`` stage, seconds per epoch. The synthetic KG always; MetaQA
1/2/3-hop with ``--metaqa-subgraphs`` (a folder holding ``{1,2,3}hop-test`` built by
``jobs.build_subgraphs`` over MetaQA's test files; the question-type files come from
``--metaqa-data``, default ``$RG_SHARED_DATA/metaqa``). ``planner_hits1_paraphrase_<base>`` pools
every paraphrased question of the run. ``--planner-only`` runs this part alone and merges its keys
into the existing ``--out`` JSON (the server keys are kept); a run without it writes every key.

**Reader** (:mod:`bench.reader_tuned`): the LoRA-tuned local reader against the ``retriever_scores``
reader on the same MLP evidence chains of MetaQA's test side (``--reader-per-hop`` questions per
hop), with the share of questions whose gold answer is on the lines the tuned reader is shown (its
ceiling). It trains the MetaQA MLP and the reader with the repository's configs unless ``--mlp`` /
``--reader`` give checkpoints; ``--demo`` adds the demo pipeline's ``qa/tuned`` vs ``qa/chains``
Hits@1. It runs only with ``--metaqa-subgraphs`` or ``--demo`` (or ``--quick``: a tiny synthetic
set, wiring only). ``--reader-only`` merges its keys into ``--out`` as ``--planner-only`` does.

**Server**:
the local server (``serve/llm_server.py``, SmolLM2-135M on one replica with one CPU thread) runs
as two apps side by side on a local Ray: with ``@serve.batch`` up to 8 requests per ``generate``
call, and with batching off (``max_batch_size: 1``, the baseline); one is measured at a time while the
other idles. For each number of concurrent clients,
every client sends ``rounds`` chat requests one after another (greedy, ``max_tokens`` fixed, a
different question each); the bench records completion tokens per second over the whole run and
the p50/p90 request latency. ``server_batching_speedup_<n>`` is tokens/s batched ÷ tokens/s
unbatched at ``n`` clients, measured in the same run. The machine's load average is recorded,
since on a shared 2-core machine wall time includes waiting for a core.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import platform
import socket
import statistics
import time
import urllib.request
from pathlib import Path
from typing import Any

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "models.json"
TOPICS = ("rivers", "the moon", "bread", "trains", "owls", "glass", "chess", "rain", "copper", "tea",
          "maps", "bees", "clocks", "salt", "kites", "snow")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


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
        self.port = _free_port()
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


def planner_part(args: argparse.Namespace, previous: dict[str, Any]) -> dict[str, Any]:
    """The planner comparison's keys (:mod:`bench.planner_bases`) at the flags' sizes; datasets
    of ``previous["planner"]`` not run now are kept."""
    import torch

    from bench.planner_bases import QUICK, PlannerRun, planner_keys, run_dataset
    from rg.run.paths import shared_data_dir

    torch.set_num_threads(args.threads)
    run = QUICK if args.quick else PlannerRun(
        synthetic_questions=args.planner_questions, metaqa_per_hop=args.metaqa_per_hop,
        tiny_epochs=args.tiny_epochs, pretrained_epochs=args.pretrained_epochs)
    names = ["synthetic"] if args.quick else [n for n in args.planner_datasets.split(",") if n]
    if "metaqa" in names and args.metaqa_subgraphs is None and not args.planner_datasets_given:
        names.remove("metaqa")  # the default asks for MetaQA only where its subgraphs are given
    data = args.metaqa_data
    if data is None and shared_data_dir() is not None:
        data = shared_data_dir() / "metaqa"
    datasets = {} if args.quick else dict(previous.get("planner", {}).get("datasets", {}))
    for name in names:
        datasets[name] = run_dataset(name, run, args.metaqa_subgraphs, data)
    return planner_keys(datasets)


def reader_part(args: argparse.Namespace) -> dict[str, Any]:
    """The reader comparison's keys (:mod:`bench.reader_tuned`) at the flags' sizes."""
    from bench.reader_tuned import reader_part as run

    return run(None if args.quick else args.metaqa_subgraphs, args.reader_per_hop, args.mlp, args.reader,
               args.encoder_cache, args.demo, args.reader_work, args.quick)


def run_parts(args: argparse.Namespace, result: dict[str, Any], previous: dict[str, Any], server: ServerPair | None,
              starting: concurrent.futures.Future | None, clients: list[int], rounds: int, max_tokens: int) -> None:
    """The planner, reader and server parts the flags ask for, each adding its keys to ``result``."""
    if not (args.server_only or args.reader_only):
        planner_start, load_before = time.perf_counter(), os.getloadavg()[0]
        result.update(planner_part(args, previous))
        result["planner_seconds"] = round(time.perf_counter() - planner_start, 1)
        result["planner_quick"] = args.quick
        result["planner_load_avg_before_after"] = [load_before, os.getloadavg()[0]]
        pooled = [f"{b} {result[f'planner_hits1_paraphrase_{b}']}" for b in ("tiny", "pretrained")]
        print(f"models: planner Hits@1 on paraphrases {', '.join(pooled)} (tiny, smollm2-135m)")
    runs_reader = args.quick or args.metaqa_subgraphs is not None or args.demo is not None
    if not (args.server_only or args.planner_only) and runs_reader:
        reader_start, load_before = time.perf_counter(), os.getloadavg()[0]
        result.update(reader_part(args))
        result["reader_seconds"] = round(time.perf_counter() - reader_start, 1)
        result["reader_quick"] = args.quick
        result["reader_load_avg_before_after"] = [load_before, os.getloadavg()[0]]
        for key in ("reader_hits1_metaqa", "reader_hits1_metaqa_retriever_scores", "reader_gold_in_shown_lines_metaqa",
                    "reader_hits1_demo", "reader_hits1_demo_retriever_scores"):
            if key in result:
                print(f"models: {key} {result[key]}")
    if server is not None:
        server_start = time.perf_counter()
        if starting is not None:
            starting.result()  # raises what the background start raised
        else:
            server.start()
        result.update(server.measure(clients, rounds, max_tokens))
        result["server_seconds"] = round(time.perf_counter() - server_start, 1)
        result["server_started_in_background"] = starting is not None
        result["server_quick"] = args.quick
        top = max(clients)
        batched = result["server"]["batched"][-1]
        print(f"models: server {batched['tokens_per_s']} tokens/s at {top} clients batched, "
              f"{result[f'server_batching_speedup_{top}']}x unbatched (p50 {batched['p50_latency_s']} s)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.models", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="under a minute: server 8 clients, 1 round, 8 tokens; planner bench.planner_bases.QUICK, no MetaQA; "
                             "reader on a tiny synthetic set in this process (bench.reader_tuned.quick)")
    parts = parser.add_mutually_exclusive_group()
    parts.add_argument("--planner-only", action="store_true", help="run the planner part alone, merge into --out")
    parts.add_argument("--server-only", action="store_true", help="run the server part alone, merge into --out")
    parts.add_argument("--reader-only", action="store_true", help="run the reader part alone, merge into --out")
    parser.add_argument("--reader-per-hop", type=int, default=300, help="MetaQA test questions per hop for the reader part")
    parser.add_argument("--mlp", type=Path, default=None, help="trained MetaQA retriever folder (omit: train one)")
    parser.add_argument("--reader", type=Path, default=None, help="trained MetaQA tuned reader folder (omit: train one)")
    parser.add_argument("--demo", type=Path, default=None, help="demo pipeline output folder (reads qa/tuned, qa/chains)")
    parser.add_argument("--encoder-cache", default=None, help="text encoder cache folder of the reader part")
    parser.add_argument("--reader-work", type=Path, default=None,
                        help="folder for what the reader part trains and evaluates (default: a temporary folder)")
    parser.add_argument("--metaqa-subgraphs", type=Path, default=None,
                        help="folder with {1,2,3}hop-test subgraph shards of MetaQA (omit: synthetic KG only)")
    parser.add_argument("--metaqa-data", type=Path, default=None,
                        help="MetaQA folder with qa_test_*hop(_qtype).txt.gz (default: $RG_SHARED_DATA/metaqa)")
    parser.add_argument("--metaqa-per-hop", type=int, default=400,
                        help="MetaQA rows read per hop (about half kept, half of those tested)")
    parser.add_argument("--planner-questions", type=int, default=200, help="synthetic questions (80%% train)")
    parser.add_argument("--tiny-epochs", type=int, default=20, help="epochs of the tiny planner")
    parser.add_argument("--pretrained-epochs", type=int, default=3, help="epochs of the smollm2 planner")
    parser.add_argument("--planner-datasets", default=None,
                        help="comma-separated: synthetic, metaqa (default: both, metaqa only with --metaqa-subgraphs)")
    parser.add_argument("--threads", type=int, default=2, choices=(1, 2), help="torch threads of the planner part")
    parser.add_argument("--clients", default="1,4,8", help="comma-separated concurrent client counts")
    parser.add_argument("--rounds", type=int, default=3, help="requests per client")
    parser.add_argument("--max-tokens", type=int, default=48, help="completion tokens per request")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    if args.reader_only and not (args.quick or args.metaqa_subgraphs or args.demo):
        parser.error("--reader-only needs --metaqa-subgraphs, --demo or --quick")
    args.planner_datasets_given = args.planner_datasets is not None
    args.planner_datasets = args.planner_datasets or "synthetic,metaqa"
    clients = [8] if args.quick else [int(x) for x in args.clients.split(",")]
    rounds, max_tokens = (1, 8) if args.quick else (args.rounds, args.max_tokens)

    start = time.perf_counter()
    result: dict[str, Any] = {"bench": "models", "quick": args.quick, "machine": platform.machine(),
                              "cpus": os.cpu_count(), "load_avg_before": os.getloadavg()[0]}
    previous: dict[str, Any] = {}
    merging = args.planner_only or args.server_only or args.reader_only
    if merging:  # the other part's keys are kept, and so are the whole-run keys (quick, load, seconds)
        previous = json.loads(args.out.read_text()) if args.out.exists() else {}
        result = {**result, **previous}
    server = None if args.planner_only or args.reader_only else ServerPair()
    with concurrent.futures.ThreadPoolExecutor(1) as background:
        # --quick: Ray and the server apps start while the planner and reader parts run (their seconds include that)
        starting = background.submit(server.start) if server is not None and args.quick else None
        try:
            run_parts(args, result, previous, server, starting, clients, rounds, max_tokens)
        finally:
            if starting is not None:
                concurrent.futures.wait([starting])
            if server is not None:
                server.stop()
    if not merging or "seconds" not in result:
        result["load_avg_after"] = os.getloadavg()[0]
        result["seconds"] = round(time.perf_counter() - start, 1)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"models: → {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
