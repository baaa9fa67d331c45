"""The question-answering endpoint under load: latency, throughput, Serve's overhead, backpressure.

    RAY_AUTH_MODE=disabled python -m bench.serve --quick
    RAY_AUTH_MODE=disabled python -m bench.serve [--requests 64] [--levels 1,2,4,8,16,32] [--out PATH]

The endpoint of ``serve/app.py`` on local Ray (2 CPUs) over the synthetic KG (seed 0), its Brain an
LLM Brain at a scripted 127.0.0.1 server (a one-hop indicator; selection keeps the first
candidates): no model is trained or loaded, so the numbers are the serving path's own. Measured
in one run:

- **hop**: the p50 of a trivial call through a deployment handle (``handle_hop_p50_ms``), what one of
  the question's four Serve hops (proxy → Ingress → Hand → BrainProxy twice) costs before any work,
  and of ``GET /healthz`` through the HTTP proxy (``http_healthz_p50_ms``);
- **baseline**: the same controller (same KG, config and scripted Brain) called in-process, each
  question back to back with the same question through the endpoint (one client), so both see the
  same machine state; **overhead_p50_ms** = the endpoint's p50 minus the baseline's p50 (HTTP
  proxy, ingress, the Ingress→Hand hop, two Hand→BrainProxy hops), ``overhead_paired_p50_ms`` the
  median of the per-question differences;
- **load**: a fixed number of requests at 1, 2, 4, 8, ... concurrent aiohttp clients on loopback:
  throughput, p50, p99, status counts;
- **load step**: closed-loop clients, few → many → few (``step``), while the Hand autoscales
  1..3 replicas of 0.5 CPU each (they fit on 2 CPUs with the ingress and the BrainProxy; load is
  averaged over 2 s and pushed every 0.5 s): its running and starting replicas over time and the
  offered load (clients, requests in flight) → ``max_replicas_seen``, ``replicas_back_to_min_s``
  and the plot ``<out stem>_replicas.png``;
- **overload**: ``overload_factor`` × the Hand's capacity (replicas × (ongoing + queued)) at once:
  backpressure should answer 503 with Retry-After; ``non_503_errors_under_overload`` counts any
  other failure and ``lost_accepted_requests`` counts requests that got no HTTP response at all;
- **Brain batching**: the BrainProxy with a local planner Brain, analyses sent 8 at a time through
  its handle with ``@serve.batch`` (up to 8) against batching off → ``brain_batching_speedup``.

``phases_s`` says where the command's time went (set-up, app start, the paired questions and hops, load and
overload, Brain batching, Serve's and Ray's shutdown).

``--quick`` skips the load step (autoscaling needs minutes of load to show), times 32 questions both ways for the
overhead (8 were too few for a stable median) and sends 8 questions at 1 and 4 clients. ``--throughput-optimized`` sets ``RAY_SERVE_THROUGHPUT_OPTIMIZED=1`` for every Serve
process (Ray ≥ 2.55: user code on the replica's own event loop, handles routed on the caller's loop,
direct ingress), so the two modes' overheads can be compared run against run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import aiohttp

from bench.machine import RunRecord, write_report
from rg.data.synthetic import SyntheticConfig, generate
from rg.run.ports import free_port
from tests.scripted_server import Respond, Script, ScriptedServer

HAND = {"min_replicas": 1, "max_replicas": 3, "target_ongoing_requests": 1, "max_ongoing_requests": 2,
        "max_queued_requests": 4, "num_cpus": 0.5, "upscale_delay_s": 1.0, "downscale_delay_s": 4.0,
        "look_back_period_s": 2.0, "metrics_interval_s": 0.5}
STEP = {"full": [(1, 10.0), (8, 75.0), (1, 10.0)]}
"""Load step: (closed-loop clients, seconds) phases."""
THROUGHPUT_ENV = "RAY_SERVE_THROUGHPUT_OPTIMIZED"
"""Ray Serve's switch for its throughput optimisations (Ray ≥ 2.55; --throughput-optimized)."""


def scripted_brain(body: dict[str, Any]) -> str:
    """Analysis: one one-hop indicator; selection: the first ``keep`` candidates."""
    user = body["messages"][-1]["content"]
    shown = json.loads(user.rsplit("Input: ", 1)[1].rsplit("\nReply:", 1)[0])
    if shown["kind"] == "analysis":
        return json.dumps({"sub_questions": [shown["question"]], "depth": 1,
                           "indicators": [{"text": "TE_1 -[link]-> ANSWER", "relations": [], "depth": 1}]})
    return json.dumps({"ids": [c["id"] for c in shown["candidates"]][: shown["keep"]]})


