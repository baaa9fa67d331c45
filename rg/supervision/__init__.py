"""Retriever supervision (ReG stage S(I)): weak labels, candidate pool, path selection, labels."""

from rg.supervision.candidates import (
    Candidate,
    CandidateConfig,
    CandidateKind,
    CandidatePool,
    build_pool,
    expand_selection,
    expanded_paths,
    one_hop_paths,
    representative_answer,
)
from rg.data.labels import LABELS_SCHEMA, Labels, iter_labels, read_labels, write_labels
from rg.supervision.labels import LabelConfig, weak_fallback, weak_row
from rg.supervision.refine import Prepared, finish_question, prepare_question, refine_sample
from rg.supervision.selectors import (
    PathSelector,
    Selection,
    SimilarityPathSelector,
    SimilaritySelectorConfig,
    candidate_text,
    verbalise_relation,
    verbalise_relation_path,
)
from rg.supervision.weak import (
    PairPaths,
    WeakConfig,
    WeakLabels,
    WeakMode,
    answer_entities,
    topic_entities,
    weak_labels,
    weak_paths,
)

__all__ = [
    "LABELS_SCHEMA",
    "Candidate",
    "CandidateConfig",
    "CandidateKind",
    "CandidatePool",
    "LabelConfig",
    "Labels",
    "PairPaths",
    "PathSelector",
    "Prepared",
    "Selection",
    "SimilarityPathSelector",
    "SimilaritySelectorConfig",
    "WeakConfig",
    "WeakLabels",
    "WeakMode",
    "answer_entities",
    "build_pool",
    "candidate_text",
    "expand_selection",
    "expanded_paths",
    "finish_question",
    "iter_labels",
    "one_hop_paths",
    "prepare_question",
    "read_labels",
    "refine_sample",
    "representative_answer",
    "topic_entities",
    "verbalise_relation",
    "verbalise_relation_path",
    "weak_fallback",
    "weak_labels",
    "weak_paths",
    "weak_row",
    "write_labels",
]
