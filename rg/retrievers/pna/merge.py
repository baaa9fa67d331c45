"""Merge parallel relations of retrieved triples into one edge per entity pair, for prompts.

Parallel relations between one pair are distinct triples in rg (DESIGN §3), and an entity-level
retriever gives them equal scores. For a prompt it is shorter and clearer to write one line per
pair, ``h → [r1; r2] → t``; this keeps every relation and the ids of the triples behind it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rg.data.sample import Triple


@dataclass(frozen=True)
class MergedEdge:
    """All retrieved relations from one head to one tail.

    Attributes:
        head: Head entity name.
        tail: Tail entity name.
        relations: The distinct relations, in ranking order.
        triple_ids: The merged triples' indices into ``sample.triples``, in ranking order.
        score: The score of the pair's best-ranked triple (None when no scores were given).
    """

    head: str
    tail: str
    relations: tuple[str, ...]
    triple_ids: tuple[int, ...]
    score: float | None

    def render(self) -> str:
        """``h → [r1; r2] → t``."""
        return f"{self.head} → [{'; '.join(self.relations)}] → {self.tail}"


def merge_parallel(
    triples: Sequence[Triple], ranked: Sequence[int], scores: Sequence[float] | None = None
) -> list[MergedEdge]:
    """Group retrieved triples by ``(head, tail)`` (direction kept), best group first.

    Args:
        triples: The question's subgraph (``sample.triples``).
        ranked: Retrieved triple indices, best first (e.g. ``Ranked.indices.tolist()``).
        scores: Their scores, aligned with ``ranked``; optional.

    Returns:
        One :class:`MergedEdge` per distinct ``(head, tail)``, ordered by its best-ranked triple.

    Raises:
        ValueError: if ``scores`` is not aligned with ``ranked``.
    """
    if scores is not None and len(scores) != len(ranked):
        raise ValueError(f"got {len(scores)} scores for {len(ranked)} ranked triples; pass one per triple")
    relations: dict[tuple[str, str], list[str]] = {}
    triple_ids: dict[tuple[str, str], list[int]] = {}
    best: dict[tuple[str, str], float | None] = {}
    for position, index in enumerate(ranked):
        head, relation, tail = triples[index]
        pair = (head, tail)
        if pair not in relations:  # first (best-ranked) triple of this pair
            relations[pair], triple_ids[pair] = [], []
            best[pair] = None if scores is None else float(scores[position])
        if relation not in relations[pair]:
            relations[pair].append(relation)
        triple_ids[pair].append(int(index))
    return [
        MergedEdge(head=h, tail=t, relations=tuple(rels), triple_ids=tuple(triple_ids[h, t]), score=best[h, t])
        for (h, t), rels in relations.items()
    ]
