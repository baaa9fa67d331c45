"""Scoring QA predictions against gold answers: per question, then per group of questions.

The evaluation half of the QA evaluation (the inference half, :mod:`rg.evaluation.qa`, never
sees gold answers). Per question: Hit, Hits@1, precision, recall and F1 of the selected
answers (:mod:`rg.metrics`: SQuAD-normalised strings; F1 on exact matches). Per group: Hit,
Hits@1, Macro-F1 and Micro-F1 (:func:`rg.metrics.evaluate_answers`) and the cost of answering,
as means per question: LLM prompt and completion tokens, LLM calls, evidence lines, retrieved
triples; and how many questions failed. Groups: all questions, each hop count, and single- vs
multi-topic-entity questions (the breakdowns of RoG, SubgraphRAG and ReG).

A failed question stays in every mean: it has no answers, so it scores 0 (unless it has no
gold answers either; see :mod:`rg.metrics` for the empty-set conventions).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any, Sequence

from rg.data.sample import Sample
from rg.evaluation.qa import Prediction
from rg.llm.usage import Usage
from rg.metrics import MatchMode, evaluate_answers, hit, hits_at_1, precision_recall_f1

ALL = "all"
"""Name of the group of every question."""


@dataclass(frozen=True)
class Gold:
    """What the evaluation side keeps of a question.

    Attributes:
        answers: Gold answer strings (``Sample.answers``, else its answer entities).
        hops: Reasoning hops when known.
        topics: Number of distinct topic entities.
        covered: Whether every answer entity is an entity of the question's subgraph (the
            questions a retriever can answer completely; as in the retrieval evaluation's
            answer recall).
    """

    answers: tuple[str, ...]
    hops: int | None
    topics: int
    covered: bool = True

    @classmethod
    def of(cls, sample: Sample) -> "Gold":
        entities = {e for h, _, t in sample.triples for e in (h, t)}
        wanted = sample.a_entities or sample.answers
        return cls(
            answers=tuple(sample.answers or sample.a_entities),
            hops=sample.hops,
            topics=len(dict.fromkeys(sample.q_entities)),
            covered=bool(wanted) and all(a in entities for a in wanted),
        )


def hop_group(hops: int | None) -> str:
    """``"<n>-hop"``, or ``"hops unknown"``."""
    return "hops unknown" if hops is None else f"{hops}-hop"


def topic_group(topics: int) -> str:
    """``"single topic"`` (1 topic entity), ``"multi topic"`` (2 or more) or ``"no topic"``."""
    if topics == 0:
        return "no topic"
    return "single topic" if topics == 1 else "multi topic"


COVERED = "answers in subgraph"


def covered_group(gold: Gold) -> str | None:
    """``"answers in subgraph"`` (overall) or ``"<n>-hop, answers in subgraph"``; None when not covered."""
    if not gold.covered:
        return None
    return COVERED if gold.hops is None else f"{hop_group(gold.hops)}, {COVERED}"


def failure_kind(failure: str) -> str:
    """The reason without its detail: ``read_error: KeyError: 'x'`` → ``read_error``."""
    return failure.split(":", 1)[0]


@dataclass(frozen=True)
class QuestionScore:
    """One prediction scored against its gold answers."""

    prediction: Prediction
    gold: Gold
    hit: int
    hits_at_1: int
    precision: float
    recall: float
    f1: float

    def to_dict(self) -> dict[str, Any]:
        """The prediction's fields, then gold answers, groups and metrics (one JSONL row)."""
        return {
            **self.prediction.to_dict(),
            "gold": list(self.gold.answers),
            "hops": self.gold.hops,
            "topic_entities": self.gold.topics,
            "answers_in_subgraph": self.gold.covered,
            "hit": self.hit,
            "hits_at_1": self.hits_at_1,
            "precision": self.precision,
            "recall": self.recall,
            "f1": self.f1,
        }


def score_prediction(prediction: Prediction, gold: Gold, match: MatchMode = "exact") -> QuestionScore:
    """Hit and Hits@1 (by ``match``) and exact-match precision, recall, F1 of one prediction."""
    prf = precision_recall_f1(prediction.answers, gold.answers)
    return QuestionScore(
        prediction=prediction,
        gold=gold,
        hit=hit(prediction.answers, gold.answers, match=match),
        hits_at_1=hits_at_1(prediction.answers, gold.answers, match=match),
        precision=prf.precision,
        recall=prf.recall,
        f1=prf.f1,
    )


