"""Which labels a retriever trains on: one switch (:class:`LabelConfig`). ``weak`` computes the
shortest-path labels, ``answer_f1`` the answer-F1 paths; ``refined`` reads a labels parquet file or folder
written by the refine job. Tensors are built from them by :mod:`rg.retrievers.inputs`.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence

from pydantic import Field, model_validator

from rg.config import Config
from rg.data.sample import Sample
from rg.graph import KnowledgeGraph
from rg.supervision.answer_paths import DEFAULT_MAX_LEN, AnswerPathLabels, answer_f1_labels, path_labels, search_kb
from rg.supervision.labels import LabelSource, Labels, labels_by_id, weak_fallback
from rg.supervision.weak import WeakConfig, weak_labels
from rg.training.planner_data import TemplateConsensus, candidate_targets


WEAK_SELECTOR = "weak"
WEAK_REASON = "weak_requested"
ANSWER_F1_SELECTOR = "answer_f1"
VOTED_SELECTOR = "answer_f1_voted"
"""``selector`` and ``fallback_reason`` of labels computed with ``source: weak``."""



class LabelConfig(Config):
    """Which supervision the retriever trains on."""

    source: LabelSource = Field(
        "weak",
        description=(
            "'weak': weak paths computed here (`weak.rule`: shortest topic-answer paths, or answer_f1); 'refined': rows of a "
            "labels parquet written by the refine job (ReG stage S(I); rows that fell back keep source 'weak')."
        ),
    )
    path: str | None = Field(None, description="Labels parquet file or folder; required for source 'refined'.")
    weak: WeakConfig = Field(default_factory=WeakConfig, description="Search settings for source 'weak'.")
    template_vote: bool = Field(
        False,
        description=(
            "With weak.rule answer_f1: keep only each question's tied paths that its wording "
            "(topic masked) chose most often among the training questions "
            "(rg.training.planner_data.TemplateConsensus, counted on the training side only), and "
            "label the triples on their walks. Removes shortcut paths that reach the same answers."
        ),
    )

    @model_validator(mode="after")
    def _needs_path(self) -> "LabelConfig":
        if self.source == "refined" and not self.path:
            raise ValueError("source 'refined' reads labels from `path`; set path to the refine job's labels folder")
        if self.template_vote and (self.source != "weak" or self.weak.rule != "answer_f1"):
            raise ValueError(
                "labels.template_vote votes among answer_f1 paths; set labels.source: weak and "
                "labels.weak.rule: answer_f1, or template_vote: false"
            )
        return self


def answer_f1_row(sample: Sample, weak: WeakConfig, kb: KnowledgeGraph | None = None) -> Labels:
    """A weak labels row by the ``answer_f1`` rule (selector ``answer_f1``), like the refine job's rows.

    ``kb`` is the whole KG ``weak.kb`` names, when the paths are chosen there.
    """
    return _path_row(sample.id, answer_f1_labels(sample, weak, kb=kb), ANSWER_F1_SELECTOR)


def _path_row(sample_id: str, found: AnswerPathLabels, selector: str) -> Labels:
    return Labels(
        id=sample_id,
        positive_triples=found.positive_triples,
        paths=tuple(w.render() for w in found.walks),
        relation_paths=found.relation_paths,
        source="weak",
        selector=selector,
        fallback_reason=WEAK_REASON,
    )


def voted_rows(
    samples: Sequence[Sample], weak: WeakConfig, train_ids: Collection[str], kb: KnowledgeGraph | None = None
) -> dict[str, Labels]:
    """Weak labels rows by the ``answer_f1`` rule after a template vote (selector ``answer_f1_voted``).

    Each question's best answer-F1 paths (searched on ``kb`` when given) are voted by the counts
    of the training questions (``train_ids``) that share its wording; the triples on the walks
    of the paths that survive are its positives. A question without a path gets an empty row.
    """
    paths = voted_paths(samples, weak, train_ids, kb)
    return {s.id: _path_row(s.id, path_labels(s, paths.get(s.id, ())), VOTED_SELECTOR) for s in samples}


def voted_paths(
    samples: Sequence[Sample], weak: WeakConfig, train_ids: Collection[str], kb: KnowledgeGraph | None = None
) -> dict[str, tuple[tuple[str, ...], ...]]:
    """Each question's best answer-F1 relation paths after the template vote of ``train_ids``.

    Questions without any path are absent. The paths are searched on ``kb`` when given, else on
    each question's subgraph.
    """
    max_len = weak.max_path_len if weak.max_path_len is not None else DEFAULT_MAX_LEN
    targets, _ = candidate_targets(samples, None, weak, max_len, kb)
    consensus = TemplateConsensus.fit(t for t in targets if t.id in train_ids)
    return {t.id: consensus.vote(t).relation_paths for t in targets}


def load_labels(
    samples: Iterable[Sample], config: LabelConfig, train_ids: Collection[str] | None = None
) -> dict[str, Labels]:
    """Labels of ``samples`` by id, from the source ``config`` names.

    With ``source: refined`` the file may hold more questions than ``samples``; only theirs are
    returned, and a sample without a row is an error in :func:`question_graphs`.
    ``train_ids`` names the training questions, whose paths alone the template vote counts.

    Raises:
        FileNotFoundError: if the refined labels path does not exist.
        ValueError: if ``config.template_vote`` is set without ``train_ids``.
    """
    samples = list(samples)
    if config.template_vote:
        if train_ids is None:
            raise ValueError("labels.template_vote needs the training question ids (train_ids) to count the vote on")
        return voted_rows(samples, config.weak, train_ids, search_kb(config.weak))
    answer_f1 = config.source == "weak" and config.weak.rule == "answer_f1"
    return join_labels(samples, config, search_kb(config.weak) if answer_f1 else None)


def join_labels(
    samples: Sequence[Sample],
    config: LabelConfig,
    kb: KnowledgeGraph | None = None,
    voted: Mapping[str, tuple[tuple[str, ...], ...]] | None = None,
) -> dict[str, Labels]:
    """The labels of one batch of ``samples`` by id: what :func:`load_labels` gives for them.

    Everything that needs more than the batch comes in: the whole KB of ``weak.kb`` (``kb``,
    loaded once by the caller) and, for ``config.template_vote``, the paths that survived the
    vote of the training questions (``voted``, from :func:`voted_paths`). With ``source:
    refined`` only the batch's rows are read from the labels parquet.

    Raises:
        ValueError: if ``config.template_vote`` is set without ``voted``.
    """
    if config.template_vote:
        if voted is None:
            raise ValueError("labels.template_vote needs the voted paths of every question (rg.training.labels.voted_paths)")
        return {s.id: _path_row(s.id, path_labels(s, voted.get(s.id, ())), VOTED_SELECTOR) for s in samples}
    if config.source == "weak" and config.weak.rule == "answer_f1":
        return {s.id: answer_f1_row(s, config.weak, kb) for s in samples}
    if config.source == "weak":
        return {
            s.id: weak_fallback(s.id, weak_labels(s, config.weak), None, reason=WEAK_REASON, selector=WEAK_SELECTOR)
            for s in samples
        }
    wanted = {s.id for s in samples}
    return labels_by_id(str(config.path), wanted)
