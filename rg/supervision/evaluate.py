"""How good are labels? Precision and recall of positive triples against reference labels.

Used to compare weak and refined supervision with an independent reference, e.g. the GPT-4o
evidence triples released with SubgraphRAG for WebQSP (``webqsp_test_labels.jsonl.gz``).
Scores are per question and averaged over the questions whose reference is non-empty.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Iterable, Mapping

from rg.data.sample import Sample
from rg.data.labels import Labels
from rg.supervision.weak import WeakConfig, weak_labels


@dataclass(frozen=True)
class LabelQuality:
    """Macro-averaged precision, recall and F1 of positive triples over ``questions``."""

    questions: int
    precision: float
    recall: float
    f1: float
    mean_positives: float


def label_quality(predicted: Mapping[str, Iterable[int]], reference: Mapping[str, Iterable[int]]) -> LabelQuality:
    """Score ``predicted`` positives against ``reference`` positives per question id.

    Questions without reference positives are skipped; a question missing from ``predicted``
    counts as an empty prediction (precision 0, recall 0).
    """
    p_sum = r_sum = f_sum = pos = 0.0
    n = 0
    for qid, ref in reference.items():
        ref = set(ref)
        if not ref:
            continue
        pred = set(predicted.get(qid, ()))
        hit = len(pred & ref)
        p = hit / len(pred) if pred else 0.0
        r = hit / len(ref)
        p_sum, r_sum, f_sum = p_sum + p, r_sum + r, f_sum + (2 * p * r / (p + r) if hit else 0.0)
        pos += len(pred)
        n += 1
    if n == 0:
        return LabelQuality(0, 0.0, 0.0, 0.0, 0.0)
    return LabelQuality(n, p_sum / n, r_sum / n, f_sum / n, pos / n)


def compare_with_reference(
    samples: Iterable[Sample],
    labels: Iterable[Labels],
    reference: Mapping[str, Iterable[int]],
    weak: WeakConfig | None = None,
) -> dict[str, dict]:
    """Weak vs final (refined or fallback) labels against ``reference``.

    Returns:
        ``{"weak": ..., "final": ..., "weak_on_refined": ..., "refined": ...}``: all questions,
        then only the questions whose label source is ``refined`` (before and after).
    """
    weak_pos = {s.id: weak_labels(s, weak).positive_triples for s in samples}
    final = {x.id: x.positive_triples for x in labels}
    refined_ids = {x.id for x in labels if x.source == "refined"}
    ref_refined = {k: v for k, v in reference.items() if k in refined_ids}
    return {
        "weak": asdict(label_quality(weak_pos, reference)),
        "final": asdict(label_quality(final, reference)),
        "weak_on_refined": asdict(label_quality(weak_pos, ref_refined)),
        "refined": asdict(label_quality(final, ref_refined)),
    }
