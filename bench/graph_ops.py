"""Time rg's graph engine against networkx on the MetaQA KB.

    python -m bench.graph_ops --quick
    python -m bench.graph_ops [--questions N] [--answers K] [--seed S] [--out PATH]

Both engines answer the same seeded sample of MetaQA test questions (1, 2 and 3 hops), and
every pair of answers is checked for equality:

- **k-hop extraction**: rg ``KnowledgeGraph.k_hop([topic], hops, direction="both")`` against
  networkx ``single_source_shortest_path_length`` on the undirected graph (cutoff ``hops - 1``)
  followed by collecting the keys of every in- and out-edge of the nodes reached. Compared as
  sets of triple ids.
- **all shortest paths** from the topic to each answer in three modes: ``q->a`` (triples
  followed head → tail from the topic), ``a->q`` (head → tail from the answer) and ``mixed``
  (either way). networkx ``all_shortest_paths`` (on the ``MultiDiGraph``, or the ``MultiGraph``
  for ``mixed``) gives node sequences, which are expanded over parallel edges into tuples of
  triple ids. Compared as sorted lists of triple-id tuples.

Graph build times are reported apart from query times; speedups are networkx time / rg time.
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import random
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import chain, islice, product
from pathlib import Path
from typing import Any, Callable, Iterator, TypeVar

import networkx as nx
import numpy as np
from tqdm import tqdm

from bench.machine import RunRecord, write_report
from rg.data.metaqa import read_metaqa_kb, read_metaqa_questions
from rg.run.paths import require_shared_data
from rg.data.sample import Question, Triple
from rg.graph.kg import KnowledgeGraph

BASELINE = "networkx MultiDiGraph"
HOP_COUNTS = (1, 2, 3)
PATH_MODES = ("q->a", "a->q", "mixed")
PATH_LIMIT = 100_000
"""A pair with more shortest paths than this in both engines is counted and skipped."""
MAX_EXAMPLES = 10
DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "graph_ops.json"

T = TypeVar("T")


@dataclass(frozen=True)
class Graphs:
    """The MetaQA KB as an rg graph and as networkx multigraphs keyed by rg triple id."""

    kg: KnowledgeGraph
    directed: nx.MultiDiGraph
    undirected: nx.MultiGraph


@dataclass(frozen=True)
class Query:
    """A sampled question: its topic entity and its first answers that are in the KG."""

    question_id: str
    hops: int
    topic: str
    answers: tuple[str, ...]


@dataclass
class Tally:
    """Running totals for one cell of the benchmark (an operation at one hop count / mode)."""

    queries: int = 0
    rg_seconds: float = 0.0
    nx_seconds: float = 0.0
    result_size: int = 0
    largest: int = 0
    empty: int = 0

    def add(self, rg_seconds: float, nx_seconds: float, size: int) -> None:
        self.queries += 1
        self.rg_seconds += rg_seconds
        self.nx_seconds += nx_seconds
        self.result_size += size
        self.largest = max(self.largest, size)
        self.empty += size == 0

    def summary(self, size_name: str) -> dict[str, Any]:
        """Times per query, the speedup and the mean result size (named ``size_name``)."""
        n = max(self.queries, 1)
        return {
            "queries": self.queries,
            "rg_ms_per_query": 1e3 * self.rg_seconds / n,
            "networkx_ms_per_query": 1e3 * self.nx_seconds / n,
            "rg_seconds": self.rg_seconds,
            "networkx_seconds": self.nx_seconds,
            "speedup": speedup(self.nx_seconds, self.rg_seconds),
            size_name: self.result_size / n,
            "largest_result": self.largest,
            "empty_results": self.empty,
        }


def merge(tallies: list[Tally]) -> Tally:
    """The sum of several tallies."""
    total = Tally()
    for t in tallies:
        total.queries += t.queries
        total.rg_seconds += t.rg_seconds
        total.nx_seconds += t.nx_seconds
        total.result_size += t.result_size
        total.largest = max(total.largest, t.largest)
        total.empty += t.empty
    return total


@dataclass
class Checks:
    """How many results were compared, how many differed, and the first differences."""

    compared: int = 0
    mismatches: int = 0
    examples: list[dict[str, Any]] = field(default_factory=list)

    def add(self, same: bool, describe: Callable[[], dict[str, Any]]) -> None:
        """Count one comparison; ``describe`` is called only for a mismatch."""
        self.compared += 1
        if not same:
            self.mismatches += 1
            if len(self.examples) < MAX_EXAMPLES:
                self.examples.append(describe())


def speedup(baseline_seconds: float, rg_seconds: float) -> float | None:
    return baseline_seconds / rg_seconds if rg_seconds > 0 else None


def timed(fn: Callable[..., T], *args: Any) -> tuple[T, float]:
    """``fn(*args)`` and the wall time it took, with the garbage collector off (as ``timeit``).

    The networkx graphs hold millions of Python objects; a collection triggered inside one
    call would otherwise charge that call for walking them all.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        start = time.perf_counter()
        result = fn(*args)
        return result, time.perf_counter() - start
    finally:
        if enabled:
            gc.enable()


