"""Retrieval evaluation: rank each question's triples by a scorer, measure recall@K.

Two measures, both from SubgraphRAG (Li et al., 2025) and computed by :mod:`rg.metrics`:

* **triple recall@K** against one or more *references* (per question, the indices into
  ``sample.triples`` of the positive triples: weak labels, refined labels, GPT-4o evidence).
  A question without positives in a reference (or absent from it) is skipped for that
  reference and counted in ``skipped``.
* **answer recall@K**: the share of a question's answer entities that appear as head or tail
  of a top-K triple (exact KG names). It is averaged over the questions whose answer entities
  all occur in their subgraph, so that it measures ranking rather than subgraph coverage; the
  others are counted in ``skipped``.

Ranking is a stable sort of the scores, highest first, so ties keep triple order and every
scorer's ranking is deterministic.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from itertools import islice
from typing import Any, Iterable, Iterator, Mapping, Sequence

import numpy as np

from rg.data.sample import Sample, Triple
from rg.evaluation.scorers import TripleScorer
from rg.metrics import RecallAtK, mean_answer_recall_at_ks, mean_triple_recall_at_ks

DEFAULT_KS: tuple[int, ...] = (10, 20, 50, 100, 200)
"""Cut-offs reported by default (SubgraphRAG reports recall at 50-200 triples)."""

Reference = Mapping[str, Sequence[int]]
"""Per question id, the indices into ``sample.triples`` of the positive triples."""


@dataclass(frozen=True)
class RetrievalResult:
    """Recall@K of one scorer over one set of questions.

    Attributes:
        method: The scorer's name.
        ks: The cut-offs, ascending.
        questions: Questions evaluated (counted plus skipped, for every measure).
        triple_recall: Reference name → mean triple recall@K over the questions that have at
            least one positive in that reference (``skipped``: those that have none).
        answer_recall: Mean answer recall@K over the questions whose answer entities all occur
            in their subgraph (``skipped``: the others, including questions without answers).
    """

    method: str
    ks: tuple[int, ...]
    questions: int
    triple_recall: Mapping[str, RecallAtK]
    answer_recall: RecallAtK

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready form (K keys as strings); :meth:`from_dict` inverts it."""
        return {
            "method": self.method,
            "ks": list(self.ks),
            "questions": self.questions,
            "triple_recall": {name: _recall_to_dict(r) for name, r in self.triple_recall.items()},
            "answer_recall": _recall_to_dict(self.answer_recall),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "RetrievalResult":
        """Rebuild a result from :meth:`to_dict` output (e.g. read back from ``retrieval.json``)."""
        return cls(
            method=str(data["method"]),
            ks=tuple(int(k) for k in data["ks"]),
            questions=int(data["questions"]),
            triple_recall={name: _recall_from_dict(r) for name, r in data["triple_recall"].items()},
            answer_recall=_recall_from_dict(data["answer_recall"]),
        )


def _recall_to_dict(recall: RecallAtK) -> dict[str, Any]:
    return {
        "recall": {str(k): v for k, v in recall.values.items()},
        "n": recall.n,
        "skipped": recall.skipped,
    }


def _recall_from_dict(data: Mapping[str, Any]) -> RecallAtK:
    values = {int(k): (None if v is None else float(v)) for k, v in data["recall"].items()}
    return RecallAtK(values=values, n=int(data["n"]), skipped=int(data["skipped"]))


def rank_triples(scores: np.ndarray) -> np.ndarray:
    """Triple indices by descending score; equal scores keep ascending index (stable sort).

    Raises:
        ValueError: if a score is NaN (it has no place in a ranking).

    Shapes:
        scores: (T,) -> (T,) int64
    """
    scores = np.asarray(scores, dtype=np.float64)
    if np.isnan(scores).any():
        raise ValueError("scores contain NaN; a scorer must give every triple a number")
    return np.argsort(-scores, kind="stable").astype(np.int64)


def answer_entities(sample: Sample) -> tuple[str, ...]:
    """The answers as KG entity names: ``a_entities`` (RoG ``a_entity``), else ``answers``."""
    return tuple(dict.fromkeys(sample.a_entities or sample.answers))


def answers_in_subgraph(sample: Sample) -> bool:
    """Whether the sample has answer entities and every one is a head or tail of its triples."""
    answers = answer_entities(sample)
    if not answers:
        return False
    entities = {e for h, _, t in sample.triples for e in (h, t)}
    return all(a in entities for a in answers)


def _check_ks(ks: Sequence[int]) -> tuple[int, ...]:
    """Sorted distinct cut-offs; rejects an empty list and non-positive values."""
    if not ks:
        raise ValueError("ks is empty; pass at least one cut-off, e.g. ks=(10, 100)")
    for k in ks:
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k <= 0:
            raise ValueError(f"every k must be a positive integer, got {k!r}")
    return tuple(sorted({int(k) for k in ks}))


def _batches(samples: Iterable[Sample], size: int) -> Iterator[list[Sample]]:
    """Consecutive lists of at most ``size`` samples."""
    iterator = iter(samples)
    while batch := list(islice(iterator, size)):
        yield batch


def _positives(reference: Reference, name: str, sample: Sample) -> tuple[int, ...]:
    """The sample's positives in ``reference`` (empty when absent), checked against its triples."""
    positives = tuple(int(i) for i in reference.get(sample.id, ()))
    bad = [i for i in positives if not 0 <= i < len(sample.triples)]
    if bad:
        raise ValueError(
            f"reference {name!r}: question {sample.id!r} has positive triple indices {bad[:5]} but only "
            f"{len(sample.triples)} triples; the reference does not belong to these samples"
        )
    return positives


def evaluate_retrieval(
    samples: Iterable[Sample],
    scorer: TripleScorer,
    references: Mapping[str, Reference],
    ks: Sequence[int] = DEFAULT_KS,
    *,
    batch_size: int = 256,
) -> RetrievalResult:
    """Rank every question's triples with ``scorer`` and measure triple and answer recall@K.

    Samples are scored ``batch_size`` at a time; only each question's top ``max(ks)`` triples
    are kept, so memory does not grow with subgraph size.

    Args:
        samples: The questions with their subgraphs (an iterable is consumed once).
        scorer: The retriever under evaluation.
        references: Reference name (e.g. ``weak``, ``refined``, ``gpt4o``) → per question id,
            the positive triple indices.
        ks: Cut-offs K, each > 0 (reported ascending).
        batch_size: Samples per ``scorer.score`` call.

    Returns:
        The :class:`RetrievalResult`, named after ``scorer.name``.

    Raises:
        ValueError: for bad ``ks`` or ``batch_size``, a scorer that returns the wrong number of
            arrays or scores or a NaN, or a reference index outside a question's triples.
    """
    ks = _check_ks(ks)
    if batch_size <= 0:
        raise ValueError(f"batch_size must be > 0, got {batch_size}")
    top = ks[-1]
    ranked_ids: list[list[int]] = []
    positives: dict[str, list[tuple[int, ...]]] = {name: [] for name in references}
    ranked_answerable: list[list[Triple]] = []
    answers: list[tuple[str, ...]] = []
    for batch in _batches(samples, batch_size):
        scores = scorer.score(batch)
        if len(scores) != len(batch):
            raise ValueError(f"scorer {scorer.name!r} returned {len(scores)} score arrays for {len(batch)} samples")
        for sample, sample_scores in zip(batch, scores):
            sample_scores = np.asarray(sample_scores)
            if sample_scores.shape != (len(sample.triples),):
                raise ValueError(
                    f"scorer {scorer.name!r} gave scores of shape {sample_scores.shape} for question "
                    f"{sample.id!r} with {len(sample.triples)} triples; expected one score per triple"
                )
            order = rank_triples(sample_scores)[:top]
            ranked_ids.append(order.tolist())
            for name, reference in references.items():
                positives[name].append(_positives(reference, name, sample))
            if answers_in_subgraph(sample):
                ranked_answerable.append([sample.triples[i] for i in order])
                answers.append(answer_entities(sample))
    questions = len(ranked_ids)
    triple_recall = {
        name: mean_triple_recall_at_ks(ranked_ids, positives[name], ks)
        for name in references
    }
    answer_recall = mean_answer_recall_at_ks(ranked_answerable, answers, ks)
    answer_recall = replace(answer_recall, skipped=questions - answer_recall.n)
    return RetrievalResult(
        method=scorer.name,
        ks=ks,
        questions=questions,
        triple_recall=triple_recall,
        answer_recall=answer_recall,
    )

