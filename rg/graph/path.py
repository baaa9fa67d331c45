"""Relation paths over a knowledge graph and their text rendering.

A :class:`Path` is an ordered walk ``e0 -r1- e1 -r2- ... en``. Each step follows one stored
triple either as written (head → tail, ``forward``) or backwards (tail → head). In relation-path
form a backward step is written ``rel^-1``, so paths that walk edges both ways (MetaQA's
"which films did X direct", Freebase CVT hops) stay exact and groundable.
"""

from __future__ import annotations

from dataclasses import dataclass

INVERSE_SUFFIX = "^-1"


def inverse(relation: str) -> str:
    """Return the relation label followed in the other direction (``r`` ↔ ``r^-1``)."""
    if relation.endswith(INVERSE_SUFFIX):
        return relation[: -len(INVERSE_SUFFIX)]
    return relation + INVERSE_SUFFIX


def split_relation(relation: str) -> tuple[str, bool]:
    """Split a relation-path label into ``(stored relation, forward)``."""
    if relation.endswith(INVERSE_SUFFIX):
        return relation[: -len(INVERSE_SUFFIX)], False
    return relation, True


@dataclass(frozen=True)
class Path:
    """A walk over stored triples.

    Attributes:
        entities: The ``n + 1`` entity names visited, in walk order.
        relations: The ``n`` stored relation names (without direction marks).
        forward: Per step, True when the triple is followed head → tail.
        triple_ids: Per step, the id of the triple in the graph the path was found in.
    """

    entities: tuple[str, ...]
    relations: tuple[str, ...]
    forward: tuple[bool, ...]
    triple_ids: tuple[int, ...]

    def __len__(self) -> int:
        return len(self.relations)

    @property
    def start(self) -> str:
        return self.entities[0]

    @property
    def end(self) -> str:
        return self.entities[-1]

    @property
    def relation_path(self) -> tuple[str, ...]:
        """Relations in walk order, ``rel^-1`` marking backward steps."""
        return tuple(r if f else r + INVERSE_SUFFIX for r, f in zip(self.relations, self.forward))

    def triples(self) -> tuple[tuple[str, str, str], ...]:
        """The stored ``(head, relation, tail)`` triples of the walk, as stored."""
        out = []
        for i, (r, f) in enumerate(zip(self.relations, self.forward)):
            a, b = self.entities[i], self.entities[i + 1]
            out.append((a, r, b) if f else (b, r, a))
        return tuple(out)

    def render(self) -> str:
        """Render as ``h → [r] → t``; a backward step renders as ``t ← [r] ← h``."""
        parts = [self.entities[0]]
        for r, f, e in zip(self.relations, self.forward, self.entities[1:]):
            parts.append(f"→ [{r}] → {e}" if f else f"← [{r}] ← {e}")
        return " ".join(parts)

    def reversed(self) -> "Path":
        """The same walk taken from its end back to its start."""
        return Path(
            entities=self.entities[::-1],
            relations=self.relations[::-1],
            forward=tuple(not f for f in self.forward[::-1]),
            triple_ids=self.triple_ids[::-1],
        )

    def then(self, other: "Path") -> "Path":
        """Concatenate ``other`` after this walk; it must start where this one ends."""
        if self.entities[-1] != other.entities[0]:
            raise ValueError(f"cannot join a path ending at {self.end!r} to one starting at {other.start!r}")
        return Path(
            entities=self.entities + other.entities[1:],
            relations=self.relations + other.relations,
            forward=self.forward + other.forward,
            triple_ids=self.triple_ids + other.triple_ids,
        )
