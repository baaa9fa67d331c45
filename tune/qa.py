"""The no-training sweep on Ray Tune: one plain trainable per grid point over cached scores.

The driver scores the base evaluation's questions once (:class:`rg.jobs.sweep_qa.SweepData`),
puts them in the object store with :func:`ray.tune.with_parameters`, and runs one trial per grid
point; each trial calls :func:`rg.jobs.sweep_qa.evaluate_point` and reports its metrics with
``tune.report``. The experiment lives under ``<output_dir>/tune/<name>``: rerunning the same
config restores it with ``Tuner.restore`` and runs only the trials that did not finish.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from rg.jobs.sweep_qa import SweepData, SweepQAConfig, evaluate_point, overrides_of
from rg.runtime import init_ray
from tune.report import SweepFiles, write_best_config, write_sweep_results


@dataclass(frozen=True)
class SweepResult:
    """A finished sweep: its files, the best row, the default config's metrics, and errors."""

    files: SweepFiles
    best: dict[str, Any]
    default: dict[str, float]
    trials: int
    errors: int
    resumed: bool
    seconds: float


def qa_trial(config: Mapping[str, Any], base: Mapping[str, Any], data: SweepData) -> None:
    """One grid point: answer the cached questions under ``config`` and report the metrics."""
    from ray import tune

    tune.report(evaluate_point(base, overrides_of(config), data))


def run_qa_sweep(cfg: SweepQAConfig, progress: bool = True, root: str | None = None) -> SweepResult:
    """Run (or resume) the sweep ``cfg`` describes and write its results.

    Args:
        root: Where relative paths of the sweep and its base config resolve
            (:func:`rg.run.storage.paths_root`: the storage root of a submitted job); default the
            current folder.

    Raises:
        ConfigError: when the base config or a grid point does not validate.
    """
    from ray import tune

    started = time.perf_counter()
    root = root or os.getcwd()
    base_data, base = cfg.load_base(root)
    out = Path(root, cfg.output_dir).resolve()
    data = SweepData.prepare(base, out / "scores", progress=progress)
    default = evaluate_point(base_data, [], data)
    init_ray(cfg.ray)
    trainable = tune.with_resources(
        tune.with_parameters(qa_trial, base=base_data, data=data), {"cpu": cfg.trial_cpus}
    )
    experiment = out / "tune" / cfg.name
    resumed = tune.Tuner.can_restore(str(experiment))
    if resumed:
        tuner = tune.Tuner.restore(str(experiment), trainable=trainable, resume_errored=True)
    else:
        tuner = tune.Tuner(
            trainable,
            param_space={key: tune.grid_search(values) for key, values in cfg.space.items()},
            tune_config=tune.TuneConfig(max_concurrent_trials=cfg.max_concurrent_trials, reuse_actors=True),
            run_config=tune.RunConfig(name=cfg.name, storage_path=str(out / "tune"), verbose=1 if progress else 0),
        )
    grid = tuner.fit()
    keys = list(cfg.space)
    rows, errors = [], 0
    for result in grid:
        if result.error is not None or cfg.metric not in (result.metrics or {}):
            errors += 1
            continue
        rows.append({**{k: result.config[k] for k in keys}, **{m: result.metrics[m] for m in default}})
    seconds = time.perf_counter() - started
    extra = {"name": cfg.name, "scorer": data.scorer_name, "questions": len(data.samples), "errors": errors,
             "seconds": seconds, "resumed": resumed, "experiment": str(experiment)}
    files, _, best = write_sweep_results(rows, keys, cfg.metric, cfg.cost, out, default, extra)
    point = {k: rows[best][k] for k in keys}
    write_best_config(base_data, base.KIND, point, {"output_dir": str(out / "best_eval")}, "python -m jobs.evaluate",
                      files.best_config)
    return SweepResult(files, rows[best], default, len(rows), errors, resumed, seconds)


def format_sweep(result: SweepResult, metric: str, cost: str) -> str:
    """What the sweep found, against the default config, and where its files went."""
    best, default = result.best, result.default
    lines = [
        f"{result.trials} trials ({result.errors} failed){' resumed' if result.resumed else ''} in {result.seconds:.0f} s",
        f"best: {metric} {best[metric]:.3f} at {cost} {best[cost]:.1f} with "
        + ", ".join(f"{k}={v}" for k, v in best.items() if k not in default),
        f"default config: {metric} {default[metric]:.3f} at {cost} {default[cost]:.1f}",
        f"table: {result.files.markdown}  plots: {result.files.params_plot}, {result.files.pareto_plot}",
        f"best config: {result.files.best_config}",
    ]
    return "\n".join(lines)
