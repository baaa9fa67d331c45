"""Planner supervision: (question, relation path) pairs from labels rows.

A question's target paths are the relation chains of its labels row
(:class:`~rg.data.labels.Labels`, ``relation_paths``): the refine job's rows, or the weak rows the
train job's weak-label step wrote (:mod:`rg.jobs.weak_labels`; by ``weak.rule``: the relation paths
of the weak shortest paths, most answers reached first, so the ``max_paths_per_question`` cap drops
rarer shortcuts first; or the answer-F1 paths, whose reached set best matches the answers). Nothing
here searches a graph. RoG trains on the same kind of pairs, one example per path.

Both weak rules leave ties: on MetaQA, "who directed X" is answered as well by ``written_by``
when X's director wrote it, and a 3-step loop back to X can reach the same set as its 1-step
path. :class:`TemplateConsensus` resolves such ties across questions: it counts how often each
path is a target among the training questions worded alike (the same text once the topic entity
mentions are blanked out), and keeps, of a question's targets, those its wording chose most
often. A path the wording stands for is a target of almost every question of the template; a
coincidental one only of those where the coincidence holds. A question whose wording is unique
keeps all its targets. This is a local, corpus-level stand-in for ReG's LLM path selection.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from rg.data.labels import Labels
from rg.data.sample import Sample
from rg.retrievers.planner.prompt import mask_topics

if TYPE_CHECKING:
    from rg.data.paraphrase import TemplateBank


@dataclass(frozen=True)
class PlanTarget:
    """The relation paths a planner should write for one question.

    Attributes:
        id: The question id.
        question: The question text.
        relation_paths: Target paths, best first (``r^-1`` marks a backward step).
        source: The labels row's source (``refined``, ``weak``).
        topics: The question's topic entities.
    """

    id: str
    question: str
    relation_paths: tuple[tuple[str, ...], ...]
    source: str
    topics: tuple[str, ...] = ()

    @property
    def template(self) -> str:
        """The question's wording with its topic entities masked (:func:`question_template`)."""
        return question_template(self.question, self.topics)


@dataclass
class TargetStats:
    """Counts from :func:`plan_targets` (nothing is dropped silently).

    Attributes:
        by_source: Questions with targets, per source.
        no_path: Questions without any path (no row, or a row without relation paths).
        too_long: Paths left out for exceeding ``max_len``.
        capped: Paths left out by ``max_paths``.
        outvoted: Paths left out by a :class:`TemplateConsensus`.
    """

    by_source: Counter = field(default_factory=Counter)
    no_path: int = 0
    too_long: int = 0
    capped: int = 0
    outvoted: int = 0

    @property
    def questions_with_target(self) -> int:
        """Questions with at least one target path (of any source)."""
        return sum(self.by_source.values())

    def to_dict(self) -> dict[str, int]:
        return {**{f"questions_{k}": v for k, v in sorted(self.by_source.items())},
                "questions_without_path": self.no_path, "paths_too_long": self.too_long,
                "paths_capped": self.capped, "paths_outvoted": self.outvoted}


def question_template(question: str, topics: Sequence[str]) -> str:
    """The wording of ``question``: topic entity mentions masked, lower-cased, spaces folded.

    >>> question_template("Who  directed The Tempest", ["The Tempest"])
    'who directed <e>'
    """
    return " ".join(mask_topics(question, topics).lower().split())


@dataclass(frozen=True)
class TemplateConsensus:
    """How often each relation path is a target among the questions of each template.

    Attributes:
        counts: Per template, the number of questions that have each path among their targets.
    """

    counts: Mapping[str, Counter]

    @classmethod
    def fit(cls, targets: Iterable[PlanTarget]) -> "TemplateConsensus":
        """Count the (uncapped) targets of the training questions by template."""
        counts: dict[str, Counter] = defaultdict(Counter)
        for target in targets:
            counts[target.template].update(set(target.relation_paths))
        return cls(dict(counts))

    def vote(self, target: PlanTarget) -> PlanTarget:
        """``target`` with only the paths its template chose most often (order kept).

        A template the counts do not know (or a tie between the counts) keeps every path.
        """
        counts = self.counts.get(target.template)
        if not counts:
            return target
        best = max(counts[p] for p in target.relation_paths)
        return replace(target, relation_paths=tuple(p for p in target.relation_paths if counts[p] == best))


