"""Retriever training without Ray: tensors from Samples and Labels, and the train/eval loop."""

from rg.training.data import (
    LabelConfig,
    TextIndex,
    answer_names,
    build_tables,
    is_unnamed,
    load_labels,
    question_graph,
    question_graphs,
)
from rg.training.loop import (
    DEFAULT_KS,
    FitResult,
    TrainConfig,
    build_optimizer,
    evaluate,
    fit,
    make_batches,
    train_epoch,
)

__all__ = [
    "DEFAULT_KS",
    "FitResult",
    "LabelConfig",
    "TextIndex",
    "TrainConfig",
    "answer_names",
    "build_optimizer",
    "build_tables",
    "evaluate",
    "fit",
    "is_unnamed",
    "load_labels",
    "make_batches",
    "question_graph",
    "question_graphs",
    "train_epoch",
]
