"""Write a QA evaluation as JSON, a Markdown table, a PNG plot and per-question JSONL.

:func:`write_qa_results` puts four files in one folder:

* ``qa.json``: ``{"title", "run": {...scorer, reader, evidence, timing}, "summary": QASummary}``;
* ``qa.md``: one row per group (all, each hop count, single/multi topic) with Hit, Hits@1,
  Macro-F1, Micro-F1 and the cost per question, then the failure reasons;
* ``qa.png``: the four answer metrics per hop count and per topic-entity count, and the
  distribution of evidence lines per question;
* ``predictions.jsonl``: one row per question: the prediction, gold answers, groups, metrics.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from rg.evaluation.qa_metrics import GroupMetrics, QASummary, QuestionScore
from rg.llm.usage import Usage
from rg.privacy.exposure import ExposureTotals, side_totals

JSON_NAME = "qa.json"
MARKDOWN_NAME = "qa.md"
PLOT_NAME = "qa.png"
PREDICTIONS_NAME = "predictions.jsonl"

METRICS: tuple[tuple[str, str], ...] = (
    ("hit", "Hit"),
    ("hits_at_1", "Hits@1"),
    ("macro_f1", "Macro-F1"),
    ("micro_f1", "Micro-F1"),
)
"""``(GroupMetrics field, label)`` of the answer metrics, in table and plot order."""


@dataclass(frozen=True)
class QAReportFiles:
    """Paths of the files written by :func:`write_qa_results`."""

    json: Path
    markdown: Path
    plot: Path
    predictions: Path


def _row(group: GroupMetrics) -> str:
    cells = [group.name, str(group.n), str(group.failed)]
    cells += [f"{getattr(group, field):.3f}" for field, _ in METRICS]
    cells += [f"{group.prompt_tokens:.1f}", f"{group.llm_calls:.2f}", f"{group.evidence_lines:.1f}", f"{group.triples:.1f}"]
    return "| " + " | ".join(cells) + " |"


def markdown_table(summary: QASummary) -> str:
    """One row per group: all questions, each hop count, then each topic-entity count."""
    lines = [
        "| questions | n | failed | " + " | ".join(label for _, label in METRICS)
        + " | prompt tokens/q | LLM calls/q | evidence lines/q | triples/q |",
        "|:--|--:|--:|" + "--:|" * len(METRICS) + "--:|--:|--:|--:|",
        _row(summary.overall),
    ]
    lines += [_row(g) for g in (*summary.by_hops, *summary.by_topics, *summary.covered)]
    return "\n".join(lines) + "\n"


def run_line(run: Mapping[str, Any]) -> str:
    """A one-line description of what was evaluated."""
    evidence = "evidence chains" if run.get("chains") else "raw triple lines"
    top_k = run.get("top_k")
    return (
        f"scorer `{run.get('scorer')}` · reader `{run.get('reader')}` · {evidence} from the top "
        f"{'all' if top_k is None else top_k} triples · {run.get('questions')} questions in "
        f"{run.get('seconds', 0.0):.1f} s"
    )


def failure_line(summary: QASummary) -> str:
    """``failed questions: <kind> × <n>, ...``, or ``""`` when none failed."""
    failures = ", ".join(f"{kind} × {n}" for kind, n in sorted(summary.failures.items()))
    return f"failed questions: {failures}" if failures else ""


def _bars(ax: Any, groups: Sequence[GroupMetrics], title: str) -> None:
    width = 0.8 / len(METRICS)
    for position, (field, label) in enumerate(METRICS):
        xs = [i + (position - (len(METRICS) - 1) / 2) * width for i in range(len(groups))]
        ax.bar(xs, [getattr(g, field) for g in groups], width, label=label, color=f"C{position}")
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels([f"{g.name}\n(n={g.n})" for g in groups], fontsize=8)
    ax.set_ylim(0.0, 1.02)
    ax.set_title(title, fontsize=10)
    ax.grid(True, axis="y", alpha=0.3)


def plot_qa(summary: QASummary, scores: Sequence[QuestionScore], path: str | Path, title: str | None = None) -> Path:
    """Answer metrics per hop count and per topic-entity count, and evidence lines per question.

    Draws on a bare ``matplotlib.figure.Figure`` (Agg canvas): pyplot's global state is untouched.
    """
    from matplotlib.figure import Figure

    path = Path(path)
    fig = Figure(figsize=(14.0, 4.2), layout="constrained")
    by_hops, by_topics, lines = fig.subplots(1, 3, gridspec_kw={"width_ratios": [1.4, 1.0, 0.9]})
    _bars(by_hops, [summary.overall, *summary.by_hops], "by hop count")
    _bars(by_topics, [summary.overall, *summary.by_topics], "by topic entities")
    by_hops.set_ylabel("score")
    handles, labels = by_hops.get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=len(METRICS), fontsize=9)
    counts = [s.prediction.evidence_lines for s in scores]
    lines.hist(counts, bins=min(30, max(1, len(set(counts)))), color="C4", alpha=0.8)
    lines.set_title(f"evidence lines per question (mean {summary.overall.evidence_lines:.1f})", fontsize=10)
    lines.set_xlabel("lines")
    lines.set_ylabel("questions")
    lines.grid(True, alpha=0.3)
    if title:
        fig.suptitle(title)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=150)
    return path


def write_predictions(scores: Sequence[QuestionScore], path: str | Path) -> Path:
    """One JSONL row per scored question (its folder created if missing; the file replaced)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as handle:
        for score in scores:
            handle.write(json.dumps(score.to_dict()) + "\n")
    return path


