"""One Ray Train harness for rg's trainers (the MLP/PNA retriever, the planner, the reader).

A trainer supplies its model, its fit loop and its report; the harness does the rest the same way for
each:

- **run config** (:class:`TrainRunConfig`): workers, GPU, run name, storage, checkpoints kept, restarts,
  output folder, Ray; a changed config never resumes a run (:func:`start_run`);
- **worker set-up**: :func:`resume` reads Ray Train's latest checkpoint (model, optimizer, epoch,
  history), :func:`distribute` wraps the model for DDP (``prepare_model``) or builds a DeepSpeed engine;
- **checkpoint per epoch** (:class:`EpochReporter`): every rank reports its metrics row, rank 0 writes one
  layout — ``model/`` (the trainer's own save), ``optimizer.pt`` (not for a ZeRO engine, whose state is
  partitioned) and ``state.json`` (epoch, history and the trainer's extra state);
- **driver** (:func:`fit_run`, :func:`best_of`, :func:`write_report`): the ``TorchTrainer``, the best
  checkpoint by the trainer's key, the history including a resumed run's earlier epochs, and
  ``train_report.json`` with non-finite floats written as null.

A fourth trainer needs a config subclass, a worker loop of :func:`resume` → :func:`distribute` → its fit
with an :class:`EpochReporter`, and a driver of :func:`start_run` → :func:`fit_run` → :func:`best_of` →
export → :func:`write_report`.
"""

from __future__ import annotations

import json
import math
import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import torch
from pydantic import Field

from rg.config import Config
from rg.run.guard import check_run_config
from rg.run.paths import resolve_data_path
from rg.runtime import RayConfig
from rg.train_progress import DriverBar
from rg.training.shards import HELD_ROWS_KEY, HeldRows, with_worker_group
from rg.training.strategy import DeepSpeedSettings, deepspeed_engine, load_engine_config

if TYPE_CHECKING:
    from ray.train import Checkpoint, Result

MODEL_DIR = "model"
OPTIMIZER_FILE = "optimizer.pt"
STATE_FILE = "state.json"
REPORT_FILE = "train_report.json"

M = TypeVar("M")


class TrainRunConfig(Config):
    """What every Ray Train job sets besides its data, model and optimiser."""

    num_workers: int = Field(2, ge=1, description="Ray Train workers (DDP replicas).")
    use_gpu: bool = Field(False, description="One GPU per worker (NCCL); False trains on CPU with gloo.")
    run_name: str = Field(
        min_length=1,
        description="Stable name of the Ray Train run; resubmitting with the same name resumes from its latest checkpoint.",
    )
    storage_path: str = Field(
        "outputs/ray_results",
        description="Where Ray Train persists checkpoints (<storage_path>/<run_name>). On a multi-node cluster this "
        "must be shared storage (NFS path or s3:// / gs:// URI) reachable from every node.",
    )
    keep_checkpoints: int = Field(2, ge=1, description="Checkpoints kept (the best by the selection metric).")
    max_failures: int = Field(0, ge=-1, description="Worker-group restarts on failure (-1: unlimited).")
    output_dir: str = Field(description="The best model is exported here with train_report.json.")
    ray: RayConfig = Field(default_factory=RayConfig, description="Where Ray runs.")

    def storage(self) -> str:
        """``storage_path`` as Ray Train takes it: a URI as written, a local path absolute."""
        return self.storage_path if "://" in self.storage_path else str(resolve_data_path(self.storage_path).resolve())


def start_run(cfg: TrainRunConfig) -> str:
    """Check that ``cfg`` may start or resume its run (before any work: a changed config must not resume);
    returns the storage path."""
    storage = cfg.storage()
    check_run_config(storage, cfg.run_name, cfg)
    return storage


# ---- worker side ---------------------------------------------------------------------------------------------


@dataclass
class Resume(Generic[M]):
    """Where a worker starts: epoch 0 with nothing, or after the latest checkpoint's epoch.

    Attributes:
        model: what the trainer's loader returned for the checkpoint's ``model/`` (None without a checkpoint).
        start_epoch: the first epoch to run.
        optimizer_state: the optimizer's state dict (None without a checkpoint or after a ZeRO epoch).
        history: the metrics rows of the epochs already run.
        state: the checkpoint's ``state.json`` (empty without a checkpoint).
    """

    model: M | None = None
    start_epoch: int = 0
    optimizer_state: dict[str, Any] | None = None
    history: list[dict[str, Any]] = field(default_factory=list)
    state: dict[str, Any] = field(default_factory=dict)


