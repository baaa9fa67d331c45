"""Answer and retrieval metrics for KGQA: Hit, Hits@1, F1 (macro and micro), recall@K.

Answer metrics follow the evaluation of RoG (Luo et al., 2024, "Reasoning on Graphs") and
SubgraphRAG (Li et al., 2025): strings are compared after the SQuAD normalisation
(:func:`normalize_answer`). Retrieval metrics follow SubgraphRAG: triple recall@K (share of
the positive triples ranked in the top K) and answer recall@K (share of the answers that occur
as head or tail of a top-K triple).

Conventions, fixed here once so that every caller reports the same numbers:

* Predictions and gold answers are compared as *sets* of normalised, non-empty strings; a
  string that normalises to ``""`` (e.g. ``"the"``) never matches anything.
* ``match="exact"`` compares whole normalised strings; ``match="contains"`` (RoG's
  ``eval_hit``) also counts a prediction that contains a gold string.
* F1 always uses exact matching, so that true positives are well defined for micro-F1.
* A question with neither predictions nor gold answers has precision = recall = F1 = 1; one
  with only one of the two has precision = recall = F1 = 0.
* A retrieval recall over a question without positives is ``None`` and aggregates skip it.

This module imports nothing else from rg.
"""

from __future__ import annotations

import math
import re
import string
from collections.abc import Callable, Collection, Hashable, Sequence
from dataclasses import dataclass
from typing import Literal

MatchMode = Literal["exact", "contains"]
TripleText = tuple[str, str, str]

_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize_answer(s: str) -> str:
    """Normalise an answer string as SQuAD and RoG evaluation do.

    Lower-cases, removes ASCII punctuation, drops the articles *a*, *an*, *the* and collapses
    runs of whitespace into single spaces (stripping both ends).

    Args:
        s: Raw answer string.

    Returns:
        The normalised string (possibly empty).
    """
    s = s.lower()
    s = "".join(ch for ch in s if ch not in _PUNCTUATION)
    s = _ARTICLES.sub(" ", s)
    return " ".join(s.split())


def _as_list(values: str | Sequence[str]) -> Sequence[str]:
    """Treat a lone string as one answer rather than as a sequence of characters."""
    return [values] if isinstance(values, str) else values


def _normalized_set(values: str | Sequence[str]) -> set[str]:
    """The set of non-empty normalised strings of ``values``."""
    normalized = (normalize_answer(v) for v in _as_list(values))
    return {v for v in normalized if v}


def _matches(pred: str, gold: str, match: MatchMode) -> bool:
    """Whether one normalised prediction matches one normalised gold string."""
    return pred == gold if match == "exact" else gold in pred


def hit(pred: str | Sequence[str], gold: str | Sequence[str], *, match: MatchMode = "exact") -> int:
    """Hit: 1 if any prediction matches any gold answer, else 0.

    Args:
        pred: Predicted answers (a lone string counts as one prediction).
        gold: Gold answers (a lone string counts as one answer).
        match: ``"exact"`` compares normalised strings for equality; ``"contains"`` also counts
            a normalised gold string contained in a normalised prediction (RoG's ``eval_hit``,
            which is lenient towards long generated answers).

    Returns:
        1 or 0; 0 when either side is empty after normalisation.
    """
    if match not in ("exact", "contains"):
        raise ValueError(f"unknown match mode {match!r}; use 'exact' or 'contains'")
    preds = _normalized_set(pred)
    golds = _normalized_set(gold)
    return int(any(_matches(p, g, match) for p in preds for g in golds))


def hits_at_1(ranked_preds: Sequence[str], gold: str | Sequence[str], *, match: MatchMode = "exact") -> int:
    """Hits@1: 1 if the top-ranked prediction matches a gold answer, else 0.

    Args:
        ranked_preds: Predictions, best first.
        gold: Gold answers.
        match: As in :func:`hit`.

    Returns:
        1 or 0; 0 when there is no prediction.
    """
    ranked_preds = _as_list(ranked_preds)
    if not ranked_preds:
        return 0
    return hit(ranked_preds[0], gold, match=match)


@dataclass(frozen=True)
class MatchCounts:
    """Set-level counts of one question's predictions against its gold answers.

    Attributes:
        tp: Distinct normalised predictions that equal a gold answer.
        fp: Distinct normalised predictions that equal no gold answer.
        fn: Distinct normalised gold answers that no prediction equals.
    """

    tp: int
    fp: int
    fn: int


@dataclass(frozen=True)
class PRF:
    """Precision, recall and F1 of one question (or of summed counts, for micro averages)."""

    precision: float
    recall: float
    f1: float


def match_counts(pred: str | Sequence[str], gold: str | Sequence[str]) -> MatchCounts:
    """Count true positives, false positives and false negatives by exact normalised match.

    Args:
        pred: Predicted answers; duplicates after normalisation count once.
        gold: Gold answers; duplicates after normalisation count once.
    """
    preds = _normalized_set(pred)
    golds = _normalized_set(gold)
    tp = len(preds & golds)
    return MatchCounts(tp=tp, fp=len(preds) - tp, fn=len(golds) - tp)


