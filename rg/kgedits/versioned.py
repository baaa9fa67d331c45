"""A versioned in-memory KG: each applied edit record makes a new immutable snapshot; a question reads one.

:class:`VersionedStore` is a :class:`~rg.stores.base.KGStore` whose every read goes to a
:class:`Snapshot` (version number + an immutable :class:`~rg.stores.memory.MemoryStore`).
:meth:`VersionedStore.pin` fixes the snapshot for the current task (a :class:`contextvars.ContextVar`,
so concurrent questions on one event loop each keep their own, and tasks they start inherit it);
reads outside a pin see the newest snapshot. :meth:`VersionedStore.apply` builds the next snapshot
from the current one (copy-on-write over the graph's arrays: O(triples) numpy work, no re-hashing
of unchanged triples) and swaps it in atomically, so a question that started on version ``v`` reads
version ``v`` from start to end while an edit applies: no torn reads.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from functools import cached_property
from typing import Iterator, Sequence

import numpy as np

from rg.graph import KnowledgeGraph, Path
from rg.graph.search import CutOrder
from rg.kgedits.model import EditRecord
from rg.stores.base import Direction, StoreSubgraph, Triple, triple_key
from rg.stores.memory import MemoryStore


class EditOrderError(RuntimeError):
    """A record does not follow the store's version (a replica missed one): apply the missing ones first."""


@dataclass(frozen=True)
class Snapshot:
    """One version of the KG; ``added`` holds the triples edits added since version 0 that it still has (what
    drift is measured by: answers resting on facts the retrievers were not trained on)."""

    version: int
    store: MemoryStore
    added: frozenset = frozenset()

    @cached_property
    def added_names(self) -> frozenset[str]:
        """Names of the entities at either end of :attr:`added` (computed once per snapshot)."""
        if not self.added:
            return frozenset()
        ids = sorted({e for h, _, t in self.added for e in (h, t)})
        return frozenset(n for n in self.store.entity_names(ids).values() if n is not None)


def apply_record(store: MemoryStore, record: EditRecord) -> MemoryStore:
    """The store ``record`` makes of ``store`` (which is left as it was).

    Deleted triples are masked out, added ones appended (new entities and relations get the next
    ids), content keys are carried over, and the new entities' names join the name mapping.
    """
    kg = store.kg
    keys = store.content_keys()
    keep = np.ones(kg.num_triples, dtype=bool)
    for h, r, t in record.deletes:
        keep[store.triple_ids(h, r, t)] = False
    adds = [t for t in record.adds if not store.has_triple(*t)]
    new_entities = [e for e in dict.fromkeys(x for h, _, t in adds for x in (h, t)) if not kg.has_entity(e)]
    new_relations = [r for r in dict.fromkeys(r for _, r, _ in adds) if not kg.has_relation(r)]
    entity_at = {e: kg.num_entities + i for i, e in enumerate(new_entities)}
    relation_at = {r: kg.num_relations + i for i, r in enumerate(new_relations)}

    def entity(e: str) -> int:
        return entity_at[e] if e in entity_at else kg.entity_id(e)

    def relation(r: str) -> int:
        return relation_at[r] if r in relation_at else kg.relation_id(r)

    def objects(items: list[str]) -> np.ndarray:
        out = np.empty(len(items), dtype=object)
        out[:] = items
        return out

    added = np.array([(entity(h), relation(r), entity(t)) for h, r, t in adds], dtype=np.int64).reshape(-1, 3)
    edited = KnowledgeGraph(np.concatenate([kg.entity_names, objects(new_entities)]),
                            np.concatenate([kg.relation_names, objects(new_relations)]),
                            np.concatenate([kg.head[keep], added[:, 0]]), np.concatenate([kg.rel[keep], added[:, 1]]),
                            np.concatenate([kg.tail[keep], added[:, 2]]))
    new_keys = np.concatenate([keys[keep], np.array([triple_key(*t) for t in adds], dtype=np.uint64)])
    names = store.names
    if record.new_entities:
        names = {**(names or {}), **record.new_entities}
    return MemoryStore(edited, names, store.aliases, keys=new_keys)


