"""The label rows supervision writes, and the switch that says which ones a trainer trains on.

:class:`LabelConfig` is the ``labels`` section of the train jobs: ``refined`` reads the rows the refine
job wrote (ReG stage S(I)); ``weak`` has the train job's weak-label step (:mod:`rg.jobs.weak_labels`)
compute rows by one of the weak rules below, once, into its output folder. Either way a trainer reads
rows (:mod:`rg.data.labels`) and computes no supervision itself.

* :func:`weak_fallback`: the weak shortest-path labels kept when refinement failed, with the reason;
* :func:`weak_row`: a ``source: weak`` row by ``weak.rule`` (``shortest``: the weak shortest paths,
  their relation paths ordered by how many answers they reach; ``answer_f1``: the paths whose reached
  set best matches the answers, searched on ``weak.kb`` when given);
* :func:`path_row`: a ``source: weak`` row from given relation paths (the template vote's survivors).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from pydantic import Field, model_validator

from rg.config import Config
from rg.data.labels import LabelSource, Labels
from rg.data.sample import Sample
from rg.graph import KnowledgeGraph
from rg.supervision.answer_paths import DEFAULT_MAX_LEN, AnswerPathLabels, answer_f1_labels, answer_f1_paths, path_labels
from rg.supervision.candidates import CandidatePool
from rg.supervision.weak import WeakConfig, WeakLabels, weak_labels

WEAK_SELECTOR = "weak"
WEAK_REASON = "weak_requested"
ANSWER_F1_SELECTOR = "answer_f1"
VOTED_SELECTOR = "answer_f1_voted"
"""``selector`` of the rows computed with ``source: weak`` per rule, and their ``fallback_reason``."""


class LabelConfig(Config):
    """Which supervision the retriever trains on."""

    source: LabelSource = Field(
        "weak",
        description=(
            "'weak': weak paths computed once by the train job's weak-label step (`weak.rule`: shortest topic-answer "
            "paths, or answer_f1) into <output_dir>/weak_labels; 'refined': rows of a labels parquet written by the "
            "refine job (ReG stage S(I); rows that fell back keep source 'weak')."
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


def weak_fallback(
    sample_id: str,
    weak: WeakLabels,
    pool: CandidatePool | None,
    reason: str,
    selector: str,
    prompt_id: str | None = None,
    prompt_tokens: int = 0,
    completion_tokens: int = 0,
) -> Labels:
    """Labels that keep the weak shortest-path supervision because refinement failed.

    Args:
        sample_id: The question id.
        weak: The question's weak labels (positives and paths are copied from them).
        pool: The candidate pool, for its sizes; None when no pool was built (sizes 0).
        reason: Why refinement failed (e.g. ``empty_pool``, ``parse_error``); must be non-empty.
        selector: The selector that failed.
        prompt_id: Its prompt template id, if any.
        prompt_tokens: Tokens spent before the failure.
        completion_tokens: Tokens spent before the failure.
    """
    if not reason:
        raise ValueError("weak_fallback needs a non-empty reason")
    paths = weak.paths
    return Labels(
        id=sample_id,
        positive_triples=weak.positive_triples,
        paths=tuple(p.render() for p in paths),
        relation_paths=tuple(dict.fromkeys(p.relation_path for p in paths)),
        source="weak",
        selector=selector,
        prompt_id=prompt_id,
        fallback_reason=reason,
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        pool_before=pool.size_before if pool is not None else 0,
        pool_after=pool.size_after if pool is not None else 0,
    )


def weak_relation_paths(found: WeakLabels) -> tuple[tuple[str, ...], ...]:
    """The distinct relation paths of a question's weak shortest paths, most answers reached first.

    Ties keep first-seen order (topic entities in question order, then answers).
    """
    reached: dict[tuple[str, ...], set[str]] = {}
    for pair in found.pairs:
        for path in pair.paths:
            reached.setdefault(path.relation_path, set()).add(pair.answer)
    ranked = sorted(reached.items(), key=lambda item: -len(item[1]))  # stable: ties keep first-seen order
    return tuple(path for path, _ in ranked)


def weak_paths_of(sample: Sample, weak: WeakConfig, kb: KnowledgeGraph | None = None) -> tuple[tuple[str, ...], ...]:
    """A question's weak relation paths by ``weak.rule``, best first: the relation paths of :func:`weak_row`.

    ``answer_f1`` searches up to ``weak.max_path_len`` relations (else
    :data:`~rg.supervision.answer_paths.DEFAULT_MAX_LEN`) on ``kb`` when given, else on the subgraph.
    """
    if weak.rule == "answer_f1":
        return answer_f1_paths(sample, _max_len(weak), kb=kb)
    return weak_relation_paths(weak_labels(sample, weak))


def weak_row(sample: Sample, weak: WeakConfig, kb: KnowledgeGraph | None = None) -> Labels:
    """The ``source: weak`` row of ``sample`` by ``weak.rule`` (selector ``weak`` or ``answer_f1``).

    ``kb`` is the whole KG ``weak.kb`` names, loaded once by the caller (``answer_f1`` only).
    """
    if weak.rule == "answer_f1":
        return _row(sample.id, answer_f1_labels(sample, weak, kb=kb), ANSWER_F1_SELECTOR)
    found = weak_labels(sample, weak)
    row = weak_fallback(sample.id, found, None, reason=WEAK_REASON, selector=WEAK_SELECTOR)
    return replace(row, relation_paths=weak_relation_paths(found))


def path_row(sample: Sample, paths: Sequence[Sequence[str]], selector: str = VOTED_SELECTOR) -> Labels:
    """The ``source: weak`` row of ``sample`` labelling the triples on the walks of ``paths``."""
    return _row(sample.id, path_labels(sample, paths), selector)


def _row(sample_id: str, found: AnswerPathLabels, selector: str) -> Labels:
    return Labels(
        id=sample_id,
        positive_triples=found.positive_triples,
        paths=tuple(w.render() for w in found.walks),
        relation_paths=found.relation_paths,
        source="weak",
        selector=selector,
        fallback_reason=WEAK_REASON,
    )


def searched_to(weak: WeakConfig, max_len: int | None) -> WeakConfig:
    """``weak`` with its ``answer_f1`` search going ``max_len`` relations deep (a planner's longest path);
    None, or another rule, keeps it as it is."""
    if max_len is None or weak.rule != "answer_f1":
        return weak
    return weak.model_copy(update={"max_path_len": max_len})


def _max_len(weak: WeakConfig) -> int:
    return weak.max_path_len if weak.max_path_len is not None else DEFAULT_MAX_LEN
