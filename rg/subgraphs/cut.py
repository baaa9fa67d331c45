"""A question's subgraph cut from the in-memory KG: the config every cut shares, the outcome of one cut
(:class:`Built`) and the reason a question gets none (:class:`Unbuildable`). The same questions cut
through a KG store are :mod:`rg.subgraphs.store`; :mod:`rg.subgraphs.shards` writes either as
resumable parquet shards.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
from pydantic import Field

from rg.config import Config
from rg.data.sample import Question, Sample
from rg.graph import KnowledgeGraph
from rg.graph.search import CutOrder


class SubgraphConfig(Config):
    """How a question's subgraph is cut from the global KG."""

    hops: int | None = Field(
        None, ge=1, description="BFS radius; None uses each question's own hop count."
    )
    max_triples: int | None = Field(
        5000,
        ge=1,
        description="Cap on triples per subgraph (hub entities); None for no cap.",
    )
    direction: Literal["out", "in", "both"] = Field(
        "both", description="Edges a BFS round follows; `both` reaches answers on either side."
    )
    cut: CutOrder = Field(
        "walk",
        description=(
            "Which triples of the round that overflows max_triples are kept: `walk` keeps those a "
            "random walk from the topic is likeliest to take (hubs get their walk share of the "
            "budget), `scramble` a fixed pseudo-random sample (rg.graph.search.k_hop)."
        ),
    )
    measure_cap_cost: bool = Field(
        True, description="For capped subgraphs, also check coverage without the cap."
    )


class Unbuildable(Exception):
    """A question that cannot get a subgraph; ``reason`` is a BadRow reason."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True)
class Built:
    """A built Sample with its coverage flags.

    Attributes:
        sample: The question with its subgraph.
        covered: Every gold answer is an entity of the subgraph.
        covered_uncapped: The same without the size cap (equals ``covered`` when not truncated).
        truncated: The size cap cut the subgraph.
    """

    sample: Sample
    covered: bool
    covered_uncapped: bool
    truncated: bool


def build_sample(kg: KnowledgeGraph, question: Question, config: SubgraphConfig) -> Built:
    """Cut ``question``'s subgraph from ``kg``.

    Topic entities absent from the KG are left out of the search (the Sample keeps them in
    ``q_entities``); a question none of whose topics is in the KG is unbuildable.

    Raises:
        Unbuildable: with reason ``no_hops`` or ``topic_not_in_kg``.
    """
    hops = config.hops or question.hops
    if hops is None:
        raise Unbuildable("no_hops", f"{question.id}: the question has no hop count; set subgraph.hops")
    present = [e for e in question.q_entities if kg.has_entity(e)]
    if not present:
        raise Unbuildable("topic_not_in_kg", f"{question.id}: topic {list(question.q_entities)} not in the KG")
    sub = kg.k_hop(present, hops, config.max_triples, config.direction, config.cut)
    answer_ids = [kg.entity_id(a) for a in question.answers if kg.has_entity(a)]
    all_in_kg = len(answer_ids) == len(question.answers)
    covered = all_in_kg and bool(np.isin(answer_ids, sub.entity_ids).all())
    covered_uncapped = covered
    if sub.truncated and config.measure_cap_cost and all_in_kg and not covered:
        full = kg.k_hop(present, hops, None, config.direction)
        covered_uncapped = bool(np.isin(answer_ids, full.entity_ids).all())
    sample = Sample(
        id=question.id,
        question=question.question,
        answers=question.answers,
        q_entities=question.q_entities,
        a_entities=tuple(a for a in question.answers if kg.has_entity(a)),
        triples=tuple(kg.triples(sub.triple_ids)),
        hops=question.hops if question.hops is not None else hops,
        relation_paths=question.relation_paths,
    )
    return Built(sample, covered, covered_uncapped, sub.truncated)
