"""Training libraries, Ray-free: the retriever's train/eval loop (``loop``), the planner's and reader's examples
and loops, and the Ray Data streams that feed the Ray Train jobs of :mod:`rg.jobs`. Trainers read labels rows
(:mod:`rg.data.labels`) and compute no supervision: that is :mod:`rg.supervision`, run by the refine job and
the train jobs' weak-label step (:mod:`rg.jobs.weak_labels`). Tensors from Samples are :mod:`rg.retrievers.inputs`."""

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
    "TrainConfig",
    "build_optimizer",
    "evaluate",
    "fit",
    "make_batches",
    "train_epoch",
]
