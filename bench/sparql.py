"""Graph search through Virtuoso over SPARQL against the in-memory engine, on the MetaQA KB.

    python -m bench.sparql --quick
    python -m bench.sparql [--questions N] [--per-entity N] [--seed S] [--out PATH]

Starts a Virtuoso of its own (Debian's ``virtuoso-opensource``) in a temp dir on free ports,
loads the MetaQA KB exported in the Freebase layout, and stops it by its PID at the end.

- **2-hop extraction**: ``k_hop([topic], 2, max_triples=5000)`` for a seeded sample of MetaQA
  test questions, through :class:`~rg.stores.sparql.SparqlStore` with ``VALUES`` batching
  (``batch_size`` 256) and with one query per frontier entity (``batch_size`` 1), both without
  the result cache, and through the in-memory engine (:class:`~rg.stores.memory.MemoryStore`).
  ``batching_speedup`` = per-entity time / batched time (on the questions timed both ways);
  ``vs_memory_ratio`` = batched time / in-memory time.
- **comparisons**: per hop set, k-hop subgraphs (uncapped below 3 hops, and capped at 5000),
  all shortest paths topic → answer (``out`` and ``both``, up to 3 answers) and the groundings
  of the relation paths of those shortest paths, asked of both stores (SPARQL with its cache).
  ``answer_f1_paths``: the answer-F1 weak relation paths (up to the hop count, topic → up to 3
  answers) searched through the store (:mod:`rg.supervision.store_paths`, what
  ``labels.weak.kg`` runs) and on the in-memory graph, compared as scored sets.
  ``identical`` is true when every compared result matched.
"""

from __future__ import annotations

import argparse
import platform
import random
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

from bench.machine import RunRecord, write_report
from rg.data.metaqa import read_metaqa_kb, read_metaqa_questions
from rg.run.paths import require_shared_data
from rg.graph import KnowledgeGraph
from rg.stores.compare import Comparison, SearchCase, compare_stores
from rg.stores.config import SparqlStoreConfig
from rg.stores.memory import MemoryStore
from rg.stores.ntriples import entity_ids, relabel, write_ntriples
from rg.stores.sparql import SparqlStore
from rg.stores.virtuoso import VirtuosoServer
from rg.supervision.answer_paths import score_relation_paths
from rg.supervision.store_paths import score_store_paths
from rg.run.ports import free_ports

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "sparql.json"
CAP = 5000
GRAPH = "http://rg.bench/metaqa"
MAX_ANSWERS = 3


def sample_cases(kg: KnowledgeGraph, ids: list[str], n: int, seed: int) -> dict[int, list[SearchCase]]:
    """A seeded sample of ``n`` test questions per hop file as search cases over store ids."""
    index = {name: i for i, name in enumerate(kg.entity_names.tolist())}
    out = {}
    for hops in (1, 2, 3):
        path = require_shared_data(f"metaqa/qa_test_{hops}hop.txt.gz")
        rows = [q for q in read_metaqa_questions(path, hops=hops, split_name="test")
                if hasattr(q, "q_entities") and all(e in index for e in q.q_entities)]
        rng = random.Random(f"bench.sparql:{seed}:{hops}")
        picked = rng.sample(rows, min(n, len(rows)))
        out[hops] = [SearchCase(tuple(ids[index[e]] for e in q.q_entities), hops,
                                tuple(ids[index[a]] for a in q.answers if a in index)[:MAX_ANSWERS])
                     for q in picked]
    return out


def with_groundings(mem: MemoryStore, cases: list[SearchCase]) -> list[SearchCase]:
    """Each case plus the relation paths of its topic → answer shortest paths (to ground)."""
    out = []
    for c in cases:
        paths = {p.relation_path for s in c.seeds for a in c.answers for p in mem.shortest_paths(s, a, "both", c.hops)}
        out.append(SearchCase(c.seeds, c.hops, c.answers, tuple(sorted(paths))[:5]))
    return out


def scored_set(paths) -> list[tuple]:
    """Scored paths as a sorted list (the two searches may order ties differently)."""
    return sorted((p.relation_path, round(p.f1, 9), round(p.precision, 9), round(p.recall, 9)) for p in paths)


