"""Export a :class:`~rg.graph.KnowledgeGraph` to N-Triples in the Freebase layout.

Entity ``i`` of the graph becomes the IRI ``<namespace>m.0<i in hex>`` with its string as a
``type.object.name`` literal; relation ``r`` becomes ``<namespace><r>`` (percent-encoded where
IRIs forbid a character, see :mod:`rg.stores.sparql_text`). Exact repeats of a triple collapse
(RDF graphs are sets); parallel relations between one pair stay distinct triples. Edges whose
relation is the name relation itself (RoG subgraphs hold a few ``type.object.name`` edges
between two nodes) would read as names, so they are left out and counted.
"""

from __future__ import annotations

import gzip
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from rg.graph import KnowledgeGraph
from rg.stores.sparql_text import iri_local, literal


def entity_ids(kg: KnowledgeGraph) -> np.ndarray:
    """The Freebase-style id (``m.0<hex>``) of every entity, by entity index.

    Shapes:
        -> (E,) object array of str
    """
    return np.array([f"m.0{i:x}" for i in range(kg.num_entities)], dtype=object)


def relabel(kg: KnowledgeGraph, ids: np.ndarray) -> KnowledgeGraph:
    """The same graph with entity ``i`` named ``ids[i]`` (the graph a SPARQL store of it answers over)."""
    return KnowledgeGraph(np.asarray(ids, dtype=object), kg.relation_names, kg.head, kg.rel, kg.tail)


def write_ntriples(kg: KnowledgeGraph, path: str | Path, namespace: str,
                   name_relation: str = "type.object.name", aliases: Mapping[str, Sequence[str]] | None = None,
                   alias_relation: str = "common.topic.alias") -> tuple[int, int]:
    """Write ``kg`` (edges and one name literal per entity, and an ``alias_relation`` literal per alias
    of ``aliases``: entity string → aliases) as N-Triples; ``.gz`` paths are gzipped.

    Returns:
        ``(lines written, edges left out because their relation is name_relation)``.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    ents = [iri_local(namespace, e) for e in entity_ids(kg).tolist()]
    rels = [iri_local(namespace, r) for r in kg.relation_names.tolist()]
    name = iri_local(namespace, name_relation)
    opener = gzip.open if path.name.endswith(".gz") else open
    seen: set[tuple[int, int, int]] = set()
    name_rel = kg.relation_id(name_relation) if kg.has_relation(name_relation) else -1
    n = skipped = 0
    with opener(path, "wt", encoding="ascii", newline="\n") as f:
        alias = iri_local(namespace, alias_relation)
        for i, text in enumerate(kg.entity_names.tolist()):
            f.write(f"{ents[i]} {name} {literal(str(text))} .\n")
            n += 1
            for other in sorted(set((aliases or {}).get(str(text), ()))):
                f.write(f"{ents[i]} {alias} {literal(str(other))} .\n")
                n += 1
        for h, r, t in zip(kg.head.tolist(), kg.rel.tolist(), kg.tail.tolist()):
            if r == name_rel:
                skipped += 1
                continue
            if (h, r, t) in seen:
                continue
            seen.add((h, r, t))
            f.write(f"{ents[h]} {rels[r]} {ents[t]} .\n")
            n += 1
    return n, skipped
