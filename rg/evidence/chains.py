"""Evidence records: walks over retrieved triples, merged chains, multi-entity groups.

Three levels, each a frozen record (ReG, Zou et al. 2025, stage S(II)):

* :class:`Walk`: one walk from a source entity over retrieved triples (a :class:`rg.graph.Path`
  whose triple ids index the question's retrieved triples) with the retriever score of each
  step.
* :class:`EvidenceChain`: walks that share the source and the relation path (directions
  included), i.e. one chain with possibly several ends after multi-answer merging.
* :class:`EvidenceGroup`: chains from different topic entities that reach the same ends
  (multi-entity merging), placed together on one line.

Rendering (one line per chain or group) follows :meth:`rg.graph.Path.render`:

* ``h → [r] → t`` for a step along a stored triple, ``t ← [r] ← h`` for a step taken backwards
  (the stored triple is ``(h, r, t)`` and the walk goes from ``t`` to ``h``);
* where the merged walks differ at a position, the entities there are listed in walk order as
  ``{a | b | c}``; at the last position these are the chain's ends. Intermediate sets show which
  entities the walks pass through, not which intermediate leads to which end (the exact
  groundings stay in :attr:`EvidenceChain.walks`);
* a group joins its member chains with `` & ``; every member is restricted to the shared ends,
  so each member line ends with the same set;
* ``render(max_set=k)`` shows at most ``k`` entities of a set, the first ones (best walks
  first), and counts the rest: ``{a | b | +3 more}``. A reader that sees only a prompt's first
  lines then sees more of them; :meth:`EvidenceChain.shown_ends` are the ends such a line shows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Collection, Literal, Sequence, Union

from rg.graph import Path

SET_OPEN, SET_SEP, SET_CLOSE = "{", " | ", "}"
SET_MORE = "+{count} more"
"""The last element of a set cut to ``max_set`` entities: how many are not shown."""
GROUP_SEP = " & "


def render_entity_set(entities: tuple[str, ...], max_set: int | None = None) -> str:
    """One entity as itself; several as ``{a | b | c}`` (order kept); with ``max_set``, the first
    ``max_set`` and a count of the others: ``{a | b | +1 more}``."""
    if len(entities) == 1:
        return entities[0]
    if max_set is not None and len(entities) > max_set:
        entities = (*entities[:max_set], SET_MORE.format(count=len(entities) - max_set))
    return SET_OPEN + SET_SEP.join(entities) + SET_CLOSE


def _unique(values: list[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(values))


@dataclass(frozen=True)
class Walk:
    """One walk from a source entity over retrieved triples.

    Attributes:
        path: The walk; ``path.triple_ids`` index the retrieved triples of the question.
        triple_scores: Retriever score of each step's triple, in walk order.
    """

    path: Path
    triple_scores: tuple[float, ...]

    def __post_init__(self) -> None:
        if len(self.triple_scores) != len(self.path):
            raise ValueError(f"a walk of {len(self.path)} steps needs as many scores, got {len(self.triple_scores)}")
        if not len(self.path):
            raise ValueError("a walk needs at least one step")

    @property
    def source(self) -> str:
        return self.path.start

    @property
    def end(self) -> str:
        return self.path.end

    @property
    def score(self) -> float:
        """Summed retriever score of the steps (breaks ties between walks of equal length)."""
        return float(sum(self.triple_scores))

    @property
    def strength(self) -> float:
        """Score of the weakest step: a walk is only as relevant as its least relevant triple."""
        return float(min(self.triple_scores))

    @property
    def expected_relevant(self) -> float:
        """Expected number of relevant steps, reading each score as a logit: ``Σ σ(score)``.
        Never smaller than any prefix's, so a walk ranks above the walks it extends."""
        return float(sum(1.0 / (1.0 + math.exp(-s)) for s in self.triple_scores))

    def sort_key(self) -> tuple[float, tuple[int, ...]]:
        """Higher summed score first, then lower (better-ranked) triple ids."""
        return (-self.score, self.path.triple_ids)


