"""Check that two stores answer the same searches identically, counting every comparison.

Used by the tests, ``bench.sparql`` and the MetaQA comparison: the same k-hop subgraphs (with
and without a cap), all shortest paths and relation-path groundings asked of two
:class:`~rg.stores.base.KGStore` s holding one graph.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Sequence

from rg.stores.base import KGStore, path_key


@dataclass(frozen=True)
class SearchCase:
    """One question's searches: seeds, the radius, answers to reach and relation paths to ground."""

    seeds: tuple[str, ...]
    hops: int
    answers: tuple[str, ...] = ()
    relation_paths: tuple[tuple[str, ...], ...] = ()


@dataclass
class Comparison:
    """Counts of compared results by kind, mismatches by kind, and the first few mismatches."""

    compared: Counter = field(default_factory=Counter)
    mismatched: Counter = field(default_factory=Counter)
    examples: list[str] = field(default_factory=list)

    @property
    def total(self) -> int:
        return sum(self.compared.values())

    @property
    def mismatches(self) -> int:
        return sum(self.mismatched.values())

    def check(self, kind: str, a: object, b: object, what: str) -> None:
        self.compared[kind] += 1
        if a != b:
            self.mismatched[kind] += 1
            if len(self.examples) < 5:
                self.examples.append(f"{kind} {what}")

    def summary(self) -> dict:
        return {"compared": dict(self.compared), "total": self.total, "mismatches": self.mismatches,
                "mismatched": dict(self.mismatched), "examples": self.examples}


def compare_stores(a: KGStore, b: KGStore, cases: Sequence[SearchCase], caps: Sequence[int | None] = (None, 100),
                   directions: Sequence[str] = ("both",), out: Comparison | None = None) -> Comparison:
    """Ask ``a`` and ``b`` the searches of every case; return the counts.

    Per case: k-hop for each cap and direction (triples, entities and the truncation flag); all
    shortest paths seed → answer in ``out`` and ``both`` orientation (at most ``hops`` long);
    every relation path grounded from every seed.
    """
    result = out if out is not None else Comparison()
    for case in cases:
        for direction in directions:
            for cap in caps:
                x = a.k_hop(case.seeds, case.hops, cap, direction)  # type: ignore[arg-type]
                y = b.k_hop(case.seeds, case.hops, cap, direction)  # type: ignore[arg-type]
                result.check("k_hop", x, y, f"{case.seeds} hops={case.hops} cap={cap} {direction}")
        for seed in case.seeds:
            for answer in case.answers:
                for direction in ("out", "both"):
                    x = [path_key(p) for p in a.shortest_paths(seed, answer, direction, case.hops)]  # type: ignore[arg-type]
                    y = [path_key(p) for p in b.shortest_paths(seed, answer, direction, case.hops)]  # type: ignore[arg-type]
                    result.check("shortest_paths", x, y, f"{seed} -> {answer} {direction}")
            for rel_path in case.relation_paths:
                x = [path_key(p) for p in a.ground(seed, rel_path)]
                y = [path_key(p) for p in b.ground(seed, rel_path)]
                result.check("ground", x, y, f"{seed} {rel_path}")
    return result