@contextmanager
def frozen_heap() -> Iterator[None]:
    """Exempt the objects alive now (the graphs) from garbage collection inside the block."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


# ----------------------------------------------------------------------------- data, graphs
def read_kb() -> list[Triple]:
    return list(read_metaqa_kb(require_shared_data("metaqa/kb_reconstructed.txt.gz")))


def build_nx(graph_class: type[nx.MultiGraph], triples: list[Triple]) -> nx.MultiGraph:
    """A networkx multigraph of ``triples`` whose edge keys are the triple ids."""
    graph = graph_class()
    graph.add_edges_from((head, tail, tid) for tid, (head, _, tail) in enumerate(triples))
    return graph


def load_graphs() -> tuple[Graphs, dict[str, float]]:
    """Read the KB and build both engines' graphs, timing each step."""
    triples, read_s = timed(read_kb)
    kg, rg_s = timed(KnowledgeGraph.from_triples, triples)
    directed, directed_s = timed(build_nx, nx.MultiDiGraph, triples)
    undirected, undirected_s = timed(build_nx, nx.MultiGraph, triples)
    seconds = {
        "kb_read": read_s,
        "rg": rg_s,
        "networkx_multidigraph": directed_s,
        "networkx_multigraph": undirected_s,
        "networkx_total": directed_s + undirected_s,
        "speedup": speedup(directed_s + undirected_s, rg_s),
    }
    return Graphs(kg, directed, undirected), seconds


def sample_queries(
    kg: KnowledgeGraph, per_hop: int, max_answers: int, seed: int
) -> tuple[list[Query], dict[str, dict[int, int]]]:
    """A seeded sample of ``per_hop`` test questions per hop file, as queries on ``kg``.

    Questions whose topic entity is not in the KG are skipped; answers not in the KG and
    answers past the first ``max_answers`` are dropped. All three are counted per hop.
    """
    rng = random.Random(seed)
    kinds = ("bad_rows", "topic_not_in_kg", "answers_not_in_kg", "answers_over_cap")
    skipped = {kind: {hops: 0 for hops in HOP_COUNTS} for kind in kinds}
    queries = []
    for hops in HOP_COUNTS:
        path = require_shared_data(f"metaqa/qa_test_{hops}hop.txt.gz")
        rows = list(read_metaqa_questions(path, hops, "test"))
        questions = [q for q in rows if isinstance(q, Question)]
        skipped["bad_rows"][hops] = len(rows) - len(questions)
        for q in rng.sample(questions, min(per_hop, len(questions))):
            topic = q.q_entities[0]  # MetaQA names exactly one topic entity per question
            if not kg.has_entity(topic):
                skipped["topic_not_in_kg"][hops] += 1
                continue
            answers = list(dict.fromkeys(q.answers))
            present = [a for a in answers if kg.has_entity(a)]
            skipped["answers_not_in_kg"][hops] += len(answers) - len(present)
            skipped["answers_over_cap"][hops] += max(len(present) - max_answers, 0)
            queries.append(Query(q.id, hops, topic, tuple(present[:max_answers])))
    return queries, skipped


# ----------------------------------------------------------------------------- the engines
def rg_khop(kg: KnowledgeGraph, topic: str, hops: int) -> np.ndarray:
    return kg.k_hop([topic], hops, max_triples=None, direction="both").triple_ids


def nx_khop(graphs: Graphs, topic: str, hops: int) -> set[int]:
    """Keys of the edges incident to any node at undirected distance < ``hops`` from ``topic``."""
    near = nx.single_source_shortest_path_length(graphs.undirected, topic, cutoff=hops - 1)
    keys = {key for _, _, key in graphs.directed.out_edges(near, keys=True)}
    keys.update(key for _, _, key in graphs.directed.in_edges(near, keys=True))
    return keys


