"""Training sweeps: which trainings a sweep runs, named so that a resubmitted sweep resumes.

A training sweep varies keys of a ``train`` (retriever) or ``train_planner`` config: widths,
learning rates, label sources, DDE rounds, LoRA rank. Each grid point is one Ray Train run whose
name and folders derive from the point itself, so a restored sweep's trial continues the run it
started (Ray Train resumes a run from its latest checkpoint when the name and storage match)::

    sweep = load_config("configs/sweep_train_synthetic.yaml", SweepTrainConfig)
    base, cls = sweep.load_base()
    sweep.trial_config(base, cls, {"train.lr": 0.01})   # a TrainJobConfig of its own run

The Tune side (ASHA, the driver functions, results) is :mod:`tune.train`.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, ClassVar, Mapping

from pydantic import Field, field_validator

from rg.config import Config, ConfigError, apply_overrides, read_yaml, validate_config
from rg.run.storage import resolve_mapping, submitted_job
from rg.jobs.sweep_qa import check_space, grid_points, overrides_of
from rg.runtime import RayConfig
from rg.training.planner_loop import SELECTION_METRIC as PLANNER_METRIC
from rg.jobs.train_planner import PlannerTrainConfig
from rg.jobs.train_retriever import TrainJobConfig

FIXED = ("run_name", "storage_path", "output_dir", "ray", "num_workers")
"""Keys a trial sets itself (its run, its folders, the sweep's Ray) and a sweep may not vary."""

TrainConfig = TrainJobConfig | PlannerTrainConfig


def _not_fixed(key: str) -> None:
    if key.split(".")[0] in FIXED:
        raise ValueError(f"space key {key!r} is set by each trial itself; sweep other keys")


class ASHAConfig(Config):
    """Asynchronous successive halving (Li et al., 2020): stop weak trials at rungs of epochs."""

    grace_period: int = Field(2, ge=1, description="Epochs every trial runs before it can be stopped.")
    reduction_factor: float = Field(2.0, gt=1, description="Only the best 1/factor of trials go on at each rung.")


class SweepTrainConfig(Config):
    """A training sweep on Ray Tune: a grid over a training config, ASHA, one Ray Train run per point.

    ``python -m tune.sweep --config configs/sweep_train_synthetic.yaml``
    """

    KIND: ClassVar[str] = "sweep_train"

    base: str = Field(description="A `train` or `train_planner` YAML; its keys not in `space` stay fixed.")
    base_set: list[str] = Field(default_factory=list, description="`key=value` overrides applied to `base` first.")
    space: dict[str, list[Any]] = Field(description="Swept key → values (the grid is their product), e.g. `train.lr`.")
    workers_per_trial: int = Field(1, ge=1, description="Ray Train workers of each trial's run.")
    scheduler: ASHAConfig | None = Field(default_factory=ASHAConfig, description="ASHA settings; null runs every trial to the end.")
    name: str = Field(description="Stable sweep name: rerunning it restores the experiment and resumes each run.")
    output_dir: str = Field(description="Runs, exported models, the Tune experiment, table, plots and best config.")
    max_concurrent_trials: int = Field(
        1, ge=1, description="Trials at once. Each holds its driver plus `workers_per_trial` workers: keep the product "
        "within the cluster's CPUs, or trials wait on each other's workers for ever.",
    )
    driver_resources: dict[str, float] = Field(
        default_factory=lambda: {"CPU": 0.0},
        description="What a trial's driver function reserves; on cluster.yaml's head `{tune_driver: 1}`.",
    )
    ray: RayConfig = Field(default_factory=RayConfig)

    @field_validator("space")
    @classmethod
    def _grid(cls, space: dict[str, list[Any]]) -> dict[str, list[Any]]:
        return check_space(space, _not_fixed)

    def load_base(self, root: str | None = None) -> tuple[dict[str, Any], type[TrainConfig]]:
        """The base training config as a mapping (no ``kind``) and its class; every grid point is checked.

        Args:
            root: When given, the base's relative paths (inputs, labels, encoder cache) are resolved
                against it (:func:`rg.run.storage.paths_root`; a submitted job always resolves them, so
                without a root a relative path raises): trials run in their own folders.

        Raises:
            ConfigError: naming the base file or the first grid point that does not validate.
            StorageRootError: in a submitted job, for a relative path without a storage root.
        """
        data = apply_overrides(read_yaml(self.base), self.base_set)
        if root is not None or submitted_job():
            data = resolve_mapping(data, root)
        kind = data.pop("kind", TrainJobConfig.KIND)
        classes = {TrainJobConfig.KIND: TrainJobConfig, PlannerTrainConfig.KIND: PlannerTrainConfig}
        if kind not in classes:
            raise ConfigError(f"base {self.base} declares kind {kind!r}. Fix: point `base` at a `train` or `train_planner` config")
        cls = classes[kind]
        for point in [{}, *self.grid()]:
            self.trial_config(data, cls, point, root)
        return data, cls

    def grid(self) -> list[dict[str, Any]]:
        """Every point of the space, in a stable order."""
        return grid_points(self.space)

    def trial_name(self, point: Mapping[str, Any]) -> str:
        """The run name of a grid point: the sweep name and a hash of the point (stable across reruns)."""
        digest = hashlib.sha256(json.dumps(dict(point), sort_keys=True).encode()).hexdigest()[:10]
        return f"{self.name}-{digest}"

    def trial_config(self, base: Mapping[str, Any], cls: type[TrainConfig], point: Mapping[str, Any],
                     root: str | None = None) -> TrainConfig:
        """The training config of one grid point: its own run name, checkpoints and export folder.

        ``root`` resolves relative paths of the point's values (a swept ``labels.path``) as
        :meth:`load_base` does; a relative ``output_dir`` resolves against it too (else the current folder).
        """
        out = Path(root or os.getcwd(), self.output_dir).resolve()
        data = apply_overrides(json.loads(json.dumps(base)), overrides_of(point))
        if root is not None:
            data = resolve_mapping(data, root)
        run = self.trial_name(point)
        data.update(run_name=run, storage_path=str(out / "runs"), output_dir=str(out / "models" / run),
                    num_workers=self.workers_per_trial, ray=self.ray.model_dump())
        return validate_config(data, cls, source=f"{self.base} at sweep point {dict(point)}")


def selection_metric(cfg: TrainConfig) -> str:
    """The validation metric a training run selects its best epoch by (and a sweep maximises)."""
    return cfg.train.selection_metric if isinstance(cfg, TrainJobConfig) else PLANNER_METRIC