class VersionedStore:
    """A :class:`~rg.stores.base.KGStore` over versioned snapshots (module docstring).

    Args:
        store: The KG at ``version``.
        version: Its version (0: the configured KG before any edit).
    """

    def __init__(self, store: MemoryStore, version: int = 0) -> None:
        self._current = Snapshot(version, store)
        self._pinned: ContextVar[Snapshot | None] = ContextVar(f"rg.kg_snapshot.{id(self)}", default=None)
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"VersionedStore(version={self.version}, {self._current.store!r})"

    @property
    def version(self) -> int:
        """The newest version."""
        return self._current.version

    def snapshot(self) -> Snapshot:
        """The pinned snapshot of this task, else the newest."""
        pinned = self._pinned.get()
        return pinned if pinned is not None else self._current

    @contextmanager
    def pin(self) -> Iterator[Snapshot]:
        """Read one snapshot (the newest now) for the ``with`` block, whatever is applied meanwhile."""
        snap = self._current
        token = self._pinned.set(snap)
        try:
            yield snap
        finally:
            self._pinned.reset(token)

    def apply(self, record: EditRecord) -> bool:
        """Make ``record``'s version the newest; False when this store has it already (replay is idempotent).

        Raises:
            EditOrderError: when ``record`` skips a version.
        """
        with self._lock:
            current = self._current
            if record.version <= current.version:
                return False
            if record.version != current.version + 1:
                raise EditOrderError(f"edit record version {record.version} does not follow this store's "
                                     f"{current.version}. Fix: apply versions {current.version + 1}.."
                                     f"{record.version - 1} first (replay the log in order)")
            added = (current.added - set(record.deletes)) | set(record.adds)
            self._current = Snapshot(record.version, apply_record(current.store, record), frozenset(added))
            return True

    def apply_all(self, records: Sequence[EditRecord]) -> int:
        """Apply records in order; returns how many were new."""
        return sum(self.apply(r) for r in records)

    # ---------------------------------------------------------------- KGStore, on the task's snapshot
    @property
    def store(self) -> MemoryStore:
        return self.snapshot().store

    @property
    def kg(self) -> KnowledgeGraph:
        return self.store.kg

    def entity_ids_by_name(self, name: str) -> list[str]:
        return self.store.entity_ids_by_name(name)

    def entity_names(self, ids: Sequence[str]) -> dict[str, str | None]:
        return self.store.entity_names(ids)

    def iter_names(self) -> Iterator[tuple[str, str]]:
        return self.store.iter_names()

    def entity_aliases(self, ids: Sequence[str]) -> dict[str, tuple[str, ...]]:
        return self.store.entity_aliases(ids)

    def iter_aliases(self) -> Iterator[tuple[str, str]]:
        return self.store.iter_aliases()

    def has_entity(self, entity_id: str) -> bool:
        return self.store.has_entity(entity_id)

    def has_relation(self, relation: str) -> bool:
        return self.store.has_relation(relation)

    def has_triple(self, head: str, relation: str, tail: str) -> bool:
        return self.store.has_triple(head, relation, tail)

    def neighbours(self, ids: Sequence[str], direction: Direction = "both") -> list[Triple]:
        return self.store.neighbours(ids, direction)

    def k_hop(self, seeds: Sequence[str], hops: int, max_triples: int | None = None,
              direction: Direction = "both", cut: CutOrder = "walk") -> StoreSubgraph:
        return self.store.k_hop(seeds, hops, max_triples, direction, cut)

    def shortest_paths(self, source: str, target: str, direction: Direction = "out",
                       max_len: int | None = None) -> list[Path]:
        return self.store.shortest_paths(source, target, direction, max_len)

    def ground(self, start: str, relation_path: Sequence[str]) -> list[Path]:
        return self.store.ground(start, relation_path)
