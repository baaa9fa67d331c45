"""Does the graph engine hold millions of triples? Build time, memory and query time at scale.

    python -m bench.graph_scale --quick          # 300k triples
    python -m bench.graph_scale [--triples N] [--out PATH]

A seeded Freebase-shaped random graph (power-law degrees, 2,000 relations, string names) of N
triples is built by rg (``KnowledgeGraph.from_triples``) and by the baseline, a networkx
``MultiDiGraph`` keyed by triple id, each in a fresh process so that the resident-memory
growth of the build is measured alone (retained after the build, and peak during it; the
string names are shared with the input triples in both, so the figures are the structure's own
cost). rg then answers 2-hop k-hop queries and mixed-direction
all-shortest-path queries between random entity pairs. Writes JSON with the memory ratio
(networkx / rg) and bytes per triple.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import resource
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.machine import RunRecord, write_report

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "graph_scale.json"
BASELINE = "networkx MultiDiGraph"


def make_triples(n: int, seed: int) -> list[tuple[str, str, str]]:
    """``n`` string triples over ``n // 4`` entities with Zipf-like degrees."""
    rng = np.random.default_rng(seed)
    n_ent = max(n // 4, 10)
    heads = np.minimum(rng.zipf(1.6, n) - 1, n_ent - 1)
    tails = rng.integers(0, n_ent, n)
    rels = rng.integers(0, 2000, n)
    return [(f"m.{h:07x}", f"domain.type.rel_{r}", f"m.{t:07x}") for h, r, t in zip(heads, rels, tails)]


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _current_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def _build(kind: str, n: int, seed: int, queue: mp.Queue) -> None:
    """Child process: build one graph; report seconds, retained and peak RSS growth in MB."""
    import gc

    import networkx as nx

    from rg.graph import KnowledgeGraph

    triples = make_triples(n, seed)
    KnowledgeGraph.from_triples(triples[:1000])  # load lazily imported modules before measuring
    gc.collect()
    before, peak_before = _current_mb(), _peak_mb()
    start = time.perf_counter()
    if kind == "rg":
        graph: Any = KnowledgeGraph.from_triples(triples)
    else:
        graph = nx.MultiDiGraph()
        graph.add_edges_from((h, t, i, {"relation": r}) for i, (h, r, t) in enumerate(triples))
    seconds = time.perf_counter() - start
    gc.collect()
    queue.put((seconds, _current_mb() - before, _peak_mb() - peak_before))
    del graph


def measure_build(kind: str, n: int, seed: int) -> tuple[float, float, float]:
    ctx = mp.get_context("spawn")
    queue: mp.Queue = ctx.Queue()
    proc = ctx.Process(target=_build, args=(kind, n, seed, queue))
    proc.start()
    result = queue.get()
    proc.join()
    return result


def measure_queries(n: int, seed: int, queries: int) -> dict[str, float]:
    from rg.graph import KnowledgeGraph

    kg = KnowledgeGraph.from_triples(make_triples(n, seed))
    rng = np.random.default_rng(seed + 1)
    names = kg.entity_names
    picks = rng.integers(0, kg.num_entities, size=(queries, 2))
    start = time.perf_counter()
    sizes = [len(kg.k_hop([names[a]], 2, max_triples=10_000)) for a, _ in picks]
    khop = (time.perf_counter() - start) / queries
    start = time.perf_counter()
    found = sum(bool(kg.shortest_paths(names[a], names[b], "both", max_len=6, max_paths=1000)) for a, b in picks)
    sp = (time.perf_counter() - start) / queries
    return {"khop_ms": khop * 1e3, "mean_khop_triples": float(np.mean(sizes)),
            "shortest_paths_ms": sp * 1e3, "pairs_connected": found / queries,
            "entities": kg.num_entities}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.graph_scale", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="300k triples, fewer queries")
    parser.add_argument("--triples", type=int, default=3_000_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    record = RunRecord("bench.graph_scale", argv)
    n = 300_000 if args.quick else args.triples
    queries = 50 if args.quick else args.queries
    rg_s, rg_mb, rg_peak = measure_build("rg", n, args.seed)
    nx_s, nx_mb, nx_peak = measure_build("networkx", n, args.seed)
    result = {
        "triples": n, "baseline": BASELINE, "seed": args.seed, "quick": args.quick,
        "rg_build_s": rg_s, "rg_build_mb": rg_mb, "rg_build_peak_mb": rg_peak,
        "networkx_build_s": nx_s, "networkx_build_mb": nx_mb, "networkx_build_peak_mb": nx_peak,
        "rg_bytes_per_triple": rg_mb * 2**20 / n, "memory_ratio": nx_mb / rg_mb if rg_mb > 0 else None,
        "build_speedup": nx_s / rg_s, **measure_queries(n, args.seed, queries),
    }
    write_report(args.out, result, record)
    print(
        f"graph_scale: {n:,} triples: rg {rg_mb:.0f} MB / {rg_s:.1f} s vs networkx {nx_mb:.0f} MB / {nx_s:.1f} s "
        f"(memory {result['memory_ratio']:.1f}x less); 2-hop k-hop {result['khop_ms']:.2f} ms, "
        f"shortest paths {result['shortest_paths_ms']:.2f} ms -> {args.out}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