def round_predictions_path(out_dir: str | Path, round_no: int, without_memory: bool = False) -> Path:
    """``predictions.round<N>.jsonl`` (``.without_memory``: the same round answered with no memory)."""
    return Path(out_dir) / f"predictions.round{round_no}{'.without_memory' if without_memory else ''}.jsonl"


def write_qa_results(
    summary: QASummary,
    scores: Sequence[QuestionScore],
    out_dir: str | Path,
    run: Mapping[str, Any],
    title: str | None = None,
) -> QAReportFiles:
    """Write ``qa.json``, ``qa.md``, ``qa.png`` and ``predictions.jsonl`` into ``out_dir``.

    Args:
        summary: The aggregates.
        scores: Every scored question, in input order (one JSONL row each).
        out_dir: Folder (created if missing; these files are replaced).
        run: What was evaluated: scorer, reader, chains, top_k, questions, seconds, ...
        title: Heading of the Markdown file and title of the plot.
    """
    out = Path(out_dir)
    predictions = write_predictions(scores, out / PREDICTIONS_NAME)
    json_path = out / JSON_NAME
    json_path.write_text(json.dumps({"title": title, "run": dict(run), "summary": summary.to_dict()}, indent=2) + "\n")
    heading = f"# {title}\n\n" if title else ""
    failures = failure_line(summary)
    text = heading + run_line(run) + "\n\n" + markdown_table(summary) + (f"\n{failures}\n" if failures else "")
    markdown = out / MARKDOWN_NAME
    markdown.write_text(text)
    plot = plot_qa(summary, scores, out / PLOT_NAME, title)
    return QAReportFiles(json=json_path, markdown=markdown, plot=plot, predictions=predictions)


def exposure_totals(scores) -> dict[str, Any]:
    """What every question sent to the Brain (:class:`rg.privacy.exposure.ExposureTotals`), with its short form
    per side and category (``by_side``: :func:`rg.privacy.exposure.side_totals`)."""
    totals = ExposureTotals()
    hand = Usage()
    for s in scores:
        totals.add(s.prediction.exposure)
        hand = hand + s.prediction.usage_by_side.get("hand", Usage())
    out = totals.to_dict()
    out["by_side"] = side_totals(out["stages"], out["refused"], hand.to_dict())
    return out


def per_side(scores) -> dict[str, dict[str, float]]:
    """Mean calls and tokens per question on each side (``hand``, ``brain``), over every question."""
    out = {}
    for side in ("hand", "brain"):
        used = [s.prediction.usage_by_side.get(side, Usage()) for s in scores]
        out[side] = {key: sum(getattr(u, key) for u in used) / max(len(used), 1)
                     for key in ("calls", "prompt_tokens", "completion_tokens", "total_tokens")}
    return out


def usage_line(run: dict[str, Any]) -> str:
    """LLM calls and tokens of this run and of every run into the folder, per side; ``""`` when
    no run into the folder made an LLM call."""
    every = run.get("llm_usage_all_runs", {}).get("total", {})
    if not every.get("calls"):
        return ""
    this = run["llm_usage_this_run"]["total"]
    sides = "; ".join(f"{side} {u['calls']} calls {u['prompt_tokens']:,}+{u['completion_tokens']:,} tokens"
                      for side, u in run["llm_usage_all_runs_by_side"].items() if u["calls"])
    return (f"LLM calls this run {this['calls']} (failures {this['failures']}, tokens "
            f"{this['prompt_tokens']:,}+{this['completion_tokens']:,}); all runs into this folder: {sides} "
            f"(journal {run['llm_journal']})")
