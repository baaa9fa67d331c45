"""The training sweep on Ray Tune: a driver function per grid point runs a Ray Train job.

Each trial's driver calls :func:`rg.jobs.train_retriever.train_retriever` (or
:func:`rg.jobs.train_planner.train_planner`) with Tune's ``TuneReportCallback``, so every
epoch's validation metrics reach Tune and ASHA can stop weak trials early. The base config
itself is the first trial (the default the best point is compared with). Rerunning the same
sweep restores the experiment (``Tuner.restore``): finished trials are kept, and an interrupted
trial's run resumes from its last checkpoint because its run name derives from its point.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from ray import tune
from ray._raylet import PlacementGroupID
from ray.util.placement_group import PlacementGroup, placement_group_table, remove_placement_group

from rg.runtime import init_ray
from rg.jobs.train_planner import PlannerTrainConfig, train_planner
from rg.jobs.train_retriever import train_retriever
from rg.training.shards import WORKER_GROUP_KEY
from rg.jobs.sweep_train import SweepTrainConfig, TrainConfig, selection_metric
from tune.report import SweepFiles, write_best_config, write_sweep_results

COST = "train_seconds"
"""The cost a training sweep reports beside its metric: wall time of the trial's training."""


@dataclass(frozen=True)
class TrainSweepResult:
    """A finished training sweep: its files, the best and default rows, and errors."""

    files: SweepFiles
    best: dict[str, Any]
    default: dict[str, Any] | None
    trials: int
    stopped_early: int
    errors: int
    resumed: bool
    seconds: float


class ReleaseStoppedRuns(tune.Callback):
    """Removes an ended trial's Ray Train placement group.

    When ASHA stops a trial, Tune kills its driver function; on Ray 2.60 the Train run's
    placement group outlives it (ray-project/ray#54305) and holds the workers' CPUs, so the
    next trials wait for ever. Each epoch's report names its worker's group
    (:func:`rg.training.shards.with_worker_group`); once the trial has ended (completed, stopped
    or failed) its groups are removed. Groups of running trials are never touched.
    """

    def __init__(self) -> None:
        self.groups: dict[str, set[str]] = {}

    def on_trial_result(self, iteration, trials, trial, result, **info) -> None:
        if result.get(WORKER_GROUP_KEY):
            self.groups.setdefault(trial.trial_id, set()).add(str(result[WORKER_GROUP_KEY]))

    def on_trial_complete(self, iteration, trials, trial, **info) -> None:
        self.release(trial.trial_id)

    def on_trial_error(self, iteration, trials, trial, **info) -> None:
        self.release(trial.trial_id)

    def release(self, trial_id: str) -> list[str]:
        """Remove the trial's groups that still exist; return their ids."""
        live = {k for k, v in placement_group_table().items() if v.get("state") != "REMOVED"}
        removed = sorted(self.groups.pop(trial_id, set()) & live)
        for group in removed:
            remove_placement_group(PlacementGroup(PlacementGroupID.from_hex(group)))
        return removed


def driver_request(resources: Mapping[str, float]) -> dict[str, float]:
    """What a trial's driver reserves. Tune refuses a trial that reserves nothing at all, so a driver
    that needs no CPU (the default) reserves one byte of memory instead: it never competes with
    the Train workers for CPUs."""
    if any(float(v) for v in resources.values()):
        return dict(resources)
    return {**resources, "memory": 1}


def train_trial(config: Mapping[str, Any], sweep: SweepTrainConfig, base: Mapping[str, Any], cls: type,
                root: str) -> None:
    """One grid point: its Ray Train run, reporting each epoch to Tune (paths resolved against ``root``)."""
    from ray.tune.integration.ray_train import TuneReportCallback

    cfg: TrainConfig = sweep.trial_config(base, cls, config["point"], root)
    run = train_planner if isinstance(cfg, PlannerTrainConfig) else train_retriever
    run(cfg, callbacks=[TuneReportCallback()])


def _lookup(data: Mapping[str, Any], key: str) -> Any:
    node: Any = data
    for part in key.split("."):
        node = node.get(part) if isinstance(node, Mapping) else None
    return node