def rg_paths(kg: KnowledgeGraph, source: str, target: str, mode: str) -> list[tuple[int, ...]]:
    """rg's shortest paths as triple-id tuples (at most ``PATH_LIMIT + 1``)."""
    direction = "both" if mode == "mixed" else "out"
    paths = kg.shortest_paths(source, target, direction, max_paths=PATH_LIMIT + 1)
    return [p.triple_ids for p in paths]


def nx_paths(graph: nx.MultiGraph, source: str, target: str) -> set[tuple[int, ...]]:
    """networkx's shortest paths expanded to triple-id tuples (at most ``PATH_LIMIT + 1``)."""
    try:
        node_paths = nx.all_shortest_paths(graph, source, target)
        edge_paths = chain.from_iterable(edge_choices(graph, nodes) for nodes in node_paths)
        return set(islice(edge_paths, PATH_LIMIT + 1))
    except nx.NetworkXNoPath:
        return set()


def edge_choices(graph: nx.MultiGraph, nodes: list[str]) -> Iterator[tuple[int, ...]]:
    """Every choice of one edge key per consecutive node pair of ``nodes``.

    ``graph[u][v]`` holds the keys of the ``u → v`` edges in a ``MultiDiGraph`` and of the
    edges either way between ``u`` and ``v`` in a ``MultiGraph``.
    """
    return product(*(graph[u][v] for u, v in zip(nodes, nodes[1:])))


def path_ends(query: Query, answer: str, mode: str) -> tuple[str, str]:
    return (answer, query.topic) if mode == "a->q" else (query.topic, answer)


# ----------------------------------------------------------------------------- the runs
def warm_up(graphs: Graphs, query: Query) -> None:
    """Run every call once, untimed, so first-call costs do not land in the figures."""
    rg_khop(graphs.kg, query.topic, query.hops)
    nx_khop(graphs, query.topic, query.hops)
    for mode in PATH_MODES:
        source, target = path_ends(query, query.answers[0], mode)
        rg_paths(graphs.kg, source, target, mode)
        nx_paths(graphs.undirected if mode == "mixed" else graphs.directed, source, target)


def run_khop(graphs: Graphs, queries: list[Query], checks: Checks) -> dict[int, Tally]:
    """Time and compare k-hop extraction for every query; tallies by hop count."""
    tallies = {hops: Tally() for hops in HOP_COUNTS}
    for q in tqdm(queries, desc="k-hop", unit="q"):
        rg_ids, rg_s = timed(rg_khop, graphs.kg, q.topic, q.hops)
        nx_ids, nx_s = timed(nx_khop, graphs, q.topic, q.hops)
        rg_set = set(rg_ids.tolist())
        tallies[q.hops].add(rg_s, nx_s, len(rg_set))
        same = rg_set == nx_ids and len(rg_set) == rg_ids.size
        checks.add(same, lambda: {"operation": "k_hop", "question": q.question_id, "topic": q.topic,
                                  "hops": q.hops, **difference(rg_ids.tolist(), nx_ids)})
    return tallies


def run_paths(
    graphs: Graphs, queries: list[Query], checks: Checks
) -> tuple[dict[tuple[int, str], Tally], int]:
    """Time and compare all shortest paths for every (question, answer, mode).

    Returns:
        Tallies by (hop count, mode) and the number of pairs skipped for exceeding
        ``PATH_LIMIT`` paths in both engines.
    """
    tallies = {(hops, mode): Tally() for hops in HOP_COUNTS for mode in PATH_MODES}
    over_limit = 0
    for q in tqdm(queries, desc="shortest paths", unit="q"):
        for answer in q.answers:
            for mode in PATH_MODES:
                source, target = path_ends(q, answer, mode)
                graph = graphs.undirected if mode == "mixed" else graphs.directed
                rg_found, rg_s = timed(rg_paths, graphs.kg, source, target, mode)
                nx_found, nx_s = timed(nx_paths, graph, source, target)
                if len(rg_found) > PATH_LIMIT and len(nx_found) > PATH_LIMIT:
                    over_limit += 1
                    continue
                tallies[(q.hops, mode)].add(rg_s, nx_s, len(rg_found))
                checks.add(sorted(rg_found) == sorted(nx_found),
                           lambda: {"operation": "shortest_paths", "question": q.question_id,
                                    "mode": mode, "source": source, "target": target,
                                    **difference(rg_found, nx_found)})
    return tallies, over_limit


