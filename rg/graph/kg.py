"""An in-memory knowledge graph: integer vocabularies, triple arrays and CSR in both directions.

Built once from string triples; every query works on numpy arrays, so graphs with millions of
triples fit in memory (about 40 bytes per triple plus the name tables) and neighbourhood
expansion is vectorised over whole BFS frontiers. Parallel relations between the same pair of
entities are distinct triples and are never collapsed.
"""

from __future__ import annotations

from typing import Iterable, Literal, Sequence

import numpy as np
import pandas as pd

from rg.graph import search
from rg.graph.search import CutOrder, Subgraph
from rg.graph.arrays import gather, unique_ids
from rg.graph.path import Path

Direction = Literal["out", "in", "both"]
Triple = tuple[str, str, str]


class KnowledgeGraph:
    """Directed multigraph of ``(head, relation, tail)`` triples over integer ids.

    Attributes:
        entity_names: ``(E,)`` object array, id → entity name.
        relation_names: ``(R,)`` object array, id → relation name.
        head, rel, tail: ``(T,)`` int64 arrays, one entry per triple (input order kept).
        out_ptr, out_idx: CSR of triples by head (``out_idx[out_ptr[e]:out_ptr[e+1]]``).
        in_ptr, in_idx: CSR of triples by tail.
    """

    def __init__(
        self,
        entity_names: np.ndarray,
        relation_names: np.ndarray,
        head: np.ndarray,
        rel: np.ndarray,
        tail: np.ndarray,
    ) -> None:
        if not (head.shape == rel.shape == tail.shape):
            raise ValueError("head, rel and tail must have the same length")
        self.entity_names = entity_names
        self.relation_names = relation_names
        self.head = head.astype(np.int64, copy=False)
        self.rel = rel.astype(np.int64, copy=False)
        self.tail = tail.astype(np.int64, copy=False)
        self._entity_index = pd.Index(entity_names)
        self._relation_index = pd.Index(relation_names)
        n = len(entity_names)
        self.out_ptr, self.out_idx = _csr(self.head, n)
        self.in_ptr, self.in_idx = _csr(self.tail, n)

    # ----------------------------------------------------------------------------- building
    @classmethod
    def from_triples(cls, triples: Iterable[Sequence[str]], dedup: bool = False) -> "KnowledgeGraph":
        """Build a graph from string triples.

        Args:
            triples: ``(head, relation, tail)`` strings. Triple ids follow input order, so a
                Sample's triple ``i`` is triple id ``i`` of the graph built from it.
            dedup: Drop exact repeats of a ``(head, relation, tail)`` (keeping the first).
                Parallel relations (same pair, different relation) are always kept.
        """
        rows = list(triples)
        bad = next((i for i, t in enumerate(rows) if len(t) != 3), None)
        if bad is not None:
            raise ValueError(f"triple {bad} has {len(rows[bad])} parts, expected 3: {rows[bad]!r}")
        arr = np.empty((len(rows), 3), dtype=object)
        if rows:
            arr[:] = rows
        n = len(rows)
        ent_codes, ent_names = pd.factorize(np.concatenate([arr[:, 0], arr[:, 2]]), sort=False)
        rel_codes, rel_names = pd.factorize(arr[:, 1], sort=False)
        head, tail = ent_codes[:n], ent_codes[n:]
        if dedup and n:
            keys = np.stack([head, rel_codes, tail], axis=1)
            _, first = np.unique(keys, axis=0, return_index=True)
            keep = np.sort(first)
            head, rel_codes, tail = head[keep], rel_codes[keep], tail[keep]
        return cls(
            np.asarray(ent_names, dtype=object),
            np.asarray(rel_names, dtype=object),
            head,
            rel_codes,
            tail,
        )

    # ------------------------------------------------------------------------------ lookups
    @property
    def num_entities(self) -> int:
        return len(self.entity_names)

    @property
    def num_relations(self) -> int:
        return len(self.relation_names)

    @property
    def num_triples(self) -> int:
        return int(self.head.size)

    def __len__(self) -> int:
        return self.num_triples

    def __repr__(self) -> str:
        return (
            f"KnowledgeGraph(entities={self.num_entities}, relations={self.num_relations}, "
            f"triples={self.num_triples})"
        )

    def has_entity(self, name: str) -> bool:
        return name in self._entity_index

    def entity_id(self, name: str) -> int:
        """Id of an entity name; raises KeyError naming it when absent."""
        try:
            return int(self._entity_index.get_loc(name))
        except KeyError:
            raise KeyError(f"entity {name!r} is not in the graph") from None

    def entity_ids(self, names: Sequence[str]) -> np.ndarray:
        """Ids of several entity names; raises KeyError listing the absent ones."""
        index = self._entity_index
        if len(names) <= 8:  # get_indexer builds an Index per call; get_loc is cheaper here
            ids = np.array([index.get_loc(n) if n in index else -1 for n in names], dtype=np.int64)
        else:
            ids = index.get_indexer(list(names))
        if (ids < 0).any():
            missing = [n for n, i in zip(names, ids) if i < 0]
            raise KeyError(f"entities not in the graph: {missing[:5]}")
        return ids.astype(np.int64)

    def relation_id(self, name: str) -> int:
        """Id of a relation name; raises KeyError naming it when absent."""
        try:
            return int(self._relation_index.get_loc(name))
        except KeyError:
            raise KeyError(f"relation {name!r} is not in the graph") from None

    def has_relation(self, name: str) -> bool:
        return name in self._relation_index

    def triple(self, tid: int) -> Triple:
        """The string form of triple ``tid``."""
        return (
            self.entity_names[self.head[tid]],
            self.relation_names[self.rel[tid]],
            self.entity_names[self.tail[tid]],
        )

    def triples(self, tids: Iterable[int] | np.ndarray | None = None) -> list[Triple]:
        """String triples for ``tids`` (all triples when None), in the given order."""
        idx = np.arange(self.num_triples) if tids is None else np.asarray(tids, dtype=np.int64)
        h = self.entity_names[self.head[idx]]
        r = self.relation_names[self.rel[idx]]
        t = self.entity_names[self.tail[idx]]
        return list(zip(h.tolist(), r.tolist(), t.tolist()))

    # ------------------------------------------------------------------------ neighbourhoods
    def incident(
        self, nodes: np.ndarray, direction: Direction = "both"
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Triples incident to ``nodes``, the node at their other end, and where they came from.

        Args:
            nodes: ``(N,)`` entity ids.
            direction: ``out`` follows triples from their head, ``in`` from their tail,
                ``both`` does both.

        Returns:
            ``(triple_ids, other_ends, source)``, each ``(M,)``; ``source[i]`` is the position in
            ``nodes`` of the node triple ``i`` was reached from. ``out`` rows come first.
        """
        nodes = np.asarray(nodes, dtype=np.int64)
        parts = []
        if direction in ("out", "both"):
            e, src = gather(self.out_ptr, self.out_idx, nodes)
            parts.append((e, self.tail[e], src))
        if direction in ("in", "both"):
            e, src = gather(self.in_ptr, self.in_idx, nodes)
            parts.append((e, self.head[e], src))
        if len(parts) == 1:
            return parts[0]
        return tuple(np.concatenate(cols) for cols in zip(*parts))  # type: ignore[return-value]

    def degree(self, nodes: np.ndarray, direction: Direction = "both") -> np.ndarray:
        """Number of incident triples per node (``(N,)``)."""
        nodes = np.asarray(nodes, dtype=np.int64)
        deg = np.zeros(nodes.shape, dtype=np.int64)
        if direction in ("out", "both"):
            deg += self.out_ptr[nodes + 1] - self.out_ptr[nodes]
        if direction in ("in", "both"):
            deg += self.in_ptr[nodes + 1] - self.in_ptr[nodes]
        return deg

    def neighbourhood(self, entity: str, direction: Direction = "both") -> np.ndarray:
        """Ids of the one-hop triples of ``entity`` (sorted, each once, self-loops included once)."""
        e, _, _ = self.incident(np.array([self.entity_id(entity)]), direction)
        return unique_ids(e)

    # ------------------------------------------------------------------------------ search
    def k_hop(
        self,
        seeds: Sequence[str],
        hops: int,
        max_triples: int | None = None,
        direction: Direction = "both",
        cut: CutOrder = "walk",
        tie_key: np.ndarray | None = None,
    ) -> Subgraph:
        """Triples within ``hops`` of the seeds; see :func:`rg.graph.search.k_hop`."""
        return search.k_hop(self, self.entity_ids(seeds), hops, max_triples, direction, cut, tie_key)

    def shortest_paths(
        self,
        source: str,
        target: str,
        direction: Direction = "out",
        max_len: int | None = None,
        max_paths: int | None = None,
    ) -> list[Path]:
        """All shortest paths ``source`` → ``target``; see :func:`rg.graph.search.all_shortest_paths`."""
        return search.all_shortest_paths(
            self, self.entity_id(source), self.entity_id(target), direction, max_len, max_paths
        )

    def ground(self, start: str, relation_path: Sequence[str], max_paths: int | None = None) -> list[Path]:
        """Walk a relation path from ``start``; see :func:`rg.graph.search.ground`."""
        return search.ground(self, self.entity_id(start), relation_path, max_paths)

    def path_triples(self, starts: Sequence[str], relation_path: Sequence[str]) -> np.ndarray:
        """Triple ids on any walk of ``relation_path`` from ``starts`` (names absent from the
        graph are ignored); see :func:`rg.graph.search.path_triples`."""
        return search.path_triples(self, self._present_ids(starts), relation_path)

    def path_step_triples(self, starts: Sequence[str], relation_path: Sequence[str]) -> list[np.ndarray]:
        """Per step, the triple ids on walks of ``relation_path`` from ``starts`` (absent names
        ignored); see :func:`rg.graph.search.path_step_triples`."""
        return search.path_step_triples(self, self._present_ids(starts), relation_path)

    def path_end_walks(self, start: str, relation_path: Sequence[str]) -> list[Path]:
        """One walk of ``relation_path`` from ``start`` per end entity, not passing back through
        ``start`` (empty when ``start`` is absent); see :func:`rg.graph.search.path_end_walks`."""
        if not self.has_entity(start):
            return []
        return search.path_end_walks(self, self.entity_id(start), relation_path)

    def _present_ids(self, names: Sequence[str]) -> np.ndarray:
        return np.array([self.entity_id(n) for n in dict.fromkeys(names) if self.has_entity(n)], dtype=np.int64)

    def connecting_paths(
        self, topics: Sequence[str], max_len: int, max_paths: int | None = None
    ) -> list[Path]:
        """Shortest walks through all topics; see :func:`rg.graph.search.connect_all`."""
        return search.connect_all(self, self.entity_ids(topics), max_len, max_paths)


def _csr(keys: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """CSR (indptr, triple ids sorted by key, stable) for integer ``keys`` over ``n`` rows."""
    order = np.argsort(keys, kind="stable").astype(np.int64)
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(keys, minlength=n), out=ptr[1:])
    return ptr, order
