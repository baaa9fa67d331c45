"""A relation path scored by how well the entity set it reaches matches the answers, and the order the
answer-F1 searches return them in: shared by the in-memory search (:mod:`rg.supervision.answer_paths`)
and the store's (:mod:`rg.supervision.store_paths`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class ScoredPath:
    """A relation path with how well the set it reaches matches the answers.

    Attributes:
        relation_path: Labels from a topic entity (``r^-1`` for a backward step).
        f1: Harmonic mean of ``precision`` and ``recall``.
        precision: Share of the reached entities (topics left out) that are answers.
        recall: Share of the answers (in the graph, topics left out) that are reached.
    """

    relation_path: tuple[str, ...]
    f1: float
    precision: float
    recall: float


def scored_path(path: tuple[str, ...], hits: int, reached: int, wanted: int) -> ScoredPath:
    """A path reaching ``reached`` entities (topics left out), ``hits`` of the ``wanted`` answers."""
    precision, recall = hits / reached, hits / wanted
    return ScoredPath(path, 2 * precision * recall / (precision + recall), precision, recall)


def best_first(found: Sequence[ScoredPath]) -> list[ScoredPath]:
    """Best F1 first; ties: fewer relations first, then the order found."""
    order = sorted(range(len(found)), key=lambda i: (-found[i].f1, len(found[i].relation_path), i))
    return [found[i] for i in order]