def difference(rg_items: list, nx_items: set) -> dict[str, Any]:
    """Sizes of two results and a few items found by only one side."""
    rg_set = set(rg_items)
    return {
        "rg_count": len(rg_items),
        "networkx_count": len(nx_items),
        "rg_duplicates": len(rg_items) - len(rg_set),
        "only_rg": sorted(rg_set - nx_items)[:MAX_EXAMPLES],
        "only_networkx": sorted(nx_items - rg_set)[:MAX_EXAMPLES],
    }


# ----------------------------------------------------------------------------- report
def khop_report(tallies: dict[int, Tally]) -> dict[str, Any]:
    return {
        "by_hop": {hops: t.summary("mean_subgraph_triples") for hops, t in tallies.items()},
        "all": merge(list(tallies.values())).summary("mean_subgraph_triples"),
    }


def paths_report(tallies: dict[tuple[int, str], Tally], over_limit: int) -> dict[str, Any]:
    def cells(keep: Callable[[int, str], bool]) -> dict[str, Any]:
        return merge([t for (h, m), t in tallies.items() if keep(h, m)]).summary("mean_paths")

    by_hop = {
        hops: {**{m: tallies[(hops, m)].summary("mean_paths") for m in PATH_MODES},
               "all": cells(lambda h, m, hops=hops: h == hops)}
        for hops in HOP_COUNTS
    }
    return {
        "by_hop": by_hop,
        "by_mode": {mode: cells(lambda h, m, mode=mode: m == mode) for mode in PATH_MODES},
        "all": cells(lambda h, m: True),
        "path_limit": PATH_LIMIT,
        "pairs_over_path_limit": over_limit,
    }


def run(per_hop: int, max_answers: int, seed: int, quick: bool) -> dict[str, Any]:
    """Load, sample, warm up, run both operations and return the report."""
    start = time.perf_counter()
    graphs, build_seconds = load_graphs()
    queries, skipped = sample_queries(graphs.kg, per_hop, max_answers, seed)
    if not queries:
        raise ValueError("no sampled question has its topic entity in the KG")
    checks = Checks()
    with frozen_heap():
        warm_up(graphs, queries[0])
        khop = khop_report(run_khop(graphs, queries, checks))
        paths = paths_report(*run_paths(graphs, queries, checks))
    return {
        "benchmark": "graph_ops",
        "baseline": BASELINE,
        "speedup_khop": khop["all"]["speedup"],
        "speedup_shortest_paths": paths["all"]["speedup"],
        "identical": checks.mismatches == 0,
        "questions": len(queries),
        "pairs": sum(len(q.answers) for q in queries),
        "quick": quick,
        "seed": seed,
        "questions_per_hop": per_hop,
        "max_answers_per_question": max_answers,
        "graph": {"entities": graphs.kg.num_entities, "relations": graphs.kg.num_relations,
                  "triples": graphs.kg.num_triples},
        "build_seconds": build_seconds,
        "khop": khop,
        "shortest_paths": paths,
        "skipped": skipped,
        "comparisons": checks.compared,
        "mismatches": checks.mismatches,
        "mismatch_examples": checks.examples,
        "versions": {"python": platform.python_version(), "numpy": np.__version__,
                     "networkx": nx.__version__},
        "cpus": os.cpu_count(),
        "timing": "perf_counter per call, one warm-up, gc off inside timed calls, graphs gc-frozen",
        "wall_seconds": time.perf_counter() - start,
    }


def summary_line(report: dict[str, Any]) -> str:
    def times(value: float | None) -> str:
        return "n/a" if value is None else f"{value:.1f}x"

    modes = report["shortest_paths"]["by_mode"]
    per_mode = ", ".join(f"{m} {times(modes[m]['speedup'])}" for m in PATH_MODES)
    return (
        f"graph_ops: khop {times(report['speedup_khop'])}, shortest paths "
        f"{times(report['speedup_shortest_paths'])} ({per_mode}) vs networkx, "
        f"identical={report['identical']}, {report['questions']} questions"
    )


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text}")
    return value


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.graph_ops", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="40 questions per hop, 1 answer each")
    parser.add_argument("--questions", type=positive_int, help="questions per hop file (default 300)")
    parser.add_argument("--answers", type=positive_int, help="answers per question for paths (default 5)")
    parser.add_argument("--seed", type=int, default=0, help="sampling seed (default 0)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON path (default bench/results/graph_ops.json)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    record = RunRecord("bench.graph_ops", argv)
    per_hop = args.questions or (40 if args.quick else 300)
    answers = args.answers or (1 if args.quick else 5)
    report = run(per_hop, answers, args.seed, args.quick)
    write_report(args.out, report, record)
    print(summary_line(report))
    return report


if __name__ == "__main__":
    main()