def prf_from_counts(counts: MatchCounts) -> PRF:
    """Precision, recall and F1 from counts, with the empty-set conventions of this module.

    No predictions and no gold answers (``tp = fp = fn = 0``) scores 1 on all three; otherwise
    a zero denominator gives 0 (no predictions: precision 0; no gold answers: recall 0).
    """
    tp, fp, fn = counts.tp, counts.fp, counts.fn
    if tp + fp + fn == 0:
        return PRF(precision=1.0, recall=1.0, f1=1.0)
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    f1 = 2 * tp / (2 * tp + fp + fn)
    return PRF(precision=precision, recall=recall, f1=f1)


def precision_recall_f1(pred: str | Sequence[str], gold: str | Sequence[str]) -> PRF:
    """Set precision, recall and F1 of one question's predictions (exact normalised match).

    Conventions: empty predictions and empty gold give (1, 1, 1); empty predictions with gold
    answers give (0, 0, 0); predictions without gold answers give (0, 0, 0).

    Args:
        pred: Predicted answers.
        gold: Gold answers.
    """
    return prf_from_counts(match_counts(pred, gold))


@dataclass(frozen=True)
class QAMetrics:
    """Answer metrics aggregated over questions.

    Attributes:
        hit: Mean :func:`hit`.
        hits_at_1: Mean :func:`hits_at_1`.
        macro_f1: Mean per-question F1.
        micro_f1: F1 of the TP/FP/FN counts summed over questions.
        macro_precision: Mean per-question precision.
        macro_recall: Mean per-question recall.
        n: Number of questions.
    """

    hit: float
    hits_at_1: float
    macro_f1: float
    micro_f1: float
    macro_precision: float
    macro_recall: float
    n: int


def evaluate_answers(
    predictions: Sequence[Sequence[str]],
    golds: Sequence[Sequence[str]],
    *,
    match: MatchMode = "exact",
) -> QAMetrics:
    """Aggregate answer metrics over questions.

    Args:
        predictions: Per question, the predicted answers ranked best first (the first one is
            used for Hits@1).
        golds: Per question, the gold answers; aligned with ``predictions``.
        match: Matching rule for Hit and Hits@1 (see :func:`hit`); F1 is always exact.

    Returns:
        The aggregated :class:`QAMetrics`.

    Raises:
        ValueError: If the two lists differ in length or are empty.
    """
    if len(predictions) != len(golds):
        raise ValueError(
            f"got {len(predictions)} predictions for {len(golds)} questions; pass one list per question"
        )
    if not predictions:
        raise ValueError("no questions to evaluate")
    n = len(predictions)
    hits = hits1 = 0
    sum_p = sum_r = sum_f1 = 0.0
    tp = fp = fn = 0
    for pred, gold in zip(predictions, golds):
        hits += hit(pred, gold, match=match)
        hits1 += hits_at_1(pred, gold, match=match)
        counts = match_counts(pred, gold)
        prf = prf_from_counts(counts)
        sum_p, sum_r, sum_f1 = sum_p + prf.precision, sum_r + prf.recall, sum_f1 + prf.f1
        tp, fp, fn = tp + counts.tp, fp + counts.fp, fn + counts.fn
    micro = prf_from_counts(MatchCounts(tp=tp, fp=fp, fn=fn))
    return QAMetrics(
        hit=hits / n,
        hits_at_1=hits1 / n,
        macro_f1=sum_f1 / n,
        micro_f1=micro.f1,
        macro_precision=sum_p / n,
        macro_recall=sum_r / n,
        n=n,
    )


def _first_ranks(ranked: Sequence[Hashable]) -> dict[Hashable, int]:
    """Map each item to the 0-based position of its first occurrence in ``ranked``."""
    ranks: dict[Hashable, int] = {}
    for position, item in enumerate(ranked):
        ranks.setdefault(item, position)
    return ranks


def _check_ks(ks: Sequence[int]) -> None:
    """Reject an empty list of cut-offs or a non-positive cut-off."""
    if not ks:
        raise ValueError("ks is empty; pass at least one cut-off, e.g. ks=[10, 100]")
    for k in ks:
        if k <= 0:
            raise ValueError(f"every k must be a positive integer, got {k}")


def _recalls_from_ranks(ranks: Sequence[float], ks: Sequence[int]) -> dict[int, float] | None:
    """Recall@k for each k, given the first rank of every positive (``inf`` if never ranked).

    Returns None when there are no positives.
    """
    _check_ks(ks)
    if not ranks:
        return None
    return {k: sum(r < k for r in ranks) / len(ranks) for k in ks}


def _triple_ranks(ranked_triple_ids: Sequence[Hashable], positive_ids: Collection[Hashable]) -> list[float]:
    """First rank of each distinct positive triple id (``inf`` when it is not ranked)."""
    first = _first_ranks(ranked_triple_ids)
    return [first.get(p, math.inf) for p in set(positive_ids)]


