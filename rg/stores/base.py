"""The :class:`KGStore` protocol: what graph search needs from wherever a KG lives.

Two implementations share one set of semantics: :class:`~rg.stores.memory.MemoryStore` over the
in-memory :class:`~rg.graph.KnowledgeGraph`, and :class:`~rg.stores.sparql.SparqlStore` over a
SPARQL 1.1 endpoint (Freebase in Virtuoso). Entities are named by their *id* in the store (the
entity string of the in-memory graph; the local name ``m.0abc`` of an IRI in SPARQL); display
names are looked up separately. Results are content, not positions: triples as strings sorted,
paths sorted by :func:`path_key`, so two stores holding one graph return equal values.

The size cap of :meth:`KGStore.k_hop` uses :func:`rg.graph.search.k_hop`'s rules with the tie
order taken from triple content (:func:`content_keys`), which both stores can compute, instead of
the in-memory triple ids a triple store does not have.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Iterator, Literal, Protocol, Sequence, runtime_checkable

import numpy as np

from rg.graph import KnowledgeGraph, Path
from rg.graph.search import CutOrder

Direction = Literal["out", "in", "both"]
Triple = tuple[str, str, str]


class StoreError(RuntimeError):
    """A store query failed for good (after its bounded retries); ``reason`` is a short machine-readable cause.

    ``unreachable``, ``timeout`` and ``http_<status>`` (429, 5xx) are *transient*: the same query
    may succeed once the store is back, so jobs record the question as unfinished and redo it on
    the next run. ``bad_query``, ``bad_result`` and ``truncated`` would fail again.
    """

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail

    @property
    def transient(self) -> bool:
        return self.reason in ("unreachable", "timeout") or self.reason.startswith("http_")


@dataclass(frozen=True)
class StoreSubgraph:
    """A k-hop subgraph returned by a store.

    Attributes:
        seeds: The seed entity ids asked for (sorted, each once).
        triples: ``(head, relation, tail)`` id triples, sorted.
        entities: Entities of the triples plus the seeds, sorted.
        hops: The requested radius.
        truncated: True when the size cap cut the last round short.
    """

    seeds: tuple[str, ...]
    triples: tuple[Triple, ...]
    entities: tuple[str, ...]
    hops: int
    truncated: bool

    def __len__(self) -> int:
        return len(self.triples)


@runtime_checkable
class KGStore(Protocol):
    """Read access to a knowledge graph by entity id, with the graph engine's searches."""

    def entity_ids_by_name(self, name: str) -> list[str]:
        """Ids of the entities whose name is exactly ``name`` (sorted; empty when none)."""
        ...

    def entity_names(self, ids: Sequence[str]) -> dict[str, str | None]:
        """Name of each id (None for an id without a name)."""
        ...

    def iter_names(self) -> Iterator[tuple[str, str]]:
        """Every ``(id, name)`` pair the store holds (what an entity-linking name index is built from)."""
        ...

    def entity_aliases(self, ids: Sequence[str]) -> dict[str, tuple[str, ...]]:
        """Every other string each id goes by (further names, aliases), sorted; empty for none."""
        ...

    def iter_aliases(self) -> Iterator[tuple[str, str]]:
        """Every ``(id, alias)`` pair the store holds (the name index's ``alias`` entries)."""
        ...

    def has_entity(self, entity_id: str) -> bool:
        """Whether ``entity_id`` is the head or tail of some triple."""
        ...

    def neighbours(self, ids: Sequence[str], direction: Direction = "both") -> list[Triple]:
        """Triples incident to ``ids`` (``out``: as head, ``in``: as tail), sorted, each once."""
        ...

    def k_hop(self, seeds: Sequence[str], hops: int, max_triples: int | None = None,
              direction: Direction = "both", cut: CutOrder = "walk") -> StoreSubgraph:
        """Triples within ``hops`` BFS rounds of the seeds, cut as :func:`rg.graph.search.k_hop` does."""
        ...

    def shortest_paths(self, source: str, target: str, direction: Direction = "out",
                       max_len: int | None = None) -> list[Path]:
        """All shortest paths ``source`` → ``target`` (sorted by :func:`path_key`)."""
        ...

    def ground(self, start: str, relation_path: Sequence[str]) -> list[Path]:
        """Every walk of ``relation_path`` (``r^-1`` for a backward step) from ``start`` (sorted)."""
        ...


def path_key(path: Path) -> tuple:
    """The content of a path (entities, relations, directions): how stores sort and compare paths."""
    return (path.entities, path.relations, path.forward)


def content_keys(kg: KnowledgeGraph) -> np.ndarray:
    """A uint64 key per triple of ``kg`` from its strings (BLAKE2b of ``head, relation, tail``).

    The same triple gets the same key in every graph and process, which makes it the tie order
    :meth:`KGStore.k_hop` cuts by.

    Shapes:
        -> (T,) uint64
    """
    keys = np.empty(kg.num_triples, dtype=np.uint64)
    for i, (h, r, t) in enumerate(kg.triples()):
        keys[i] = triple_key(h, r, t)
    return keys


def triple_key(head: str, relation: str, tail: str) -> int:
    """The uint64 content key of one triple (:func:`content_keys`)."""
    digest = hashlib.blake2b(f"{head}\x00{relation}\x00{tail}".encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "little")


def subgraph_of(kg: KnowledgeGraph, seeds: Sequence[str], hops: int, max_triples: int | None,
                direction: Direction, cut: CutOrder, keys: np.ndarray) -> StoreSubgraph:
    """Run the engine's k-hop on ``kg`` from the seeds it holds and return it as a :class:`StoreSubgraph`.

    Seeds absent from ``kg`` stay seeds of the result with no triples.
    """
    wanted = sorted(set(seeds))
    present = [s for s in wanted if kg.has_entity(s)]
    if present:
        sub = kg.k_hop(present, hops, max_triples, direction, cut, tie_key=keys)
        triples, truncated = sorted(kg.triples(sub.triple_ids)), sub.truncated
    else:
        triples, truncated = [], False
    entities = sorted(set(wanted) | {h for h, _, _ in triples} | {t for _, _, t in triples})
    return StoreSubgraph(tuple(wanted), tuple(triples), tuple(entities), hops, truncated)


def sorted_paths(paths: Sequence[Path]) -> list[Path]:
    """Paths sorted by :func:`path_key`, each once."""
    unique = {path_key(p): p for p in paths}
    return [unique[k] for k in sorted(unique)]
