"""Retriever-score reader: answers from the evidence alone, with no LLM.

The local reader of rg's offline mode (DESIGN §4): the answer candidates are the entities at
the ends of the evidence chains, minus the topic entities, ranked by the retriever scores of
the walks that reach them. It is a real, if simple, reading rule (close to the
"retrieval-only" answer baselines of SubgraphRAG, Li et al. 2025), named for what it is:
its readings say ``retriever_scores``.

Scoring, per candidate entity ``e``:

1. each walk ending at ``e`` gets a value from its steps' retriever scores (``walk_score``):
   by default their **sum**. Retriever scores are logits: a step the retriever judges relevant
   (logit > 0) raises the sum and an irrelevant one lowers it, so along a chain the sum peaks
   where the relevant triples stop — at the answer, not at the intermediate entities before it
   (which ``min`` would rank at least as high, since their walks are prefixes of the answer's)
   nor at the entities past it. ``last`` takes the score of the walk's final step, for scores
   that already say how likely a triple is to reach the answer (the planner's end mass,
   :mod:`rg.retrievers.planner.scorer`). ``min`` and ``mean`` remain for scores that are not logits;
2. the values of all walks ending at ``e`` are aggregated (``aggregate``): by default with
   **log-sum-exp** at temperature τ, ``τ·log Σ exp(v/τ)``. Evidence construction keeps one
   walk per (topic entity, end), so an end has at most one anchored walk per topic entity;
   log-sum-exp then equals the max for single-topic questions and adds at most ``τ·log n`` for
   an end that all ``n`` topic entities reach, a soft AND that ranks candidates satisfying
   every constraint of a multi-entity question first. ``max`` ignores that agreement.

The ranked list holds every candidate (ties keep evidence order); the chosen set holds the
best one plus every candidate that passes the thresholds (``max_gap`` below the best score,
``min_score`` absolute), so it is never empty when there is a candidate.
"""

from __future__ import annotations

import math
from typing import Literal, Sequence

from pydantic import Field

from rg.config import Config
from rg.data.entities import is_unnamed
from rg.evidence import Evidence, EvidenceChain, Walk
from rg.reasoning.base import Answer, Reading

NAME = "retriever_scores"
NO_CANDIDATES = "no_candidates"
"""Fallback reason: no chain ends at an entity other than a topic entity (or an unnamed node)."""


class RetrieverReaderConfig(Config):
    """Settings of :class:`RetrieverReader` (see the module docstring for the rule)."""

    walk_score: Literal["min", "mean", "sum", "last"] = Field(
        "sum",
        description="Value of one walk from its steps' retriever scores: sum suits logits; last suits the "
        "planner's scores (the log-odds that a triple ends the answer walk).",
    )
    unnamed_answers: bool = Field(
        False,
        description="Whether unnamed nodes (Freebase `m.`/`g.` ids such as CVT nodes) may be answers; they "
        "are usually the hinge of a relation, not what a question asks for.",
    )
    aggregate: Literal["max", "logsumexp"] = Field(
        "logsumexp", description="How the values of the walks ending at one candidate combine."
    )
    temperature: float = Field(1.0, gt=0, description="τ of log-sum-exp; smaller is closer to max.")
    unanchored: Literal["never", "fallback", "always"] = Field(
        "fallback",
        description=(
            "Whether both entities of unanchored chains (triples no topic chain reaches) are "
            "candidates: never; only when the anchored chains give no candidate (e.g. raw "
            "triple evidence, or no topic entity among the triples); always."
        ),
    )
    max_gap: float | None = Field(
        0.0,
        ge=0,
        description="Choose candidates scoring at least best − max_gap (0: ties with the best); None: no such rule.",
    )
    min_score: float | None = Field(None, description="Choose only candidates scoring at least this; None: no such rule.")


def walk_value(walk: Walk, mode: str) -> float:
    """The value of one walk: ``min``, ``mean``, ``sum`` or ``last`` of its steps' scores."""
    scores = walk.triple_scores
    if mode == "last":
        return float(scores[-1])
    if mode == "min":
        return float(min(scores))
    if mode == "sum":
        return float(sum(scores))
    return float(sum(scores)) / len(scores)


def aggregate(values: Sequence[float], mode: str, temperature: float = 1.0) -> float:
    """``max`` or ``τ·log Σ exp(v/τ)`` of ``values`` (stable; ``-inf`` entries are ignored)."""
    top = max(values)
    if mode == "max" or top == -math.inf or len(values) == 1:
        return float(top)
    if top == math.inf:
        return math.inf
    return float(top + temperature * math.log(sum(math.exp((v - top) / temperature) for v in values)))


class RetrieverReader:
    """Ranks the chain ends of the evidence by aggregated retriever scores.

    Args:
        config: Scoring and selection settings (defaults when None).

    Attributes:
        name: ``retriever_scores``.
    """

    def __init__(self, config: RetrieverReaderConfig | None = None) -> None:
        self.config = config if config is not None else RetrieverReaderConfig()
        self.name = NAME

    def rank(self, evidence: Evidence) -> tuple[Answer, ...]:
        """Every candidate with its score and supporting chains, best first."""
        topics = set(evidence.topics)
        chains = evidence.chains()
        support: dict[str, dict[int, list[Walk]]] = {}

        def add(entity: str, index: int, walk: Walk) -> None:
            if entity not in topics and (self.config.unnamed_answers or not is_unnamed(entity)):
                support.setdefault(entity, {}).setdefault(index, []).append(walk)

        for index, chain in enumerate(chains):
            if chain.anchored:
                for walk in chain.walks:
                    add(walk.end, index, walk)
        mode = self.config.unanchored
        if mode == "always" or (mode == "fallback" and not support):
            for index, chain in enumerate(chains):
                if not chain.anchored:
                    for walk in chain.walks:
                        for entity in dict.fromkeys((walk.source, walk.end)):
                            add(entity, index, walk)
        answers = []
        for entity, by_chain in support.items():
            values = [walk_value(w, self.config.walk_score) for ws in by_chain.values() for w in ws]
            score = aggregate(values, self.config.aggregate, self.config.temperature)
            supporting = tuple(EvidenceChain(tuple(ws), chains[i].anchored) for i, ws in by_chain.items())
            answers.append(Answer(text=entity, entity=entity, score=score, chains=supporting))
        order = sorted(range(len(answers)), key=lambda i: (-answers[i].score, i))  # ties: evidence order
        return tuple(answers[i] for i in order)

    def choose(self, ranked: Sequence[Answer]) -> tuple[Answer, ...]:
        """The best answer plus every one that passes ``max_gap`` and ``min_score``."""
        if not ranked:
            return ()
        best = ranked[0].score
        cfg = self.config

        def passes(score: float) -> bool:
            return (cfg.min_score is None or score >= cfg.min_score) and (
                cfg.max_gap is None or score >= best - cfg.max_gap
            )

        return (ranked[0],) + tuple(a for a in ranked[1:] if passes(a.score))

    async def read(self, question: str, evidence: Evidence) -> Reading:
        """Rank and choose; ``question`` is unused (the retriever already conditioned on it)."""
        ranked = self.rank(evidence)
        if not ranked:
            return Reading(self.name, fallback=NO_CANDIDATES)
        return Reading(self.name, ranked=ranked, selected=self.choose(ranked))
