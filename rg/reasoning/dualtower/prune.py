"""Evidence pruning, step one: the experience-guided fuzzy filter (PrivGemo §4.3.2, Algorithm 5).

``s_prune(p) = α·DRM(p, I) + (1−α)·max_{e ∈ E_mem} DRM(p, e)`` over candidate *patterns* (relations
and coarse types; pseudonyms carry no meaning), then the top ``W1``. The memory term is 0 when the
memory returns no exemplar (:class:`~rg.reasoning.dualtower.memory.NoMemory`). Step two, the
Brain's selection of the top ``W_max``, is the controller's (it needs a sealed payload).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from rg.reasoning.dualtower.explore import Candidate
from rg.reasoning.dualtower.similarity import Similarity


class PruneScorer:
    """The pruning score against one indicator and its exemplars.

    Args:
        similarity: The DRM.
        indicator: The node's indicator text.
        exemplars: Anonymised exemplar paths from the experience memory (may be empty).
        alpha: α.
    """

    def __init__(self, similarity: Similarity, indicator: str, exemplars: Sequence[str], alpha: float) -> None:
        self.similarity = similarity
        self.indicator = indicator
        self.exemplars = tuple(exemplars)
        self.alpha = alpha

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        """Shapes: texts N strings -> (N,)."""
        score = self.alpha * self.similarity.score(texts, self.indicator)
        if self.exemplars and len(texts):
            memory = np.max(np.stack([self.similarity.score(texts, e) for e in self.exemplars]), axis=0)
            score = score + (1.0 - self.alpha) * memory
        return np.asarray(score, dtype=np.float64)


def fuzzy_top(candidates: Sequence[Candidate], scorer: PruneScorer, keep: int) -> list[tuple[Candidate, float]]:
    """The ``keep`` best candidates with their scores, best first (ties: discovery order)."""
    if not candidates:
        return []
    scores = scorer([c.pattern() for c in candidates])
    order = np.argsort(-scores, kind="stable")[:keep]
    return [(candidates[i], float(scores[i])) for i in order.tolist()]