def run_train_sweep(sweep: SweepTrainConfig, progress: bool = True, root: str | None = None) -> TrainSweepResult:
    """Run (or resume) the training sweep and write its table, plots and best config.

    Args:
        root: Where relative paths of the sweep and its base config resolve
            (:func:`rg.run.storage.paths_root`: the storage root of a submitted job); default the
            current folder. Tune runs each trial in its own folder, so nothing relative reaches a trial.
    """
    from ray.tune.schedulers import ASHAScheduler

    started = time.perf_counter()
    root = root or os.getcwd()
    out = Path(root, sweep.output_dir).resolve()
    sweep = sweep.model_copy(update={"output_dir": str(out)})
    base, cls = sweep.load_base(root)
    metric = selection_metric(sweep.trial_config(base, cls, {}, root))
    init_ray(sweep.ray)
    trainable = tune.with_resources(
        tune.with_parameters(train_trial, sweep=sweep, base=base, cls=cls, root=root),
        driver_request(sweep.driver_resources),
    )
    experiment = out / "tune" / sweep.name
    resumed = tune.Tuner.can_restore(str(experiment))
    if resumed:
        tuner = tune.Tuner.restore(str(experiment), trainable=trainable, resume_unfinished=True, resume_errored=True)
    else:
        scheduler = None
        if sweep.scheduler is not None:
            scheduler = ASHAScheduler(
                time_attr="training_iteration", grace_period=sweep.scheduler.grace_period,
                reduction_factor=sweep.scheduler.reduction_factor,
            )
        tuner = tune.Tuner(
            trainable,
            param_space={"point": tune.grid_search([{}, *sweep.grid()])},
            tune_config=tune.TuneConfig(metric=metric, mode="max", scheduler=scheduler,
                                        max_concurrent_trials=sweep.max_concurrent_trials),
            run_config=tune.RunConfig(name=sweep.name, storage_path=str(out / "tune"), verbose=1 if progress else 0,
                                      callbacks=[ReleaseStoppedRuns()]),
        )
    grid = tuner.fit()
    keys = list(sweep.space)
    defaults = sweep.trial_config(base, cls, {}, root).model_dump()  # a key the base leaves out: the model's default
    rows, default, errors, stopped = [], None, 0, 0
    for result in grid:
        history = result.metrics_dataframe
        if result.error is not None or history is None or metric not in history:
            errors += 1
            continue
        point = result.config["point"]
        epochs = int(history["training_iteration"].max())
        stopped += int(epochs < int(_lookup(defaults, "train.epochs") or epochs))
        row = {k: point.get(k, _lookup(defaults, k)) for k in keys}
        row.update({metric: float(history[metric].max()), "epochs": epochs,
                    COST: float(history["time_total_s"].max())})
        if not point:
            default = row
        rows.append(row)
    seconds = time.perf_counter() - started
    extra = {"name": sweep.name, "base": sweep.base, "errors": errors, "stopped_early": stopped,
             "seconds": seconds, "resumed": resumed, "experiment": str(experiment)}
    files, _, best = write_sweep_results(rows, keys, metric, COST, out, default, extra)
    point = {k: rows[best][k] for k in keys}
    fresh = {"output_dir": str(out / "best_model"), "run_name": f"{sweep.name}-best"}
    write_best_config(base, cls.KIND, point, fresh, "python -m jobs.train", files.best_config)
    return TrainSweepResult(files, rows[best], default, len(rows), stopped, errors, resumed, seconds)


def format_train_sweep(result: TrainSweepResult, metric: str) -> str:
    """What the training sweep found, against the base config, and where its files went."""
    best, default = result.best, result.default
    point = ", ".join(f"{k}={v}" for k, v in best.items() if k not in (metric, "epochs", COST))
    lines = [
        f"{result.trials} trials ({result.stopped_early} stopped early by ASHA, {result.errors} failed)"
        f"{' resumed' if result.resumed else ''} in {result.seconds:.0f} s",
        f"best: {metric} {best[metric]:.3f} with {point} ({best['epochs']} epochs, {best[COST]:.0f} s)",
    ]
    if default is not None:
        lines.append(f"default config: {metric} {default[metric]:.3f} ({default['epochs']} epochs, {default[COST]:.0f} s)")
    lines.append(f"table: {result.files.markdown}  plots: {result.files.params_plot}, {result.files.pareto_plot}")
    lines.append(f"best config: {result.files.best_config}")
    return "\n".join(lines)
