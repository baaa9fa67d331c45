"""Sweep results as files a person reads: a CSV and Markdown table, plots, and the best config.

One row per finished trial: the swept values, then the metrics. Plots: the metric against each
swept parameter, and the metric against the cost with its Pareto front marked. The best
configuration is written back as a YAML the jobs accept, opening with the command that runs it.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import yaml

from rg.config import apply_overrides
from rg.jobs.sweep_qa import overrides_of, pareto_front


@dataclass(frozen=True)
class SweepFiles:
    """Where a sweep's results went."""

    csv: Path
    markdown: Path
    params_plot: Path
    pareto_plot: Path
    best_config: Path
    summary: Path


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3f}"
    return json.dumps(value) if isinstance(value, (list, dict)) or value is None else str(value)


def _numeric(values: Sequence[Any]) -> bool:
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)


def plot_params(rows: Sequence[Mapping[str, Any]], keys: Sequence[str], metric: str, path: Path) -> None:
    """One panel per swept key: every trial's metric at its value, and the mean per value."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(keys), figsize=(4 * len(keys), 3.4), squeeze=False)
    for ax, key in zip(axes[0], keys):
        values = [row[key] for row in rows]
        levels = sorted(set(map(_cell, values)), key=lambda s: (len(s), s))
        if _numeric(values):
            xs = [float(v) for v in values]
            order = sorted(set(xs))
        else:
            xs = [levels.index(_cell(v)) for v in values]
            order = list(range(len(levels)))
            ax.set_xticks(order, levels, rotation=30)
        ax.scatter(xs, [row[metric] for row in rows], alpha=0.5, s=18)
        means = [sum(r[metric] for r, x in zip(rows, xs) if x == o) / xs.count(o) for o in order]
        ax.plot(order, means, color="C1", marker="o", label="mean")
        ax.set_xlabel(key)
        ax.set_ylabel(metric)
        ax.grid(alpha=0.3)
    axes[0][0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_pareto(rows: Sequence[Mapping[str, Any]], metric: str, cost: str, front: Sequence[int], path: Path,
                default: Mapping[str, Any] | None) -> None:
    """Metric against cost for every trial; the Pareto front joined, the default config marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 4))
    ax.scatter([r[cost] for r in rows], [r[metric] for r in rows], alpha=0.45, s=18, label="trials")
    ax.plot([rows[i][cost] for i in front], [rows[i][metric] for i in front], color="C3", marker="o", label="Pareto front")
    if default is not None:
        ax.scatter([default[cost]], [default[metric]], marker="*", s=160, color="k", label="default config")
    ax.set_xlabel(f"{cost} per question (lower is cheaper)")
    ax.set_ylabel(metric)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_best_config(base: Mapping[str, Any], kind: str, point: Mapping[str, Any], fresh: Mapping[str, Any],
                      command: str, path: Path) -> None:
    """``base`` with the best point applied and ``fresh`` keys (its own output folder, run name), as a
    YAML the jobs accept."""
    data = apply_overrides(json.loads(json.dumps(base)), overrides_of(point))
    data.update(fresh)
    header = f"# {command} --config {path}\n# Written by tune.sweep: the best point of the sweep applied to its base config.\n"
    path.write_text(header + yaml.safe_dump({"kind": kind, **data}, sort_keys=False))


def write_sweep_results(
    rows: Sequence[Mapping[str, Any]],
    keys: Sequence[str],
    metric: str,
    cost: str,
    out: Path,
    default: Mapping[str, Any] | None,
    extra: Mapping[str, Any],
) -> tuple[SweepFiles, list[int], int]:
    """Write the table, plots and summary of finished trials; return the files, the front and the best row.

    Args:
        rows: One mapping per finished trial: the swept keys and the metrics.
        keys: The swept keys (table columns before the metrics).
        metric: Maximised metric; ties go to the lower ``cost``.
        cost: Minimised cost metric.
        out: Output folder.
        default: The base config's metrics (the baseline row), if measured.
        extra: More fields for ``summary.json`` (run name, seconds, errors).
    """
    if not rows:
        raise ValueError("no trial finished; see the Tune experiment folder for the errors")
    out.mkdir(parents=True, exist_ok=True)
    metrics = [k for k in rows[0] if k not in keys]
    order = sorted(range(len(rows)), key=lambda i: (-rows[i][metric], rows[i][cost]))
    best = order[0]
    front = pareto_front([r[metric] for r in rows], [r[cost] for r in rows])
    files = SweepFiles(out / "results.csv", out / "results.md", out / "params.png", out / "pareto.png",
                       out / "best.yaml", out / "summary.json")
    with files.csv.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow([*keys, *metrics, "pareto"])
        for i in order:
            writer.writerow([_cell(rows[i][k]) for k in [*keys, *metrics]] + [int(i in front)])
    lines = ["| " + " | ".join([*keys, *metrics, "Pareto"]) + " |", "|" + "---|" * (len(keys) + len(metrics) + 1)]
    if default is not None:
        lines.append("| " + " | ".join(["default"] * len(keys) + [_cell(default[m]) for m in metrics] + [""]) + " |")
    for i in order:
        cells = [_cell(rows[i][k]) for k in [*keys, *metrics]] + ["yes" if i in front else ""]
        lines.append("| " + " | ".join(cells) + " |")
    files.markdown.write_text("\n".join(lines) + "\n")
    plot_params(rows, keys, metric, files.params_plot)
    plot_pareto(rows, metric, cost, front, files.pareto_plot, default)
    summary = {
        **extra,
        "trials": len(rows),
        "metric": metric,
        "cost": cost,
        "best": {k: rows[best][k] for k in [*keys, *metrics]},
        "default": dict(default) if default is not None else None,
        "pareto": [{k: rows[i][k] for k in [*keys, metric, cost]} for i in front],
    }
    files.summary.write_text(json.dumps(summary, indent=2))
    return files, front, best
