"""Evidence pruning, step one: the experience-guided fuzzy filter (PrivGemo §4.3.2, Algorithm 5).

``s_prune(p) = α·DRM(p, I) + (1−α)·max_{e ∈ E_mem} DRM(p, e)`` over candidate *patterns* (relations
and coarse types; pseudonyms carry no meaning), then the top ``W1``. The memory term is 0 when the
memory returns no exemplar (:class:`~rg.reasoning.dualtower.memory.NoMemory`) and when none
*agrees* with the node (:func:`agreeing`: the exemplar's stored depth is the indicator's, and so are
its relations when both name them). Without that check every retrieved record counts — W_exp of them,
often other templates (on MetaQA a 3-hop node got ten 1- and 2-hop templates of other questions)
— and the max over exemplars lifts whichever candidates look like another template's path
(tests/test_memory_controller.py shows a co-actor template turning a shared-director answer).
Step two, the Brain's selection of the top ``W_max``, is the controller's (it needs a sealed payload).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from rg.reasoning.dualtower.brain import Indicator
from rg.privacy.structure import public_label
from rg.reasoning.dualtower.explore import Candidate, Labeller, protected_order
from rg.reasoning.dualtower.memory import Exemplar
from rg.reasoning.dualtower.similarity import Similarity


def agreeing(exemplars: Sequence[str | Exemplar], indicator: Indicator) -> list[str]:
    """The exemplar patterns that count for a node with ``indicator`` (PrivGemo Algorithm 6 retrieves
    ``E_mem`` for the node's own indicator): an :class:`Exemplar` whose depth is the indicator's and,
    when both name relations, whose relations are the indicator's; a bare text always (its memory
    knows no shape). Duplicates once, in order."""
    out: dict[str, None] = {}
    for e in exemplars:
        if isinstance(e, str):
            out[e] = None
        elif e.depth == indicator.depth and (not e.relations or not indicator.relations
                                             or tuple(e.relations) == tuple(indicator.relations)):
            out[e.pattern] = None
    return list(out)


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


def fuzzy_top(candidates: Sequence[Candidate], scorer: PruneScorer, keep: int,
              label: Labeller = public_label, follow: Sequence[str] = ()) -> list[tuple[Candidate, float]]:
    """The ``keep`` best candidates with their scores, best first (ties: discovery order); ``label`` renders
    their patterns' nodes. Candidates walking ``follow`` (the indicator's relation path; one branch) come
    before the rest whatever their score (:class:`~rg.reasoning.dualtower.explore.Walking`)."""
    if not candidates:
        return []
    scores = scorer([c.pattern(label) for c in candidates])
    path = (tuple(follow),)
    order = protected_order(scores, [bool(follow) and c.relation_paths == path for c in candidates])[:keep]
    return [(candidates[i], float(scores[i])) for i in order.tolist()]