def _answer_ranks(
    ranked_triples: Sequence[TripleText], answers: Sequence[str], normalize: bool
) -> list[float]:
    """First rank of a triple having each distinct answer as head or tail (``inf`` if none)."""
    key: Callable[[str], str] = normalize_answer if normalize else str
    first: dict[str, int] = {}
    for position, (head, _, tail) in enumerate(ranked_triples):
        first.setdefault(key(head), position)
        first.setdefault(key(tail), position)
    distinct = {key(a) for a in _as_list(answers)}
    distinct.discard("")
    return [first.get(a, math.inf) for a in distinct]


def triple_recall_at_k(
    ranked_triple_ids: Sequence[Hashable], positive_ids: Collection[Hashable], k: int
) -> float | None:
    """Share of the positive triples that are ranked in the top ``k`` (SubgraphRAG).

    Args:
        ranked_triple_ids: Triple ids (e.g. indices into a question's subgraph), best first.
        positive_ids: Ids of the positive (gold or refined) triples; duplicates count once.
        k: Cut-off, > 0.

    Returns:
        Recall in [0, 1], or None when there are no positives (aggregates skip such questions).
    """
    recalls = _recalls_from_ranks(_triple_ranks(ranked_triple_ids, positive_ids), [k])
    return None if recalls is None else recalls[k]


def answer_recall_at_k(
    ranked_triples: Sequence[TripleText], answers: Sequence[str], k: int, *, normalize: bool = False
) -> float | None:
    """Share of the answers that occur as head or tail of a top-``k`` triple (SubgraphRAG).

    Args:
        ranked_triples: ``(head, relation, tail)`` strings, best first.
        answers: Answer entity strings; duplicates count once.
        k: Cut-off, > 0.
        normalize: Compare entities and answers after :func:`normalize_answer` (otherwise
            exactly, which suits KG entity names and ids).

    Returns:
        Recall in [0, 1], or None when there are no answers (aggregates skip such questions).
    """
    recalls = _recalls_from_ranks(_answer_ranks(ranked_triples, answers, normalize), [k])
    return None if recalls is None else recalls[k]


@dataclass(frozen=True)
class RecallAtK:
    """Recall@K averaged over questions, for several K.

    Attributes:
        values: K → mean recall@K over the counted questions; None for every K when no
            question was counted.
        n: Questions counted (those with at least one positive).
        skipped: Questions skipped because they have no positives.
    """

    values: dict[int, float | None]
    n: int
    skipped: int

    def __getitem__(self, k: int) -> float | None:
        """Mean recall@``k``."""
        return self.values[k]


def _mean_recalls(per_question: Sequence[dict[int, float] | None], ks: Sequence[int]) -> RecallAtK:
    """Average per-question recalls, skipping the questions without positives (None)."""
    _check_ks(ks)
    counted = [r for r in per_question if r is not None]
    values: dict[int, float | None] = {
        k: (math.fsum(r[k] for r in counted) / len(counted) if counted else None) for k in ks
    }
    return RecallAtK(values=values, n=len(counted), skipped=len(per_question) - len(counted))


def _check_aligned(first: Sequence[object], second: Sequence[object], what: str) -> None:
    """Reject per-question lists of different lengths."""
    if len(first) != len(second):
        raise ValueError(f"got {len(first)} rankings for {len(second)} {what}; pass one per question")


def mean_triple_recall_at_ks(
    ranked_triple_ids: Sequence[Sequence[Hashable]],
    positive_ids: Sequence[Collection[Hashable]],
    ks: Sequence[int],
) -> RecallAtK:
    """Mean :func:`triple_recall_at_k` over questions for every K in ``ks`` (one pass each).

    Args:
        ranked_triple_ids: Per question, triple ids best first.
        positive_ids: Per question, the positive triple ids; aligned with ``ranked_triple_ids``.
        ks: Cut-offs, each > 0.

    Returns:
        A :class:`RecallAtK`; questions without positives are skipped and counted.
    """
    _check_aligned(ranked_triple_ids, positive_ids, "positive sets")
    per_question = [
        _recalls_from_ranks(_triple_ranks(ranked, positives), ks)
        for ranked, positives in zip(ranked_triple_ids, positive_ids)
    ]
    return _mean_recalls(per_question, ks)


def mean_answer_recall_at_ks(
    ranked_triples: Sequence[Sequence[TripleText]],
    answers: Sequence[Sequence[str]],
    ks: Sequence[int],
    *,
    normalize: bool = False,
) -> RecallAtK:
    """Mean :func:`answer_recall_at_k` over questions for every K in ``ks`` (one pass each).

    Args:
        ranked_triples: Per question, ``(head, relation, tail)`` strings best first.
        answers: Per question, the answer entities; aligned with ``ranked_triples``.
        ks: Cut-offs, each > 0.
        normalize: As in :func:`answer_recall_at_k`.

    Returns:
        A :class:`RecallAtK`; questions without answers are skipped and counted.
    """
    _check_aligned(ranked_triples, answers, "answer lists")
    per_question = [
        _recalls_from_ranks(_answer_ranks(ranked, golds, normalize), ks)
        for ranked, golds in zip(ranked_triples, answers)
    ]
    return _mean_recalls(per_question, ks)