def app_args(brain_url: str, questions: int) -> dict[str, Any]:
    return {
        "kg": {"synthetic": {"seed": 0, "questions": questions}},
        "dualtower": {"privacy": {"mode": "utility"}, "similarity": "lexical",
                      "brain": {"kind": "llm", "llm": {"base_url": brain_url, "model": "scripted", "side": "brain",
                                                       "max_retries": 0, "timeout_s": 10.0}}},
        "request_timeout_s": 60.0, "brain_timeout_s": 30.0, "auth": {"mode": "off"},
        "ingress": {"max_ongoing_requests": 256, "max_queued_requests": 256, "num_cpus": 0.1},
        "hand": HAND, "brain": {"max_ongoing_requests": 16, "max_queued_requests": 64, "num_cpus": 0.25},
    }


async def brain_batching(requests: int, concurrency: int = 8) -> dict[str, Any]:
    """The BrainProxy's ``@serve.batch`` of local-Brain analyses: ``requests`` sealed analysis payloads, at most
    ``concurrency`` in flight through the deployment's handle, with batches of up to 8 against batching off
    (``brain_max_batch_size`` 1); analyses per second each, and whether both gave the same analyses.

    The local Brain is the tiny film-graph planner of the dual-tower tests (trained here for 10 epochs), so this
    measures the serving path's batching, not a particular model's speed. It runs on one event loop and ends by
    shutting Serve down on it (with RAY_SERVE_THROUGHPUT_OPTIMIZED=1 handles route on the caller's loop)."""
    import tempfile

    from ray import serve

    from rg.privacy import PrivacyConfig, PrivacySession
    from serve.brain_proxy import BrainProxy
    from tests.dualtower_world import schema, trained_planner
    from tests.test_dualtower import analysis_payloads

    folder = Path(tempfile.mkdtemp(prefix="rg-bench-planner-"))
    trained_planner(epochs=10).save(folder)  # speed does not depend on how well it was trained
    config = {"brain": {"kind": "local", "planner": str(folder), "beams": 3, "indicators": 2},
              "privacy": {"mode": "utility"}}
    with PrivacySession(PrivacyConfig(mode="utility"), schema()) as session:
        texts = [p.text for p in analysis_payloads(session)]
    texts = (texts * (requests // len(texts) + 1))[:requests]

    async def drive(handle) -> tuple[float, list, list[int]]:
        gate = asyncio.Semaphore(concurrency)

        async def one(text: str):
            async with gate:
                return await handle.call.remote("analysis", text)

        await one(texts[0])  # warm-up
        began = time.perf_counter()
        replies = await asyncio.gather(*(one(t) for t in texts))
        wall = time.perf_counter() - began
        return wall, replies, await handle.batch_sizes.remote()  # on this loop: Serve may route on the caller's

    out: dict[str, Any] = {"requests": requests, "concurrency": concurrency}
    answers = {}
    for name, size in (("unbatched", 1), ("batched", 8)):
        handle = serve.run(BrainProxy.options(ray_actor_options={"num_cpus": 0}, max_ongoing_requests=64)
                           .bind(config, None, size, 0.005), name=f"brain-{name}", route_prefix=None)
        wall, replies, sizes = await drive(handle)  # the app stays up: deleting one took ~30 s with --throughput-optimized
        answers[name] = [r.result.indicators if r.result else r.reason for r in replies]
        out[name] = {"wall_s": round(wall, 3), "analyses_per_s": round(requests / wall, 1),
                     "mean_batch": round(sum(sizes) / len(sizes), 2) if sizes else 1.0}
    await serve.shutdown_async()
    out["same_analyses"] = answers["batched"] == answers["unbatched"]
    out["speedup"] = round(out["batched"]["analyses_per_s"] / out["unbatched"]["analyses_per_s"], 2)
    return out


async def hop_rtt(app: str, calls: int = 40) -> float:
    """p50 seconds of one trivial call (``BrainProxy.name``) through a deployment handle from this process: what
    one Serve hop costs before any work, to compare with the endpoint's overhead (four hops per question)."""
    from ray import serve

    handle = serve.get_deployment_handle("BrainProxy", app)
    await handle.name.remote()
    times = []
    for _ in range(calls):
        started = time.perf_counter()
        await handle.name.remote()
        times.append(time.perf_counter() - started)
    await handle.shutdown_async()  # on this loop: with RAY_SERVE_THROUGHPUT_OPTIMIZED=1 the router lives on it
    return percentile(times, 50)


async def http_rtt(url: str, calls: int = 40) -> float:
    """p50 seconds of ``GET /healthz`` through Serve's HTTP proxy to the Ingress: the HTTP hop alone."""
    times = []
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
        for k in range(calls + 1):
            started = time.perf_counter()
            async with session.get(url) as response:
                await response.read()
            if k:  # the first opens the connection
                times.append(time.perf_counter() - started)
    return percentile(times, 50)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))] if ordered else float("nan")