@dataclass(frozen=True)
class EvidenceChain:
    """Walks with one source and one relation path; several ends after multi-answer merging.

    Attributes:
        walks: At least one walk; all share ``source`` and ``relation_path``; sorted by
            summed score (descending), then triple ids (members of a group: by the group's
            end order, so every member lists the shared ends alike).
        anchored: True when the source is a topic entity (found by BFS); False for retrieved
            triples no topic chain used, kept as one-step chains.
    """

    walks: tuple[Walk, ...]
    anchored: bool

    def __post_init__(self) -> None:
        if not self.walks:
            raise ValueError("an evidence chain needs at least one walk")
        first = self.walks[0]
        for walk in self.walks[1:]:
            if walk.source != first.source or walk.path.relation_path != first.path.relation_path:
                raise ValueError(
                    f"walks of one chain must share source and relation path; got {first.path.render()!r} "
                    f"and {walk.path.render()!r}"
                )

    @property
    def source(self) -> str:
        return self.walks[0].source

    @property
    def relation_path(self) -> tuple[str, ...]:
        """Relations in walk order, ``rel^-1`` marking a backward step."""
        return self.walks[0].path.relation_path

    def __len__(self) -> int:
        return len(self.walks[0].path)

    @property
    def ends(self) -> tuple[str, ...]:
        """Distinct end entities in walk order."""
        return _unique([w.end for w in self.walks])

    @property
    def score(self) -> float:
        """Best summed score of a walk."""
        return max(w.score for w in self.walks)

    @property
    def strength(self) -> float:
        """Best weakest-step score of a walk (see :attr:`Walk.strength`)."""
        return max(w.strength for w in self.walks)

    @property
    def expected_relevant(self) -> float:
        """Best expected number of relevant steps of a walk (see :attr:`Walk.expected_relevant`)."""
        return max(w.expected_relevant for w in self.walks)

    @property
    def triple_ids(self) -> tuple[int, ...]:
        """Sorted union of the walks' triple ids."""
        return tuple(sorted({t for w in self.walks for t in w.path.triple_ids}))

    def restrict(self, ends: Collection[str]) -> EvidenceChain | None:
        """The chain keeping only walks that end in ``ends``; None when none does."""
        kept = tuple(w for w in self.walks if w.end in ends)
        return EvidenceChain(kept, self.anchored) if kept else None

    def ordered_by_ends(self, ends: Sequence[str]) -> EvidenceChain:
        """The same walks sorted by the position of their end in ``ends`` (others last)."""
        rank = {e: i for i, e in enumerate(ends)}
        walks = sorted(self.walks, key=lambda w: (rank.get(w.end, len(rank)), w.sort_key()))
        return EvidenceChain(tuple(walks), self.anchored)

    def shown_ends(self, max_set: int | None = None) -> tuple[str, ...]:
        """The ends that ``render(max_set)`` shows: the first ``max_set`` (all without a limit)."""
        return self.ends if max_set is None else self.ends[:max_set]

    def render(self, max_set: int | None = None) -> str:
        """One line: ``h → [r] → t``; positions where the walks differ as ``{a | b}``, each set cut to
        ``max_set`` entities (:func:`render_entity_set`)."""
        first = self.walks[0].path
        if len(self.walks) == 1:
            return first.render()
        columns = [
            render_entity_set(_unique([w.path.entities[i] for w in self.walks]), max_set)
            for i in range(len(first) + 1)
        ]
        return Path(tuple(columns), first.relations, first.forward, first.triple_ids).render()


@dataclass(frozen=True)
class EvidenceGroup:
    """Chains from different topic entities that reach the same ends (multi-entity merging).

    Attributes:
        chains: Two or more anchored chains with distinct sources and identical end sets,
            each already restricted to the shared ends.
    """

    chains: tuple[EvidenceChain, ...]

    def __post_init__(self) -> None:
        if len(self.chains) < 2:
            raise ValueError("an evidence group needs at least two chains")
        sources = [c.source for c in self.chains]
        if len(set(sources)) != len(sources):
            raise ValueError(f"chains of a group need distinct sources, got {sources}")
        ends = set(self.chains[0].ends)
        if any(set(c.ends) != ends for c in self.chains[1:]):
            raise ValueError("chains of a group must be restricted to the same ends")

    @property
    def ends(self) -> tuple[str, ...]:
        """The shared ends, in the first chain's walk order."""
        return self.chains[0].ends

    @property
    def score(self) -> float:
        return max(c.score for c in self.chains)

    @property
    def strength(self) -> float:
        return max(c.strength for c in self.chains)

    @property
    def expected_relevant(self) -> float:
        """Summed over the member chains: the line shows all of them."""
        return sum(c.expected_relevant for c in self.chains)

    @property
    def anchored(self) -> bool:
        return True

    def __len__(self) -> int:
        return max(len(c) for c in self.chains)

    @property
    def triple_ids(self) -> tuple[int, ...]:
        return tuple(sorted({t for c in self.chains for t in c.triple_ids}))

    def render(self, max_set: int | None = None) -> str:
        """Member chains joined by `` & `` (sets cut to ``max_set`` entities)."""
        return GROUP_SEP.join(c.render(max_set) for c in self.chains)


EvidenceItem = Union[EvidenceChain, EvidenceGroup]
"""One line of evidence: a chain or a multi-entity group."""


def item_chains(item: EvidenceItem) -> tuple[EvidenceChain, ...]:
    """The chains of one line: the chain itself, or a group's members."""
    return item.chains if isinstance(item, EvidenceGroup) else (item,)


LineOrder = Literal["strength", "expected_relevant"]
"""How evidence lines are ordered for a prompt (see :func:`item_sort_key`)."""


def item_sort_key(
    item: EvidenceItem, order: LineOrder = "strength"
) -> tuple[float, float, int, int, float, tuple[int, ...], str]:
    """Prompt order, best first.

    Multi-entity groups come first, fewest total steps first: a group's ends satisfy every member
    topic, and the groups along the shortest topic-to-topic connection (the answer of "which film
    did A direct and B star in") beat groups that meet by chance one step further on (both
    people are Swedish). Then, by ``order``:

    - ``strength``: the best weakest-step score, which neither rewards nor punishes length by the
      scale of the scores; a prefix of a chain is never weaker than the chain, so a multi-hop
      answer's line comes after the line of its first hop.
    - ``expected_relevant``: :attr:`Walk.expected_relevant` (scores read as logits); a chain
      comes before its prefixes, and an extension by an irrelevant step gains almost nothing.

    Ties: anchored chains, unanchored chains; shorter first; higher summed score; better-ranked
    triples; the text."""
    group = isinstance(item, EvidenceGroup)
    steps = sum(len(c) for c in item_chains(item)) if group else 0
    kind = 0 if group else 1 if item.anchored else 2
    first = -item.strength if order == "strength" else -item.expected_relevant
    return (steps if group else math.inf, first, kind, len(item), -item.score, item.triple_ids, item.render())
