"""The in-memory :class:`~rg.stores.base.KGStore`: an adapter over :class:`~rg.graph.KnowledgeGraph`.

Entity ids are the graph's entity strings. An optional ``names`` mapping gives display names
(the synthetic KG and MetaQA name entities by their id, so without it a name is its id), and an
optional ``aliases`` mapping other names.
"""

from __future__ import annotations

from typing import Iterator, Mapping, Sequence

import numpy as np

from rg.graph import KnowledgeGraph, Path
from rg.graph.search import CutOrder
from rg.stores.base import Direction, StoreSubgraph, Triple, content_keys, sorted_paths, subgraph_of


class MemoryStore:
    """A :class:`~rg.stores.base.KGStore` over a :class:`KnowledgeGraph` held in this process.

    Args:
        kg: The graph.
        names: Optional id → display name; ids missing from it are named by themselves.
        aliases: Optional id → other names (what :meth:`entity_aliases` answers).
        keys: Optional :func:`~rg.stores.base.content_keys` of ``kg``, when the caller has them already
            (an edited snapshot carries its parent's keys over instead of hashing every triple again).
    """

    def __init__(self, kg: KnowledgeGraph, names: Mapping[str, str] | None = None,
                 aliases: Mapping[str, Sequence[str]] | None = None, keys: np.ndarray | None = None) -> None:
        self.kg = kg
        self._names = dict(names) if names is not None else None
        self._aliases = {k: tuple(sorted(set(v))) for k, v in (aliases or {}).items()}
        self._by_name: dict[str, list[str]] | None = None
        if keys is not None and keys.shape != (kg.num_triples,):
            raise ValueError(f"keys has shape {keys.shape}, the graph {kg.num_triples} triples")
        self._keys: np.ndarray | None = keys

    def __repr__(self) -> str:
        return f"MemoryStore({self.kg!r})"

    def entity_ids_by_name(self, name: str) -> list[str]:
        if self._names is None:
            return [name] if self.kg.has_entity(name) else []
        if self._by_name is None:
            index: dict[str, list[str]] = {}
            for eid in self.kg.entity_names.tolist():
                index.setdefault(self._names.get(eid, eid), []).append(eid)
            self._by_name = {k: sorted(v) for k, v in index.items()}
        return list(self._by_name.get(name, []))

    def entity_names(self, ids: Sequence[str]) -> dict[str, str | None]:
        out: dict[str, str | None] = {}
        for eid in ids:
            if not self.kg.has_entity(eid):
                out[eid] = None
            else:
                out[eid] = eid if self._names is None else self._names.get(eid, eid)
        return out

    def iter_names(self) -> Iterator[tuple[str, str]]:
        """Every ``(id, name)`` of the graph's entities, in entity order."""
        for eid in self.kg.entity_names.tolist():
            yield eid, eid if self._names is None else self._names.get(eid, eid)

    def entity_aliases(self, ids: Sequence[str]) -> dict[str, tuple[str, ...]]:
        return {eid: self._aliases.get(eid, ()) if self.kg.has_entity(eid) else () for eid in ids}

    def iter_aliases(self) -> Iterator[tuple[str, str]]:
        """Every ``(id, alias)``, sorted."""
        for eid in sorted(self._aliases):
            for alias in self._aliases[eid]:
                yield eid, alias

    def has_entity(self, entity_id: str) -> bool:
        return self.kg.has_entity(entity_id)

    @property
    def names(self) -> dict[str, str] | None:
        """The id → name mapping (None: every entity is named by its id)."""
        return self._names

    @property
    def aliases(self) -> dict[str, tuple[str, ...]]:
        return self._aliases

    def content_keys(self) -> np.ndarray:
        """The graph's :func:`~rg.stores.base.content_keys` (computed once). Shapes: -> (T,) uint64"""
        if self._keys is None:
            self._keys = content_keys(self.kg)
        return self._keys

    def has_relation(self, relation: str) -> bool:
        return self.kg.has_relation(relation)

    def has_triple(self, head: str, relation: str, tail: str) -> bool:
        """Whether the graph holds ``(head, relation, tail)``."""
        return len(self.triple_ids(head, relation, tail)) > 0

    def triple_ids(self, head: str, relation: str, tail: str) -> np.ndarray:
        """Triple ids of ``(head, relation, tail)`` in the graph (empty when absent). Shapes: -> (n,) int64"""
        kg = self.kg
        if not (kg.has_entity(head) and kg.has_relation(relation) and kg.has_entity(tail)):
            return np.zeros(0, np.int64)
        h, r, t = kg.entity_id(head), kg.relation_id(relation), kg.entity_id(tail)
        out = kg.out_idx[kg.out_ptr[h]:kg.out_ptr[h + 1]]
        return out[(kg.rel[out] == r) & (kg.tail[out] == t)]

    def neighbours(self, ids: Sequence[str], direction: Direction = "both") -> list[Triple]:
        present = np.array([self.kg.entity_id(e) for e in set(ids) if self.kg.has_entity(e)], dtype=np.int64)
        tids, _, _ = self.kg.incident(present, direction)
        return sorted(set(self.kg.triples(np.unique(tids))))

    def k_hop(self, seeds: Sequence[str], hops: int, max_triples: int | None = None,
              direction: Direction = "both", cut: CutOrder = "walk") -> StoreSubgraph:
        return subgraph_of(self.kg, seeds, hops, max_triples, direction, cut, self.content_keys())

    def shortest_paths(self, source: str, target: str, direction: Direction = "out",
                       max_len: int | None = None) -> list[Path]:
        if not (self.kg.has_entity(source) and self.kg.has_entity(target)):
            return []
        return sorted_paths(self.kg.shortest_paths(source, target, direction, max_len))

    def ground(self, start: str, relation_path: Sequence[str]) -> list[Path]:
        if not self.kg.has_entity(start):
            return []
        return sorted_paths(self.kg.ground(start, relation_path))
