"""Training libraries, Ray-free: which labels each trainer reads (``labels``), the retriever's train/eval loop
(``loop``), the planner's and reader's examples and loops, and the Ray Data streams that feed the Ray Train jobs
of :mod:`rg.jobs`. Tensors from Samples are :mod:`rg.retrievers.inputs`."""

from rg.training.labels import LabelConfig, load_labels
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
    "TrainConfig",
    "build_optimizer",
    "evaluate",
    "fit",
    "load_labels",
    "make_batches",
    "train_epoch",
]
