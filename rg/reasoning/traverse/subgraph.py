"""The growing subgraph S of a traversal: nodes, the edges that added them, and their frontier.

S starts as the seed entities with no edges (ReMindRAG Algorithm 1). Each node added later has
exactly one *parent* edge, the edge that brought it in (by replay or by an expansion step), so
S is a forest rooted at the seeds and every node has one path back to a seed
(:meth:`Subgraph.path_to`): the paths the memorisation step enhances.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

Triple = tuple[str, str, str]


@dataclass(frozen=True)
class Candidate:
    """An edge from a node of S to a node outside it: triple index, the node it leaves, the node it reaches."""

    tid: int
    source: str
    target: str


class Subgraph:
    """S over one question's triples.

    Args:
        triples: The question's subgraph triples (indices are the triple ids used everywhere here).
        seeds: Seed entities (those not in any triple are dropped).
    """

    def __init__(self, triples: Sequence[Triple], seeds: Sequence[str]) -> None:
        self.triples = [tuple(t) for t in triples]
        self.adj: dict[str, list[tuple[int, str]]] = {}
        for i, (h, _, t) in enumerate(self.triples):
            self.adj.setdefault(h, []).append((i, t))
            if t != h:
                self.adj.setdefault(t, []).append((i, h))
        self.seeds = tuple(dict.fromkeys(s for s in seeds if s in self.adj))
        self.nodes: list[str] = list(self.seeds)
        self.parent: dict[str, int | None] = {s: None for s in self.seeds}
        self.edges: list[int] = []
        self.origin: dict[int, str] = {}

    def __contains__(self, node: object) -> bool:
        return node in self.parent

    def add(self, tid: int, source: str, origin: str) -> str | None:
        """Add triple ``tid`` entered from ``source`` (a node of S); returns the new node, None if none is new."""
        if source not in self.parent:
            raise ValueError(f"{source!r} is not in the subgraph")
        h, _, t = self.triples[tid]
        target = t if h == source else h
        if tid not in self.origin:
            self.edges.append(tid)
            self.origin[tid] = origin
        if target in self.parent:
            return None
        self.nodes.append(target)
        self.parent[target] = tid
        return target

    def candidates(self, node: str) -> list[Candidate]:
        """Edges from ``node`` to nodes outside S (S_a of Algorithm 1), in triple order."""
        return [Candidate(tid, node, other) for tid, other in self.adj.get(node, ()) if other not in self.parent]

    def frontier(self) -> list[Candidate]:
        """Every candidate edge of every node of S, nodes in the order they joined."""
        return [c for n in self.nodes for c in self.candidates(n)]

    def path_to(self, node: str) -> list[int]:
        """Triple ids of the parent edges from a seed to ``node`` (seed first); [] for a seed."""
        path: list[int] = []
        seen = {node}
        while (tid := self.parent.get(node)) is not None:
            path.append(tid)
            h, _, t = self.triples[tid]
            node = t if h == node else h
            if node in seen:  # cannot happen: a node's parent edge comes from a node added before it
                raise RuntimeError("the parent edges of the subgraph form a cycle")
            seen.add(node)
        return path[::-1]

    def render(self, tid: int) -> str:
        h, r, t = self.triples[tid]
        return f"{h} -> {r} -> {t}"
