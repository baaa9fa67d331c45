"""Sample template questions on a generated KG; answers follow the templates' relation paths.

A walk never re-enters a topic entity (so "who is X married to?" through the marriage CVT does
not answer X itself); for two topic entities the answers are the intersection of both walks.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Sequence

from rg.data.sample import Question, Triple
from rg.data.synthetic.config import QuestionKind, SyntheticConfig
from rg.data.synthetic.templates import TEMPLATES, QuestionTemplate, invert_path
from rg.data.synthetic.vocab import INVERSE_SUFFIX


class EdgeIndex:
    """Neighbour lookup by (entity, relation) in both directions."""

    def __init__(self, triples: Sequence[Triple]) -> None:
        self._edges: dict[tuple[str, str], list[str]] = {}
        for h, r, t in triples:
            self._edges.setdefault((h, r), []).append(t)
            self._edges.setdefault((t, r + INVERSE_SUFFIX), []).append(h)

    def step(self, entity: str, relation: str) -> list[str]:
        """Entities one ``relation`` step (``rel^-1``: tail → head) away from ``entity``."""
        return self._edges.get((entity, relation), [])

    def follow(self, start: str, path: Sequence[str], avoid: frozenset[str]) -> set[str]:
        """Ends of the walks along ``path`` from ``start`` that never enter ``avoid``."""
        frontier = {start}
        for relation in path:
            frontier = {n for e in frontier for n in self.step(e, relation)} - avoid
        return frontier


@dataclass(frozen=True)
class _Draft:
    """A template instance before it gets an id."""

    template: QuestionTemplate
    topics: tuple[str, ...]
    answers: tuple[str, ...]


class QuestionSampler:
    """Instantiates :data:`TEMPLATES` on a KG in the proportions of the config's mix."""

    def __init__(self, config: SyntheticConfig, index: EdgeIndex, types: dict[str, str],
                 rng: random.Random) -> None:
        self.config = config
        self.index = index
        self.types = types
        self.rng = rng
        self.by_type: dict[str, list[str]] = {}
        for name, kind in types.items():
            self.by_type.setdefault(kind, []).append(name)

    def sample(self) -> tuple[Question, ...]:
        """Return the questions, shuffled, with ids ``syn-000000``, ``syn-000001``, ..."""
        drafts: list[_Draft] = []
        for kind, count in self._counts().items():
            drafts.extend(self._sample_kind(kind, count))
        self.rng.shuffle(drafts)
        return tuple(
            Question(
                id=f"syn-{i:06d}",
                question=d.template.text.format(*d.topics),
                answers=d.answers,
                q_entities=d.topics,
                hops=d.template.hops,
                relation_paths=d.template.paths,
            )
            for i, d in enumerate(drafts)
        )

    def _counts(self) -> dict[QuestionKind, int]:
        """Questions per kind by largest remainder (ties go to the earlier kind)."""
        kinds: tuple[QuestionKind, ...] = ("one_hop", "two_hop", "three_hop", "multi_entity")
        exact = [self.config.questions * self.config.mix.share(k) for k in kinds]
        counts = [int(x) for x in exact]
        by_remainder = sorted(range(len(kinds)), key=lambda i: (counts[i] - exact[i], i))
        for i in by_remainder[: self.config.questions - sum(counts)]:
            counts[i] += 1
        return dict(zip(kinds, counts))

    def _sample_kind(self, kind: QuestionKind, count: int) -> list[_Draft]:
        """Distinct (template, topics) instances of ``kind``; bounded attempts."""
        if count == 0:
            return []
        templates = [t for t in TEMPLATES if t.kind == kind]
        found: dict[tuple[str, tuple[str, ...]], _Draft] = {}
        for _ in range(count * self.config.max_attempts):
            if len(found) == count:
                break
            draft = self._instantiate(self.rng.choice(templates))
            if draft is not None:
                found.setdefault((draft.template.name, draft.topics), draft)
        if len(found) < count:
            raise ValueError(
                f"found only {len(found)} distinct {kind} questions of {count} requested in "
                f"{count * self.config.max_attempts} attempts; lower `questions` or "
                f"`mix.{kind}`, raise `max_answers`, or enlarge the KG"
            )
        return list(found.values())

    def _instantiate(self, template: QuestionTemplate) -> _Draft | None:
        """Pick topic entities for ``template``; None when the instance is to be skipped."""
        first = self._starts(template.topic_types[0], template.paths[0][0])
        if not first:
            return None
        topics = [self.rng.choice(first)]
        for kind, path in zip(template.topic_types[1:], template.paths[1:]):
            # Choose a further topic entity that reaches one answer of the first path.
            reached = sorted(self.index.follow(topics[0], template.paths[0], frozenset(topics)))
            if not reached:
                return None
            anchor = self.rng.choice(reached)
            back = sorted(
                e for e in self.index.follow(anchor, invert_path(path), frozenset())
                if self.types.get(e) == kind and e not in topics
            )
            if not back:
                return None
            topics.append(self.rng.choice(back))
        avoid = frozenset(topics)
        ends = [self.index.follow(t, p, avoid) for t, p in zip(topics, template.paths)]
        answers = set.intersection(*ends)
        if not answers or len(answers) > self.config.max_answers:
            return None
        return _Draft(template, tuple(topics), tuple(sorted(answers)))

    def _starts(self, kind: str, relation: str) -> list[str]:
        return [e for e in self.by_type.get(kind, ()) if self.index.step(e, relation)]
