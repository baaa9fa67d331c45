"""Reference positives for triple recall (weak labels, labels files, WebQSP GPT-4o evidence) and reference
relation paths for the planner.

Each loader returns a :data:`~rg.evaluation.retrieval.Reference`: question id → indices into
``sample.triples`` of the positive triples, ready for
:func:`~rg.evaluation.retrieval.evaluate_retrieval`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from rg.data.sample import Sample
from rg.data.webqsp import read_webqsp_labels
from rg.data.labels import Labels, LabelSource, iter_labels
from rg.graph import KnowledgeGraph
from rg.supervision.labels import searched_to, weak_paths_of
from rg.supervision.weak import WeakConfig, weak_labels


def weak_reference(samples: Iterable[Sample], config: WeakConfig | None = None) -> dict[str, tuple[int, ...]]:
    """The weak labels (shortest topic–answer paths) of each sample as a reference.

    Args:
        samples: The questions with their subgraphs.
        config: Weak-label search settings; defaults to :class:`WeakConfig`.
    """
    return {sample.id: weak_labels(sample, config).positive_triples for sample in samples}


def labels_reference(
    path: str | Path, source: LabelSource | None = None, samples: Iterable[Sample] = ()
) -> dict[str, tuple[int, ...]]:
    """The positives of a labels parquet file or folder (``rg.data.labels``).

    Args:
        path: A labels parquet file or a folder of part files.
        source: Keep only rows with this ``source`` (``refined`` or ``weak``); None keeps all,
            so weak fallbacks stand in for failed refinements as they do in training.
        samples: The questions the reference will score; each one's row is checked against its
            subgraph (:meth:`~rg.data.labels.Labels.stale_positives`).

    Raises:
        ValueError: if a row does not fit its sample's subgraph (labels of another build).
    """
    by_id = {sample.id: sample for sample in samples}
    reference = {}
    for labels in iter_labels(path):
        if source is not None and labels.source != source:
            continue
        if labels.id in by_id and (stale := labels.stale_positives(by_id[labels.id].triples)):
            raise ValueError(
                f"labels {path}: question {labels.id!r} has positives {stale[:5]} outside its subgraph or off "
                "its relation paths; the labels were made for another build of the subgraphs (refine again)"
            )
        reference[labels.id] = labels.positive_triples
    return reference


def webqsp_gpt4o_reference(path: str | Path) -> dict[str, tuple[int, ...]]:
    """The GPT-4o evidence triples of WebQSP test questions (SubgraphRAG's released labels).

    Args:
        path: ``webqsp-evidence/webqsp_test_labels.jsonl.gz`` (``evidence_triple_idx`` per id).
    """
    return {row.id: row.evidence_triple_idx for row in read_webqsp_labels(path)}


def reference_paths(
    samples: Iterable[Sample],
    labels: Mapping[str, Labels] | None = None,
    weak: WeakConfig | None = None,
    max_len: int | None = None,
    kb: KnowledgeGraph | None = None,
) -> dict[str, tuple[tuple[str, ...], ...]]:
    """Reference relation paths per question for the planner's evaluation.

    The dataset's gold paths (``sample.relation_paths``: synthetic data, WebQSP parses) when it
    has them, else the labels row's paths, else the weak relation paths of ``weak.rule`` (MetaQA),
    the ``answer_f1`` search going ``max_len`` relations deep (the planner's longest path; None
    keeps ``weak.max_path_len``) on ``kb`` when given.
    """
    weak = searched_to(weak or WeakConfig(), max_len)
    out = {}
    for sample in samples:
        row = None if labels is None else labels.get(sample.id)
        if sample.relation_paths:
            out[sample.id] = sample.relation_paths
        elif row is not None and row.relation_paths:
            out[sample.id] = row.relation_paths
        else:
            out[sample.id] = weak_paths_of(sample, weak, kb)
    return out
