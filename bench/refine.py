"""Is the refinement job LLM-bound? Throughput against the ideal pool × concurrency / latency.

    python -m bench.refine --quick
    python -m bench.refine [--latency S] [--concurrency C] [--pools 1,2,4] [--waves W] [--out PATH]

The job (``rg.supervision.job.refine`` with the LLM selector) runs on synthetic questions
against the scripted OpenAI-compatible server (127.0.0.1), which answers every call after a
fixed artificial latency. For each actor-pool size the LLM phase is timed at the server, from
the first request received to the last answer sent; throughput is questions per second over
that span, and the baseline is the ideal ``pool × concurrency / latency`` of a perfectly
overlapped client. Efficiency is their ratio (target ≥ 0.8). Ray start-up and actor creation
are reported separately as job wall time. The machine's load average before and after is
recorded too: on a shared machine the job's CPU work (candidate pools, Ray Data's scheduling)
waits for a core, which lowers the efficiency.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from rg.data.rog import write_rog_parquet
from rg.data.subgraphs import SubgraphConfig, build_sample
from rg.data.synthetic import SyntheticConfig, generate
from rg.graph import KnowledgeGraph
from rg.runtime import RayConfig, init_ray
from rg.supervision.job import RefineConfig, refine
from tests.scripted_server import Reply, Script, ScriptedServer

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "refine.json"


def write_samples(n: int, path: Path) -> None:
    """``n`` synthetic questions with subgraphs (the generator's 200 reused under new ids)."""
    data = generate(SyntheticConfig())
    kg = KnowledgeGraph.from_triples(data.triples)
    base = [build_sample(kg, q, SubgraphConfig(max_triples=300)).sample for q in data.questions]
    write_rog_parquet([replace(base[i % len(base)], id=f"bench-{i:06d}") for i in range(n)], path)


def run_pool(samples: Path, out: Path, pool: int, concurrency: int, latency: float) -> dict[str, Any]:
    with ScriptedServer(Script.always(Reply("ans: Path 1"), latency_s=latency)) as srv:
        cfg = RefineConfig.model_validate({
            "input": str(samples), "output_dir": str(out), "selector": "llm",
            "llm": {"llm": {"base_url": srv.base_url, "model": "scripted", "max_concurrency": concurrency}},
            "num_actors": pool, "actor_cpus": 0.25, "batch_size": concurrency, "calls_per_actor": 4,
        })
        start = time.perf_counter()
        report = refine(cfg, progress=False)
        wall = time.perf_counter() - start
        arrivals = [r.received_at for r in srv.chat_requests]
    span = max(arrivals) - min(arrivals) + latency
    throughput = len(arrivals) / span
    ideal = pool * concurrency / latency
    return {
        "pool_size": pool, "concurrency": concurrency, "latency_s": latency, "questions": report["questions"],
        "llm_calls": len(arrivals), "llm_phase_s": span, "job_wall_s": wall,
        "throughput_qps": throughput, "ideal_qps": ideal, "efficiency": throughput / ideal,
        "refined": report["refined"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.refine", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="pools 1,2,4 with 10 waves at 0.2 s latency")
    parser.add_argument("--latency", type=float, default=0.5, help="seconds per LLM call")
    parser.add_argument("--concurrency", type=int, default=8, help="in-flight calls per actor")
    parser.add_argument("--pools", default="1,2,4", help="actor-pool sizes to try")
    parser.add_argument("--waves", type=int, default=30, help="questions per run = waves × pool × concurrency")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    latency = 0.2 if args.quick else args.latency
    waves = 10 if args.quick else args.waves
    pools = [int(p) for p in args.pools.split(",")]
    init_ray(RayConfig(num_cpus=2))
    load_before = list(os.getloadavg())
    rows = []
    with tempfile.TemporaryDirectory(prefix="rg-bench-refine-") as tmp:
        for pool in pools:
            samples = Path(tmp) / f"samples-{pool}.parquet"
            write_samples(waves * pool * args.concurrency, samples)
            rows.append(run_pool(samples, Path(tmp) / f"out-{pool}", pool, args.concurrency, latency))
    result = {"baseline": "ideal pool × concurrency / latency", "quick": args.quick, "by_pool": rows,
              "min_efficiency": min(r["efficiency"] for r in rows),
              "load_average_before_after": [load_before, list(os.getloadavg())]}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print("refine: " + ", ".join(
        f"pool {r['pool_size']}: {r['throughput_qps']:.1f}/{r['ideal_qps']:.1f} q/s (eff {r['efficiency']:.2f})" for r in rows
    ) + f" -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
