"""Write retrieval results as JSON, a Markdown table and a recall@K plot.

:func:`write_results` puts three files in one folder:

* ``retrieval.json``: ``{"title": ..., "results": [RetrievalResult.to_dict(), ...]}``;
* ``retrieval.md``: one table row per method × measure (triple recall against each reference,
  then answer recall), one column per K;
* ``retrieval.png``: recall against K, one line per method, one panel per reference plus one
  for answer recall.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from rg.evaluation.retrieval import RetrievalResult
from rg.metrics import RecallAtK

if TYPE_CHECKING:
    from matplotlib.lines import Line2D

ANSWERS = "answers"
"""Label of the answer-recall measure in tables and plots."""

JSON_NAME = "retrieval.json"
MARKDOWN_NAME = "retrieval.md"
PLOT_NAME = "retrieval.png"


@dataclass(frozen=True)
class ReportFiles:
    """Paths of the files written by :func:`write_results`."""

    json: Path
    markdown: Path
    plot: Path


def _all_ks(results: Sequence[RetrievalResult]) -> list[int]:
    """Every cut-off used by any result, ascending."""
    return sorted({k for result in results for k in result.ks})


def _measures(results: Sequence[RetrievalResult]) -> list[str]:
    """Reference names in first-seen order."""
    return list(dict.fromkeys(name for result in results for name in result.triple_recall))


def _rows(result: RetrievalResult) -> list[tuple[str, RecallAtK]]:
    """``(label, recall)`` per measure of one result: each reference's triples, then answers."""
    rows = [(f"{name} triples", recall) for name, recall in result.triple_recall.items()]
    return rows + [(ANSWERS, result.answer_recall)]


def _cell(recall: RecallAtK, k: int) -> str:
    """One table cell: the recall with three decimals, ``n/a`` when nothing was counted."""
    if k not in recall.values:
        return ""
    value = recall.values[k]
    return "n/a" if value is None else f"{value:.3f}"


def markdown_table(results: Sequence[RetrievalResult]) -> str:
    """A Markdown table of recall@K: one row per method × measure.

    Columns: method, measure (``<reference> triples`` or ``answers``), questions counted,
    questions skipped, then recall at each K used by any result (empty where a result lacks
    that K, ``n/a`` where no question was counted). Ends with a newline.
    """
    ks = _all_ks(results)
    lines = [
        "| method | recall of | questions | skipped | " + " | ".join(f"R@{k}" for k in ks) + " |",
        "|:--|:--|--:|--:|" + "--:|" * len(ks),
    ]
    for result in results:
        for label, recall in _rows(result):
            cells = [result.method, label, str(recall.n), str(recall.skipped)]
            cells += [_cell(recall, k) for k in ks]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def plot_results(results: Sequence[RetrievalResult], path: str | Path, title: str | None = None) -> Path:
    """Plot recall against K (log scale): one panel per reference and one for answer recall.

    Draws on a bare ``matplotlib.figure.Figure`` (Agg canvas), so pyplot's global state and
    the process-wide backend are left alone.

    Args:
        results: The results to draw, one line per result (its method name in the legend).
        path: The PNG file to write.
        title: Optional figure title (e.g. the dataset and split).

    Returns:
        ``path`` as a Path.
    """
    from matplotlib.figure import Figure

    path = Path(path)
    panels = _measures(results) + [ANSWERS]
    ks = _all_ks(results)
    fig = Figure(figsize=(max(4.2 * len(panels), 5.5), 3.9), layout="constrained")  # no pyplot: no global state
    axes = fig.subplots(1, len(panels), sharey=True, squeeze=False)
    legend: dict[str, Line2D] = {}  # method -> its line, for one legend under all panels
    for ax, panel in zip(axes[0], panels):
        counted = None
        for position, result in enumerate(results):
            recall = result.answer_recall if panel == ANSWERS else result.triple_recall.get(panel)
            if recall is None:
                continue
            counted = recall.n if counted is None else counted
            values = [math.nan if recall.values[k] is None else recall.values[k] for k in result.ks]
            # One colour per method in every panel, even where another method lacks the panel.
            [line] = ax.plot(result.ks, values, marker="o", color=f"C{position % 10}", label=result.method)
            legend.setdefault(result.method, line)
        what = "answer recall" if panel == ANSWERS else f"triple recall vs {panel}"
        ax.set_title(f"{what} (n={counted})", fontsize=10)
        ax.set_xscale("log")
        ax.set_xticks(ks)
        ax.set_xticklabels([str(k) for k in ks])
        ax.minorticks_off()
        ax.set_xlabel("K (top triples)")
        ax.set_ylim(0.0, 1.02)
        ax.grid(True, alpha=0.3)
    axes[0][0].set_ylabel("recall@K")
    fig.legend(list(legend.values()), list(legend), loc="outside lower center", ncol=max(1, len(legend)), fontsize=9)
    if title:
        fig.suptitle(title)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=150)  # rendered by the Agg canvas
    return path


def write_results(
    results: Sequence[RetrievalResult], out_dir: str | Path, title: str | None = None
) -> ReportFiles:
    """Write ``retrieval.json``, ``retrieval.md`` and ``retrieval.png`` into ``out_dir``.

    Args:
        results: One result per method (all on the same questions, for a fair comparison).
        out_dir: Folder to write into (created if missing; files there are replaced).
        title: Optional heading of the Markdown file and title of the plot.

    Raises:
        ValueError: if ``results`` is empty.
    """
    if not results:
        raise ValueError("no results to write; pass at least one RetrievalResult")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    payload = {"title": title, "results": [r.to_dict() for r in results]}
    json_path = out / JSON_NAME
    json_path.write_text(json.dumps(payload, indent=2) + "\n")
    markdown_path = out / MARKDOWN_NAME
    heading = f"# {title}\n\n" if title else ""
    markdown_path.write_text(heading + markdown_table(results))
    plot_path = plot_results(results, out / PLOT_NAME, title)
    return ReportFiles(json=json_path, markdown=markdown_path, plot=plot_path)