def in_process(args: dict[str, Any]):
    """The same controller as the endpoint's Hand (same KG, config and scripted Brain), built in this process."""
    from serve.config import ServeConfig
    from serve.hand import load_kg
    from rg.reasoning.dualtower import build_controller

    config = ServeConfig.model_validate(args)
    store, schema = load_kg(config)
    return build_controller(config.controller_config(), schema, store=store)


async def paired(url: str, controller, items: list[tuple[str, tuple[str, ...]]]) -> tuple[list[float], list[float]]:
    """Each question answered in-process and then through the endpoint, back to back on one event loop (as a Hand
    replica runs it), so both see the same machine state; seconds (in-process, endpoint) per question, after two
    warm-up questions each."""
    base: list[float] = []
    served: list[float] = []
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as session:
        async def ask(question: str, topics: tuple[str, ...]) -> float:
            started = time.perf_counter()
            async with session.post(url, json={"question": question, "topics": list(topics)}) as response:
                await response.read()
                if response.status != 200:
                    raise RuntimeError(f"the endpoint answered {response.status} at concurrency 1")
            return time.perf_counter() - started

        for question, topics in items[:2]:
            await controller.aanswer(question, topics)
            await ask(question, topics)
        for question, topics in items:
            started = time.perf_counter()
            await controller.aanswer(question, topics)
            base.append(time.perf_counter() - started)
            served.append(await ask(question, topics))
    return base, served


async def fire(url: str, items: list[tuple[str, tuple[str, ...]]], concurrency: int,
               timeout_s: float) -> list[tuple[int | None, float]]:
    """Send every item with at most ``concurrency`` in flight; (status or None, seconds) each."""
    gate = asyncio.Semaphore(concurrency)
    out: list[tuple[int | None, float]] = []

    async def one(session: aiohttp.ClientSession, question: str, topics: tuple[str, ...]) -> None:
        async with gate:
            started = time.perf_counter()
            try:
                async with session.post(url, json={"question": question, "topics": list(topics)}) as response:
                    await response.read()
                    out.append((response.status, time.perf_counter() - started))
            except (aiohttp.ClientError, asyncio.TimeoutError):
                out.append((None, time.perf_counter() - started))

    limits = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=limits, timeout=aiohttp.ClientTimeout(total=timeout_s)) as session:
        await asyncio.gather(*(one(session, q, t) for q, t in items))
    return out


class ReplicaWatch:
    """Polls the Hand's running replicas in a thread: (seconds since start, replicas) samples."""

    def __init__(self, app: str, every_s: float = 0.5) -> None:
        self.app, self.every_s = app, every_s
        self.samples: list[list[float]] = []
        """[seconds since start, running replicas, starting replicas]"""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.origin = time.perf_counter()

    def _run(self) -> None:
        from ray import serve

        while not self._stop.is_set():
            states = serve.status().applications[self.app].deployments["HandServer"].replica_states
            self.samples.append([round(time.perf_counter() - self.origin, 2), int(states.get("RUNNING", 0)),
                                 int(states.get("STARTING", 0))])
            self._stop.wait(self.every_s)

    def running(self) -> int:
        return self.samples[-1][1] if self.samples else 0

    def wait_for(self, replicas: int, timeout_s: float) -> float | None:
        """Seconds until ``replicas`` run and none is starting (None: not within ``timeout_s``)."""
        began = time.perf_counter()
        while time.perf_counter() - began < timeout_s:
            if self.samples and self.samples[-1][1:] == [replicas, 0]:
                return round(time.perf_counter() - began, 1)
            time.sleep(self.every_s)
        return None

    def __enter__(self) -> "ReplicaWatch":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