@dataclass(frozen=True)
class GroupMetrics:
    """Answer quality and cost of a group of questions (means are per question).

    Attributes:
        name: The group (``all``, ``2-hop``, ``multi topic``, ...).
        n: Questions in the group, failed ones included.
        failed: Questions with a failure (no answers).
        hit, hits_at_1, macro_f1, micro_f1, macro_precision, macro_recall: As
            :class:`rg.metrics.QAMetrics`.
        prompt_tokens, completion_tokens, llm_calls: Mean LLM usage per question.
        evidence_lines, triples: Mean evidence lines and retrieved triples per question.
    """

    name: str
    n: int
    failed: int
    hit: float
    hits_at_1: float
    macro_f1: float
    micro_f1: float
    macro_precision: float
    macro_recall: float
    prompt_tokens: float
    completion_tokens: float
    llm_calls: float
    evidence_lines: float
    triples: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def group_metrics(name: str, scores: Sequence[QuestionScore], match: MatchMode = "exact") -> GroupMetrics:
    """Aggregate the scores of one group.

    Raises:
        ValueError: for an empty group.
    """
    if not scores:
        raise ValueError(f"group {name!r} has no questions")
    qa = evaluate_answers([s.prediction.answers for s in scores], [s.gold.answers for s in scores], match=match)
    n = len(scores)

    def mean(values: Sequence[float]) -> float:
        return float(sum(values)) / n

    return GroupMetrics(
        name=name,
        n=n,
        failed=sum(1 for s in scores if not s.prediction.ok),
        hit=qa.hit,
        hits_at_1=qa.hits_at_1,
        macro_f1=qa.macro_f1,
        micro_f1=qa.micro_f1,
        macro_precision=qa.macro_precision,
        macro_recall=qa.macro_recall,
        prompt_tokens=mean([s.prediction.usage.prompt_tokens for s in scores]),
        completion_tokens=mean([s.prediction.usage.completion_tokens for s in scores]),
        llm_calls=mean([s.prediction.usage.calls for s in scores]),
        evidence_lines=mean([s.prediction.evidence_lines for s in scores]),
        triples=mean([s.prediction.triples for s in scores]),
    )


@dataclass(frozen=True)
class QASummary:
    """Every aggregate of one QA evaluation.

    Attributes:
        overall: All questions.
        by_hops: One group per hop count, ascending (``hops unknown`` last).
        by_topics: Single- then multi-topic-entity questions (``no topic`` last, if any).
        covered: The questions whose answers are all in their subgraph: overall, then per hop
            count when there are several (empty when none is covered).
        failures: Failure kind → questions.
        usage: LLM usage summed over all questions.
    """

    overall: GroupMetrics
    by_hops: tuple[GroupMetrics, ...]
    by_topics: tuple[GroupMetrics, ...]
    failures: dict[str, int]
    usage: Usage
    covered: tuple[GroupMetrics, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "overall": self.overall.to_dict(),
            "by_hops": [g.to_dict() for g in self.by_hops],
            "by_topics": [g.to_dict() for g in self.by_topics],
            "covered": [g.to_dict() for g in self.covered],
            "failures": dict(self.failures),
            "usage": self.usage.to_dict(),
        }


def _groups(scores: Sequence[QuestionScore], key, order: Sequence[str], match: MatchMode) -> tuple[GroupMetrics, ...]:
    members: dict[str, list[QuestionScore]] = {}
    for score in scores:
        members.setdefault(key(score), []).append(score)
    names = sorted(members, key=lambda name: (order.index(name) if name in order else len(order), name))
    return tuple(group_metrics(name, members[name], match) for name in names)


def summarize(scores: Sequence[QuestionScore], match: MatchMode = "exact") -> QASummary:
    """Overall, per-hop and per-topic-count aggregates of scored predictions.

    Raises:
        ValueError: when ``scores`` is empty.
    """
    if not scores:
        raise ValueError("no scored questions to summarise")
    hop_order = [hop_group(h) for h in sorted({s.gold.hops for s in scores if s.gold.hops is not None})]
    usage = Usage()
    for score in scores:
        usage = usage + score.prediction.usage
    covered = [s for s in scores if s.gold.covered]
    covered_groups: tuple[GroupMetrics, ...] = ()
    if covered:
        covered_groups = (group_metrics(COVERED, covered, match),)
        if len(hop_order) > 1:
            order = [f"{h}, {COVERED}" for h in hop_order]
            by_hop = _groups([s for s in covered if s.gold.hops is not None], lambda s: covered_group(s.gold), order, match)
            covered_groups += by_hop
    return QASummary(
        overall=group_metrics(ALL, scores, match),
        by_hops=_groups(scores, lambda s: hop_group(s.gold.hops), hop_order, match),
        by_topics=_groups(scores, lambda s: topic_group(s.gold.topics), ["single topic", "multi topic"], match),
        failures=dict(Counter(failure_kind(s.prediction.failure) for s in scores if s.prediction.failure)),
        usage=usage,
        covered=covered_groups,
    )