def candidate_targets(
    samples: Iterable[Sample], labels: Mapping[str, Labels], max_len: int | None = None
) -> tuple[list[PlanTarget], TargetStats]:
    """Every target relation path per question, before any vote or cap.

    Args:
        samples: The training questions (their subgraphs are not needed).
        labels: Labels rows by question id; a question without a row, or whose row has no
            relation path, gets no target (counted in ``no_path``).
        max_len: Leave out paths with more relations (None: no limit).

    Returns:
        Targets of the questions that have at least one path, and the counts so far.
    """
    stats = TargetStats()
    targets = []
    for sample in samples:
        row = labels.get(sample.id)
        paths, source = (row.relation_paths, row.source) if row is not None else ((), "")
        kept = tuple(p for p in paths if len(p) > 0 and (max_len is None or len(p) <= max_len))
        stats.too_long += len(paths) - len(kept)
        if not kept:
            stats.no_path += 1
            continue
        stats.by_source[source] += 1
        targets.append(PlanTarget(sample.id, sample.question, kept, source, sample.q_entities))
    return targets, stats


def select_targets(
    targets: Sequence[PlanTarget],
    stats: TargetStats,
    max_paths: int | None = 4,
    consensus: TemplateConsensus | None = None,
) -> list[PlanTarget]:
    """Apply the template vote (when given), then keep at most ``max_paths`` paths per question.

    ``stats`` (from :func:`candidate_targets`) gains the outvoted and capped counts.
    """
    chosen = []
    for target in targets:
        if consensus is not None:
            voted = consensus.vote(target)
            stats.outvoted += len(target.relation_paths) - len(voted.relation_paths)
            target = voted
        if max_paths is not None and len(target.relation_paths) > max_paths:
            stats.capped += len(target.relation_paths) - max_paths
            target = replace(target, relation_paths=target.relation_paths[:max_paths])
        chosen.append(target)
    return chosen


def plan_targets(
    samples: Iterable[Sample], labels: Mapping[str, Labels], max_paths: int | None = 4, max_len: int | None = None
) -> tuple[list[PlanTarget], TargetStats]:
    """Target relation paths per question: :func:`candidate_targets` capped at ``max_paths``.

    Returns:
        Targets of the questions that have at least one path, and the counts.
    """
    targets, stats = candidate_targets(samples, labels, max_len)
    return select_targets(targets, stats, max_paths), stats


def with_paraphrases(targets: Sequence[PlanTarget], bank: "TemplateBank", per_question: int,
                     seed: int = 0) -> list[PlanTarget]:
    """``targets``, each followed by up to ``per_question`` copies worded otherwise: the other wordings of its
    template family (:meth:`rg.data.paraphrase.TemplateBank.paraphrases`, seeded), the same topics and paths, ids
    ``<id>~p<k>``. A question whose wording no family holds gets no copy."""
    out: list[PlanTarget] = []
    for target in targets:
        out.append(target)
        for k, text in enumerate(bank.paraphrases(target.question, target.topics, per_question, seed), 1):
            out.append(replace(target, id=f"{target.id}~p{k}", question=text))
    return out


def target_rows(
    targets: Sequence[PlanTarget], text: Callable[[str, Sequence[str]], str] | None = None
) -> list[tuple[str, str, tuple[str, ...]]]:
    """One ``(id, question, relation_path)`` row per target path (the planner's training pairs).

    ``text(question, topics)`` gives the question text of the row (e.g.
    ``PlannerModel.prompt_question``); None keeps the question as it is.
    """
    return [
        (t.id, t.question if text is None else text(t.question, t.topics), path)
        for t in targets
        for path in t.relation_paths
    ]