async def step_load(url: str, items: list[tuple[str, tuple[str, ...]]], phases: list[tuple[int, float]],
                    origin: float) -> list[tuple[float, float, int | None]]:
    """Closed-loop clients: in each (clients, seconds) phase, ``clients`` loops ask one question after another
    until the phase ends; (start, end, status or None) per request, in seconds since ``origin``."""
    out: list[tuple[float, float, int | None]] = []

    async def client(session: aiohttp.ClientSession, until: float, offset: int) -> None:
        k = offset
        while time.perf_counter() < until:
            question, topics = items[k % len(items)]
            k += 1
            started = time.perf_counter()
            try:
                async with session.post(url, json={"question": question, "topics": list(topics)}) as response:
                    await response.read()
                    status: int | None = response.status
            except (aiohttp.ClientError, asyncio.TimeoutError):
                status = None
            out.append((round(started - origin, 3), round(time.perf_counter() - origin, 3), status))
            if status == 503:
                await asyncio.sleep(0.2)  # backpressure: a client waits a little before asking again

    connector = aiohttp.TCPConnector(limit=max(clients for clients, _ in phases))
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=120)) as session:
        for clients, seconds in phases:
            until = time.perf_counter() + seconds
            await asyncio.gather(*(client(session, until, i * 7) for i in range(clients)))
    return out


def in_flight(requests: list[tuple[float, float, int | None]], times: list[float]) -> list[int]:
    """Requests in flight at each of ``times`` (the offered load the endpoint saw)."""
    return [sum(1 for start, end, _ in requests if start <= t < end) for t in times]