def resume(load: Callable[[Path], M]) -> Resume[M]:
    """Read Ray Train's latest checkpoint in a worker; ``load`` reads the model from its ``model/`` folder."""
    import ray.train

    checkpoint = ray.train.get_checkpoint()
    if checkpoint is None:
        return Resume()
    with checkpoint.as_directory() as folder:
        folder = Path(folder)
        model = load(folder / MODEL_DIR)
        optimizer = folder / OPTIMIZER_FILE
        optimizer_state = torch.load(optimizer, map_location="cpu") if optimizer.is_file() else None
        state = json.loads((folder / STATE_FILE).read_text())
    return Resume(model, int(state["epoch"]) + 1, optimizer_state, state["history"], state)


def distribute(module: torch.nn.Module, strategy: str = "ddp", deepspeed: DeepSpeedSettings | None = None, *,
               find_unused: bool = False, **engine_args: Any) -> tuple[Any, torch.nn.Module | None]:
    """``(engine, None)`` for ``strategy: deepspeed`` (Ray Train's DeepSpeed guide: the engine in place of
    ``prepare_model``, the optimizer on the trainable parameters; ``engine_args`` are ``micro_batch``, ``lr``,
    ``weight_decay`` and ``grad_clip``), else ``(None, module wrapped for DDP)``."""
    import ray.train
    import ray.train.torch

    if strategy == "deepspeed":
        torch.cuda.set_device(ray.train.torch.get_device())
        engine_cfg = load_engine_config(deepspeed, workers=ray.train.get_context().get_world_size(), **engine_args)
        return deepspeed_engine(module, [p for p in module.parameters() if p.requires_grad], engine_cfg), None
    return None, ray.train.torch.prepare_model(module, parallel_strategy_kwargs={"find_unused_parameters": find_unused})


class EpochReporter:
    """The ``on_epoch_end`` of a trainer's fit loop: every rank reports its row, rank 0 with a checkpoint.

    Args:
        save: writes the model into the folder it is given, for the epoch it is given.
        resumed: the worker's :class:`Resume` (its start epoch and the history the rows extend).
        engine: a DeepSpeed engine (its optimizer state is not saved from rank 0), or None.
        state: extra entries of ``state.json`` (e.g. the weights' dtype).
        row: extra entries of every metrics row (e.g. this worker's shard size).
        upload_async: upload the checkpoint in the background and go on training (the retriever's epochs are
            short and its checkpoints small); otherwise the report waits for the upload.
    """

    def __init__(self, save: Callable[[Path, int], Any], resumed: Resume, engine: Any = None,
                 state: Mapping[str, Any] | None = None, row: Mapping[str, float] | None = None,
                 upload_async: bool = False) -> None:
        import ray.train

        self.save, self.engine, self.state, self.extra = save, engine, dict(state or {}), dict(row or {})
        self.start_epoch, self.history = resumed.start_epoch, resumed.history
        self.context = ray.train.get_context()
        self.upload = ({"checkpoint_upload_mode": ray.train.CheckpointUploadMode.ASYNC} if upload_async else {})

    def __call__(self, epoch: int, metrics: Mapping[str, float], optimizer: torch.optim.Optimizer) -> None:
        import ray.train

        row = {**metrics, "start_epoch": float(self.start_epoch), "world_size": float(self.context.get_world_size()),
               **self.extra}
        self.history.append(row)
        if self.context.get_world_rank() != 0:
            ray.train.report(with_worker_group(row), **self.upload)
            return
        folder = Path(tempfile.mkdtemp(prefix="rg_checkpoint_"))
        self.save(folder / MODEL_DIR, epoch)
        if self.engine is None:  # a ZeRO optimizer's state is partitioned across ranks: not saved from rank 0
            torch.save(optimizer.state_dict(), folder / OPTIMIZER_FILE)
        state = {"epoch": epoch, "history": self.history, **self.state}
        (folder / STATE_FILE).write_text(json.dumps(state, indent=2) + "\n")
        checkpoint = ray.train.Checkpoint.from_directory(str(folder))
        if self.upload:
            ray.train.report(with_worker_group(row), checkpoint=checkpoint, delete_local_checkpoint_after_upload=True,
                             **self.upload)
        else:
            ray.train.report(with_worker_group(row), checkpoint=checkpoint)
            shutil.rmtree(folder, ignore_errors=True)


# ---- driver side ---------------------------------------------------------------------------------------------