def time_khop(store, cases: list[SearchCase]) -> tuple[list, float]:
    start = time.perf_counter()
    results = [store.k_hop(c.seeds, 2, CAP, "both") for c in cases]
    return results, time.perf_counter() - start


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.sparql", description=__doc__.strip().split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="20 questions per hop, 10 timed one query per entity")
    parser.add_argument("--questions", type=int, default=300, help="questions per hop file")
    parser.add_argument("--per-entity", type=int, default=60, help="questions timed with one query per entity")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    record = RunRecord("bench.sparql", argv)
    n, n_single = (20, 10) if args.quick else (args.questions, args.per_entity)
    wall = time.perf_counter()
    triples = read_metaqa_kb(require_shared_data("metaqa/kb_reconstructed.txt.gz"))
    kg = KnowledgeGraph.from_triples(triples, dedup=True)
    ids = entity_ids(kg).tolist()
    mem = MemoryStore(relabel(kg, entity_ids(kg)))
    cases = sample_cases(kg, ids, n, args.seed)
    with tempfile.TemporaryDirectory(prefix="rg-bench-sparql-") as tmp:
        server = VirtuosoServer(Path(tmp) / "db", *free_ports(2))
        t0 = time.perf_counter()
        server.start(timeout=120)
        start_s = time.perf_counter() - t0
        try:
            t0 = time.perf_counter()
            write_ntriples(kg, Path(tmp) / "kg.nt", SparqlStoreConfig.model_fields["namespace"].default)
            loaded = server.load([Path(tmp) / "kg.nt"], GRAPH)
            load_s = time.perf_counter() - t0
            report = run(server, mem, cases, n_single)
        finally:
            server.stop()
    report.update({
        "quick": args.quick, "seed": args.seed, "questions_per_hop": n, "cap": CAP,
        "graph": {"entities": kg.num_entities, "edges": kg.num_triples, "triples_in_store": loaded},
        "virtuoso": {"start_s": round(start_s, 2), "export_and_load_s": round(load_s, 2)},
        "baseline": "per-entity SPARQL queries (batching); rg in-memory engine (vs_memory_ratio)",
        "versions": {"python": platform.python_version()}, "wall_seconds": round(time.perf_counter() - wall, 1),
    })
    write_report(args.out, report, record, indent=1)
    c = report["comparisons"]
    print(f"bench.sparql: 2-hop batching {report['batching_speedup']}x vs one query per entity, "
          f"{report['vs_memory_ratio']}x the in-memory time; {c['total']} comparisons, {c['mismatches']} mismatches "
          f"(identical={report['identical']}) -> {args.out}")
    return 0


def run(server: VirtuosoServer, mem: MemoryStore, cases: dict[int, list[SearchCase]], n_single: int) -> dict[str, Any]:
    """Time the 2-hop extraction three ways and compare everything; the report without run metadata."""
    base = SparqlStoreConfig(endpoint=server.endpoint, graph=GRAPH)
    batched = SparqlStore(base.model_copy(update={"cache_size": 0}))
    single = SparqlStore(base.model_copy(update={"cache_size": 0, "batch_size": 1}))
    all_cases = [c for hop in sorted(cases) for c in cases[hop]]
    mem.k_hop(all_cases[0].seeds, 1)  # content keys computed once, outside the timing
    mem_results, mem_s = time_khop(mem, all_cases)
    batched_results, batched_s = time_khop(batched, all_cases)
    timed_single = all_cases[:: max(1, len(all_cases) // max(n_single, 1))][:n_single]
    single_results, single_s = time_khop(single, timed_single)
    _, batched_subset_s = time_khop(batched, timed_single)
    same = [a == b for a, b in zip(mem_results, batched_results)]
    same_single = [a == b for a, b in zip(single_results, [mem_results[all_cases.index(c)] for c in timed_single])]
    comparisons = Comparison()
    for a, b in zip(mem_results, batched_results):
        comparisons.check("k_hop_2_timed", a, b, "timed 2-hop")
    for a, b in zip(single_results, same_single):
        comparisons.check("k_hop_2_per_entity", b, True, "per-entity 2-hop")
    cached = SparqlStore(base)
    by_hop = {}
    for hop, hop_cases in cases.items():
        before = comparisons.total
        t0 = time.perf_counter()
        compare_stores(mem, cached, with_groundings(mem, hop_cases), caps=(None, CAP) if hop < 3 else (CAP,),
                       directions=("both",), out=comparisons)
        seconds = time.perf_counter() - t0
        memory_s = store_s = 0.0
        for c in hop_cases:
            t0 = time.perf_counter()
            expected = scored_set(score_relation_paths(mem.kg, c.seeds, c.answers, hop))
            t1 = time.perf_counter()
            got = scored_set(score_store_paths(cached, c.seeds, c.answers, hop))
            memory_s, store_s = memory_s + t1 - t0, store_s + time.perf_counter() - t1
            comparisons.check("answer_f1_paths", expected, got, f"answer-F1 paths from {c.seeds}")
        by_hop[str(hop)] = {"questions": len(hop_cases), "comparisons": comparisons.total - before,
                            "seconds": round(seconds, 1),
                            "answer_f1_ms_per_question": {"memory": round(1000 * memory_s / len(hop_cases), 1),
                                                          "sparql": round(1000 * store_s / len(hop_cases), 1)}}
    queries = [r for r in batched.ledger.records]
    return {
        "batching_speedup": round(single_s / batched_subset_s, 2) if batched_subset_s else None,
        "vs_memory_ratio": round(batched_s / mem_s, 2) if mem_s else None,
        "identical": comparisons.mismatches == 0 and all(same) and all(same_single),
        "khop2": {
            "questions": len(all_cases), "memory_ms_per_question": round(1000 * mem_s / len(all_cases), 2),
            "batched_ms_per_question": round(1000 * batched_s / len(all_cases), 2),
            "per_entity_questions": len(timed_single),
            "per_entity_ms_per_question": round(1000 * single_s / max(len(timed_single), 1), 2),
            "batched_ms_per_question_same_subset": round(1000 * batched_subset_s / max(len(timed_single), 1), 2),
            "batched_queries": len(queries),
            "per_entity_queries": len(single.ledger.records),
            "mean_subgraph_triples": round(sum(len(r) for r in mem_results) / len(mem_results), 1),
            "truncated": sum(r.truncated for r in mem_results),
        },
        "comparisons": comparisons.summary(),
        "comparisons_by_hop": by_hop,
        "cached_store_queries": len(cached.ledger.records),
    }


if __name__ == "__main__":
    raise SystemExit(main())