def plot_replicas(report: dict[str, Any], path: Path) -> None:
    """Hand replicas (running, starting) and offered load (clients, requests in flight) over the load step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    step = report["step"]
    t = [row[0] for row in step["replicas_over_time"]]
    fig, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(8, 5))
    top.step(t, [row[1] for row in step["replicas_over_time"]], where="post", label="running")
    top.step(t, [row[2] for row in step["replicas_over_time"]], where="post", label="starting", linestyle="--")
    top.set_ylabel("Hand replicas")
    top.set_yticks(range(0, HAND["max_replicas"] + 2))
    top.legend(loc="upper right")
    top.set_title(f"bench.serve load step: at most {step['max_replicas']} running "
                  f"({step['max_replicas_running_or_starting']} running or starting); back to {HAND['min_replicas']} "
                  f"{step['min_again_after_high_s']} s after the high phase", fontsize=10)
    bottom.step([row[0] for row in step["offered_over_time"]], [row[1] for row in step["offered_over_time"]],
                where="post", label="clients")
    bottom.plot([row[0] for row in step["offered_over_time"]], [row[2] for row in step["offered_over_time"]],
                label="requests in flight")
    bottom.set_ylabel("offered load")
    bottom.set_xlabel("seconds")
    bottom.legend(loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def summary(results: list[tuple[int | None, float]], wall_s: float) -> dict[str, Any]:
    ok = [s for status, s in results if status == 200]
    codes: dict[str, int] = {}
    for status, _ in results:
        codes[str(status)] = codes.get(str(status), 0) + 1
    return {"requests": len(results), "status": codes, "throughput_rps": round(len(ok) / wall_s, 2),
            "p50_ms": round(1000 * percentile(ok, 50), 1), "p99_ms": round(1000 * percentile(ok, 99), 1)}


def run(requests: int, levels: list[int], overload_factor: int, out: Path,
        step: list[tuple[int, float]] | None = None, settle_s: float = 30.0,
        batching_requests: int = 32, paired_questions: int | None = None,
        record: RunRecord | None = None) -> dict[str, Any]:
    """The whole benchmark (module docstring); ``step`` None skips the load step (``--quick``), ``settle_s`` bounds
    each wait for the Hand to be back at ``min_replicas``; ``batching_requests`` analyses measure the BrainProxy's
    batching (0 skips it); ``paired_questions`` are timed in-process and through the endpoint for the overhead
    (default: ``requests``); ``record`` is the command's run record (made here when None)."""
    import ray
    from ray import serve

    from serve.app import build_app

    record = record or RunRecord("bench.serve", [])
    bench_began = time.perf_counter()
    phases: dict[str, float] = {}  # seconds per part of the run, so a slow command says where its time went
    mark = [bench_began]

    def lap(name: str) -> None:
        now = time.perf_counter()
        phases[name] = round(now - mark[0], 1)
        mark[0] = now
    n_paired = paired_questions or requests
    kg = generate(SyntheticConfig(seed=0, questions=max(requests, n_paired, 20)))  # the KG is the same at any count
    questions = [(q.question, q.q_entities) for q in kg.questions]
    items = questions[:requests]
    with ScriptedServer(Script.always(Respond(scripted_brain))) as brain:
        args = app_args(brain.base_url, max(requests, 20))
        controller = in_process(args)
        started_ray = not ray.is_initialized()
        if started_ray:
            ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
        lap("setup")
        port = free_port()
        try:
            serve.start(http_options={"host": "127.0.0.1", "port": port})
            started = time.perf_counter()
            serve.run(build_app(args), name="bench", route_prefix="/")
            startup_s = time.perf_counter() - started
            lap("app_start")
            url = f"http://127.0.0.1:{port}/v1/answer"
            baseline, served = asyncio.run(paired(url, controller, questions[:n_paired]))
            # with RAY_SERVE_THROUGHPUT_OPTIMIZED=1 Serve's router stays bound to the first event loop that used a
            # handle, so the handle hop is timed only in the default mode (the batching measurement needs that loop)
            hop_s = asyncio.run(hop_rtt("bench")) if os.environ.get(THROUGHPUT_ENV) != "1" else None
            http_s = asyncio.run(http_rtt(f"http://127.0.0.1:{port}/healthz"))
            lap("paired_and_hops")
            load = []
            with ReplicaWatch("bench") as watch:
                for level in levels:
                    began = time.perf_counter()
                    results = asyncio.run(fire(url, items, level, 120))
                    load.append({"concurrency": level, **summary(results, time.perf_counter() - began)})
                if step:
                    settled_before = watch.wait_for(HAND["min_replicas"], settle_s)
                    step_began = time.perf_counter() - watch.origin
                    step_requests = asyncio.run(step_load(url, items, step, watch.origin))
                    step_ended = time.perf_counter() - watch.origin
                    back_to_min_s = watch.wait_for(HAND["min_replicas"], settle_s)
                    step_samples = [row for row in watch.samples if row[0] >= step_began]
                capacity = HAND["max_replicas"] * (HAND["max_ongoing_requests"] + HAND["max_queued_requests"])
                burst = (items * (overload_factor * capacity // len(items) + 1))[: overload_factor * capacity]
                began = time.perf_counter()
                overload = asyncio.run(fire(url, burst, len(burst), 120))
                overload_wall = time.perf_counter() - began
                if step:
                    time.sleep(2.0)  # a few more replica samples after the burst
            lap("load_and_overload")  # the app stays up until the shutdown (a delete alone took ~30 s in that mode)
            batching = asyncio.run(brain_batching(batching_requests)) if batching_requests else None
            lap("brain_batching")
        finally:
            serve.shutdown()
            lap("serve_shutdown")
            if started_ray:
                ray.shutdown()
            lap("ray_shutdown")
    ones = next(row for row in load if row["concurrency"] == 1)
    non_503 = sum(1 for status, _ in overload if status not in (200, 503))
    report = {
        "bench": "serve", "cpus": 2, "requests_per_level": requests, "paired_questions": n_paired,
        "startup_s": round(startup_s, 1),
        "overhead_share_of_question": round((percentile(served, 50) - percentile(baseline, 50))
                                            / percentile(baseline, 50), 3),
        "in_process_p50_ms": round(1000 * percentile(baseline, 50), 1),
        "serve_p50_ms_paired": round(1000 * percentile(served, 50), 1),
        "overhead_p50_ms": round(1000 * (percentile(served, 50) - percentile(baseline, 50)), 1),
        "overhead_paired_p50_ms": round(1000 * percentile([b - a for a, b in zip(baseline, served)], 50), 1),
        "serve_p50_ms_at_1": ones["p50_ms"],
        "handle_hop_p50_ms": round(1000 * hop_s, 1) if hop_s is not None else None,
        "http_healthz_p50_ms": round(1000 * http_s, 1),
        "p99_ms": max(row["p99_ms"] for row in load),
        "load": load,
        "max_replicas_seen": max((row[1] for row in watch.samples), default=0),
        "replicas_over_time": watch.samples,
        "step": step_report(step, step_requests, step_samples, step_began, step_ended, settled_before,
                            back_to_min_s) if step else None,
        "overload": {"requests": len(overload), "capacity": capacity, "wall_s": round(overload_wall, 2),
                     **summary(overload, overload_wall)},
        "non_503_errors_under_overload": non_503,
        "lost_accepted_requests": sum(1 for status, _ in overload if status is None),
        "serve_mode": "throughput_optimized" if os.environ.get(THROUGHPUT_ENV) == "1" else "default",
        "brain_batching": batching,
        "brain_batching_speedup": batching["speedup"] if batching else None,
        "wall_s": round(time.perf_counter() - bench_began, 1),
        "phases_s": phases,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    if step:
        report["step"]["plot"] = str(out.with_name(f"{out.stem}_replicas.png"))
        plot_replicas(report, Path(report["step"]["plot"]))
    return write_report(out, report, record)


def min_again_s(samples: list[list[float]], high_end: float) -> float | None:
    """Seconds from the end of the step's high phase until the Hand was back at ``min_replicas`` with none starting."""
    return next((round(row[0] - high_end, 1) for row in samples
                 if row[0] >= high_end and row[1:] == [HAND["min_replicas"], 0]), None)


def step_report(phases: list[tuple[int, float]], requests: list[tuple[float, float, int | None]],
                samples: list[list[float]], began: float, ended: float, settled_before: float | None,
                back_to_min_s: float | None) -> dict[str, Any]:
    """The load step's part of the report: schedule, statuses, replicas and offered load over time."""
    edges, t = [], began
    for clients, seconds in phases:
        edges.append((round(t, 2), clients))
        t += seconds
    clients_at = [next((c for start, c in reversed(edges) if row[0] >= start), 0) if row[0] < ended else 0
                  for row in samples]
    times = [row[0] for row in samples]
    high = max(phases, key=lambda phase: phase[0])
    high_start = edges[phases.index(high)][0]
    codes: dict[str, int] = {}
    for _, _, status in requests:
        codes[str(status)] = codes.get(str(status), 0) + 1
    return {
        "phases": [{"clients": c, "seconds": s} for c, s in phases],
        "began_s": round(began, 2), "ended_s": round(ended, 2), "requests": len(requests), "status": codes,
        "min_replicas_before_s": settled_before,
        "max_replicas": max((row[1] for row in samples), default=0),
        "max_replicas_running_or_starting": max((row[1] + row[2] for row in samples), default=0),
        "first_scale_up_s": next((round(row[0] - high_start, 1) for row in samples
                                  if row[0] >= high_start and row[1] > 1), None),
        "min_again_after_high_s": min_again_s(samples, high_start + high[1]),
        "replicas_at_end": samples[-1][1] if samples else 0,
        "replicas_back_to_min_s": back_to_min_s,
        "replicas_over_time": samples,
        "offered_over_time": [[t, c, n] for t, c, n in zip(times, clients_at, in_flight(requests, times))],
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="8 requests at 1 and 4 clients, no load step, 16 batched analyses (under a minute)")
    parser.add_argument("--throughput-optimized", action="store_true",
                        help=f"run Serve with {THROUGHPUT_ENV}=1 (direct ingress, user code on the replica's loop)")
    parser.add_argument("--requests", type=int, default=64, help="requests per concurrency level")
    parser.add_argument("--levels", default="1,2,4,8,16,32", help="concurrency levels, comma-separated")
    parser.add_argument("--overload-factor", type=int, default=4, help="burst = factor × the Hand's capacity")
    parser.add_argument("--out", type=Path, default=Path("bench/results/serve.json"))
    ns = parser.parse_args(argv)
    record = RunRecord("bench.serve", argv)
    if ns.throughput_optimized:  # read by every Serve process Ray starts from here on
        os.environ[THROUGHPUT_ENV] = "1"
    requests, levels = (8, [1, 4]) if ns.quick else (ns.requests, [int(x) for x in ns.levels.split(",")])
    report = run(requests, levels, ns.overload_factor, ns.out, None if ns.quick else STEP["full"],
                 settle_s=30.0 if ns.quick else 90.0, batching_requests=16 if ns.quick else 64,
                 paired_questions=32 if ns.quick else None, record=record)
    step = report["step"]
    scaled = (f"{step['max_replicas_running_or_starting']} running or starting in the step (back to "
              f"{HAND['min_replicas']} in {step['replicas_back_to_min_s']} s)" if step else "no load step (--quick)")
    print(f"serve ({report['serve_mode']}): overhead p50 {report['overhead_p50_ms']} ms, "
          f"{report['overhead_share_of_question']:.2f} of the in-process question time "
          f"({report['in_process_p50_ms']} ms), p99 {report['p99_ms']} ms, max replicas {report['max_replicas_seen']} "
          f"running, {scaled}, overload {report['overload']['status']} (non-503 errors "
          f"{report['non_503_errors_under_overload']}, lost {report['lost_accepted_requests']}), Brain batching "
          f"{report['brain_batching_speedup']}× → {ns.out}")


if __name__ == "__main__":
    main()