def fit_run(cfg: TrainRunConfig, loop: Callable[[dict[str, Any]], None], loop_config: dict[str, Any], *,
            storage: str, datasets: Mapping[str, Any], metric: str, split: Sequence[str] = ("train",),
            resources_per_worker: Mapping[str, float] | None = None, callbacks: Sequence[Any] = (),
            board: Any = None) -> "Result":
    """Run ``loop`` on ``cfg.num_workers`` Ray Train workers over ``datasets`` (those in ``split`` sharded),
    keeping ``cfg.keep_checkpoints`` checkpoints by ``metric`` (higher is better); with a step ``board`` the
    driver draws each epoch's steps.

    A side may be a Ray Data dataset or :class:`~rg.training.shards.HeldRows`; held sides reach the loop in its
    config (under ``HELD_ROWS_KEY``), and :func:`~rg.training.shards.shard_rows` reads either.
    """
    import ray.train
    from ray.train.torch import TorchTrainer

    held = {name: {"rows": rows, "split": name in split} for name, rows in datasets.items()
            if isinstance(rows, HeldRows)}
    datasets = {name: ds for name, ds in datasets.items() if not isinstance(ds, HeldRows)}
    trainer = TorchTrainer(
        loop,
        train_loop_config={**loop_config, HELD_ROWS_KEY: held} if held else loop_config,
        scaling_config=ray.train.ScalingConfig(num_workers=cfg.num_workers, use_gpu=cfg.use_gpu,
                                               resources_per_worker=dict(resources_per_worker or {}) or None),
        run_config=ray.train.RunConfig(
            name=cfg.run_name,
            storage_path=storage,
            checkpoint_config=ray.train.CheckpointConfig(
                num_to_keep=cfg.keep_checkpoints, checkpoint_score_attribute=metric, checkpoint_score_order="max"),
            failure_config=ray.train.FailureConfig(max_failures=cfg.max_failures),
            callbacks=list(callbacks),
        ),
        datasets=datasets,
        dataset_config=ray.train.DataConfig(datasets_to_split=[name for name in split if name in datasets]),
    )
    with DriverBar(board) if board is not None else nullcontext():
        return trainer.fit()


def finite_or_lowest(value: Any) -> float:
    """``value`` as a float, NaN (a metric an epoch could not compute) as the lowest."""
    number = float(value)
    return -math.inf if math.isnan(number) else number


@dataclass(frozen=True)
class Best:
    """The run's best checkpoint and what the report needs of the run.

    Attributes:
        checkpoint: the best checkpoint by the trainer's key.
        metrics: its reported metrics.
        epoch: its epoch.
        state: its ``state.json``.
        history: every epoch's rows, a resumed run's earlier epochs included (from the latest checkpoint).
    """

    checkpoint: "Checkpoint"
    metrics: dict[str, Any]
    epoch: int
    state: dict[str, Any]
    history: list[dict[str, Any]]

    @property
    def start_epoch(self) -> int:
        """The epoch this (possibly resumed) run started at."""
        return int(self.history[-1]["start_epoch"]) if self.history else 0

    @property
    def epochs_run(self) -> list[int]:
        """The epochs this run trained (not those of the run it resumed)."""
        return [int(row["epoch"]) for row in self.history if int(row["start_epoch"]) == self.start_epoch]

    def export(self, read: Callable[[Path], M]) -> M:
        """``read`` applied to the best checkpoint's ``model/`` folder (while it is on local disk)."""
        with self.checkpoint.as_directory() as folder:
            return read(Path(folder) / MODEL_DIR)


def best_of(result: "Result", cfg: TrainRunConfig, storage: str, metric: str,
            key: Callable[[dict[str, Any]], Any] | None = None) -> Best:
    """The best of the run's kept checkpoints by ``key`` of their metrics (default: ``metric``, NaN lowest).

    Raises:
        RuntimeError: if no checkpoint reported ``metric``.
    """
    kept = [(c, m) for c, m in (result.best_checkpoints or []) if m.get(metric) is not None]
    if not kept:
        raise RuntimeError(f"run {cfg.run_name!r} under {storage} produced no checkpoint with {metric!r}")
    rank = key or (lambda metrics: finite_or_lowest(metrics[metric]))
    checkpoint, metrics = max(kept, key=lambda cm: rank(cm[1]))
    with checkpoint.as_directory() as folder:
        state = json.loads((Path(folder) / STATE_FILE).read_text())
    with (result.checkpoint or checkpoint).as_directory() as folder:
        history = json.loads((Path(folder) / STATE_FILE).read_text())["history"]
    return Best(checkpoint, dict(metrics), int(state["epoch"]), state, history)


def json_ready(value: Any) -> Any:
    """``value`` with NaN and infinities as None, recursively (JSON has neither)."""
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return None
    if isinstance(value, Mapping):
        return {k: json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_ready(v) for v in value]
    return value


def numeric(metrics: Mapping[str, Any]) -> dict[str, float]:
    """The numeric entries of a reported metrics row (Ray adds others)."""
    return {k: v for k, v in metrics.items() if isinstance(v, (int, float))}


def write_report(output_dir: str | Path, report: Mapping[str, Any]) -> dict[str, Any]:
    """Write ``report`` (non-finite floats as null) to ``<output_dir>/train_report.json``; returns it."""
    ready = json_ready(report)
    output = Path(output_dir)
    output.mkdir(parents=True, exist_ok=True)
    (output / REPORT_FILE).write_text(json.dumps(ready, indent=2) + "\n")
    return ready
