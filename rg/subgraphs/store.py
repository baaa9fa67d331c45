"""Per-question subgraphs cut through a :class:`~rg.stores.base.KGStore` (``kg:`` in the build config).

The same questions and the same :class:`~rg.subgraphs.cut.SubgraphConfig` as the in-memory
path (:func:`rg.subgraphs.cut.build_sample`), with what a store needs on top:

- **Topics and answers are names; a store works on ids.** A topic the store holds as an id is
  taken as it is (the in-memory store, where ids are names; topics linked against the store);
  any other topic is looked up by exact name, every id bearing it a seed (two KG nodes with one
  name are both searched, as the in-memory graph, which merges them, also does).
- **Samples carry names.** Triples and topics are written with display names, an unnamed node
  (a Freebase CVT) keeping its id, so shards built through Virtuoso read like the in-memory ones.
- **The cut is the store's.** :meth:`KGStore.k_hop` orders a capped round by triple content, so a
  ``kg: {kind: memory}`` build and a ``kg: {kind: sparql}`` build over the same graph write the
  same samples; only the order of the triples inside a sample is the store's (sorted).

A transient :class:`~rg.stores.base.StoreError` (server down, timeout, 5xx) propagates: the
shard runner records the question as unfinished and the next run builds it again.
"""

from __future__ import annotations

from typing import Sequence

from rg.data.sample import Question, Sample
from rg.subgraphs.cut import Built, SubgraphConfig, Unbuildable
from rg.stores.base import KGStore


def store_ids(store: KGStore, name_or_id: str) -> list[str]:
    """The store ids ``name_or_id`` stands for: itself when the store holds it as an id, else every
    entity of that exact name (empty when none)."""
    if store.has_entity(name_or_id):
        return [name_or_id]
    return store.entity_ids_by_name(name_or_id)


def _seeds(store: KGStore, topics: Sequence[str]) -> list[str]:
    return sorted({eid for topic in topics for eid in store_ids(store, topic)})


def build_store_sample(store: KGStore, question: Question, config: SubgraphConfig) -> Built:
    """Cut ``question``'s subgraph through ``store`` (see the module docstring).

    Raises:
        Unbuildable: with reason ``no_hops`` or ``topic_not_in_kg``.
        StoreError: a store query failed after its retries.
    """
    hops = config.hops or question.hops
    if hops is None:
        raise Unbuildable("no_hops", f"{question.id}: the question has no hop count; set subgraph.hops")
    seeds = _seeds(store, question.q_entities)
    if not seeds:
        raise Unbuildable("topic_not_in_kg", f"{question.id}: topic {list(question.q_entities)} not in the KG")
    sub = store.k_hop(seeds, hops, config.max_triples, config.direction, config.cut)
    names = store.entity_names(sub.entities)

    def label(eid: str) -> str:
        return names.get(eid) or eid

    reached = {label(e) for e in sub.entities}
    answer_ids = {a: ([] if a in reached else store_ids(store, a)) for a in question.answers}
    in_kg = [a for a in question.answers if a in reached or answer_ids[a]]
    all_in_kg = len(in_kg) == len(question.answers)
    covered = all_in_kg and all(a in reached for a in question.answers)
    covered_uncapped = covered
    if sub.truncated and config.measure_cap_cost and all_in_kg and not covered:
        full = set(store.k_hop(seeds, hops, None, config.direction).entities)
        covered_uncapped = all(a in reached or any(i in full for i in answer_ids[a]) for a in question.answers)
    sample = Sample(
        id=question.id,
        question=question.question,
        answers=question.answers,
        q_entities=tuple(label(t) if t in names else t for t in question.q_entities),
        a_entities=tuple(in_kg),
        triples=tuple((label(h), r, label(t)) for h, r, t in sub.triples),
        hops=question.hops if question.hops is not None else hops,
        relation_paths=question.relation_paths,
    )
    return Built(sample, covered, covered_uncapped, sub.truncated)
