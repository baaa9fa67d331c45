"""Run the configured stages in order, skipping finished ones, and report where everything went.

:func:`run_pipeline` starts (or joins) Ray once, then for each :class:`~rg.pipeline.stages.Stage`
decides from :class:`~rg.pipeline.state.PipelineState` whether to skip it (finished with the
same config and upstream), resume it (interrupted), or clear its stale outputs and run it
again; ``fresh=True`` clears every stage first. It writes ``pipeline_report.json`` and
``pipeline.md`` (the text :func:`format_report` prints) into the output folder.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Literal

from rg.run.locks import output_lock
from rg.pipeline.config import PipelineConfig
from rg.pipeline.stages import StageResult, plan_stages, remove_outputs
from rg.pipeline.state import PipelineState, fingerprint
from rg.runtime import init_ray

REPORT_JSON = "pipeline_report.json"
REPORT_MARKDOWN = "pipeline.md"

Status = Literal["ran", "resumed", "skipped"]


@dataclass(frozen=True)
class StageOutcome:
    """One stage in this run: whether it ran, its time (of the run that produced it) and result."""

    name: str
    status: Status
    seconds: float
    result: StageResult

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status, "seconds": self.seconds, **self.result.to_dict()}


@dataclass(frozen=True)
class PipelineReport:
    """Every stage's outcome and where the pipeline's own report went."""

    output_dir: Path
    stages: tuple[StageOutcome, ...]
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        return {"output_dir": str(self.output_dir), "seconds": self.seconds, "stages": [s.to_dict() for s in self.stages]}


_MESSAGES = {
    "start": "running",
    "resume": "resuming an interrupted run",
    "restart": "config or upstream changed: clearing its outputs and running again",
    "skip": "finished earlier with the same config: skipped",
}


def run_pipeline(
    cfg: PipelineConfig, fresh: bool = False, progress: bool = True, echo: Callable[[str], None] = print
) -> PipelineReport:
    """Run every configured stage that is not already complete.

    Args:
        cfg: The validated pipeline config.
        fresh: Clear every stage's outputs and the state first, and run everything.
        progress: Show the stages' progress bars.
        echo: Where stage headers go (``print`` by default).

    Returns:
        The report, also written to ``<output_dir>/pipeline_report.json`` and ``pipeline.md``.

    Raises:
        OutputLockedError: another pipeline writes into ``output_dir`` (each stage also locks its own folder).
    """
    with output_lock(cfg.output_dir, "jobs.pipeline"):
        return _run_locked(cfg, fresh, progress, echo)


def _run_locked(cfg: PipelineConfig, fresh: bool, progress: bool, echo: Callable[[str], None]) -> PipelineReport:
    started = time.perf_counter()
    root = Path(cfg.output_dir)
    stages = plan_stages(cfg)
    state = PipelineState(root)
    if fresh:
        for stage in stages:
            remove_outputs(stage)
        state.clear()
    init_ray(cfg.ray)
    outcomes: list[StageOutcome] = []
    upstream = ""
    for number, stage in enumerate(stages, 1):
        print_ = fingerprint(stage.config, upstream)
        decision = state.decide(stage.name, print_, stage.complete)
        echo(f"[{number}/{len(stages)}] {stage.name}: {_MESSAGES[decision]}")
        if decision == "skip":
            record = state.stages[stage.name]
            outcomes.append(StageOutcome(stage.name, "skipped", float(record.get("seconds", 0.0)),
                                         StageResult.from_dict(state.summary(stage.name))))
            upstream = state.upstream_of(stage.name, print_) if stage.produces else upstream
            continue
        if decision == "restart":
            remove_outputs(stage)
        state.start(stage.name, print_)
        begin = time.perf_counter()
        result = stage.run(progress)
        seconds = time.perf_counter() - begin
        state.finish(stage.name, print_, seconds, result.to_dict())
        upstream = state.upstream_of(stage.name, print_) if stage.produces else upstream
        outcomes.append(StageOutcome(stage.name, "resumed" if decision == "resume" else "ran", seconds, result))
        echo(f"      {result.result}  ({seconds:.1f} s)")
    report = PipelineReport(root, tuple(outcomes), time.perf_counter() - started)
    root.mkdir(parents=True, exist_ok=True)
    (root / REPORT_JSON).write_text(json.dumps(report.to_dict(), indent=2) + "\n")
    (root / REPORT_MARKDOWN).write_text(format_report(report) + "\n")
    return report


def _qa_table(outcomes: list[StageOutcome]) -> list[str]:
    rows = [
        "| QA run | scorer | reader | evidence | n | Hit | Hits@1 | Macro-F1 | Micro-F1 | prompt tokens/q | LLM calls/q | lines/q |",
        "|:--|:--|:--|:--|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for outcome in outcomes:
        m = outcome.result.metrics
        o = m["overall"]
        if m.get("reasoner") == "dualtower":  # "reasoner" is absent in states of older rg versions
            evidence = f"dual tower, {m['privacy_mode']} view, {m['brain_calls_per_question']:.2f} Brain calls/q"
            if m.get("exposure"):  # absent in states of older rg versions
                brain = m["exposure"]["brain"]
                evidence += f", {brain['request_chars'] / max(o['n'], 1):,.0f} chars/q sent, " \
                            f"{sum(brain['refused'].values())} refused"
        elif m["chains"] and m.get("walks") == "planned":
            evidence = "chains of the decoded paths"
        else:
            evidence = f"{'chains' if m['chains'] else 'raw triples'}, top {m['top_k'] or 'all'}"
        rows.append(
            f"| {outcome.name.split('/', 1)[1]} | {m['scorer']} | {m['reader']} | {evidence} | {o['n']} | "
            f"{o['hit']:.3f} | {o['hits_at_1']:.3f} | {o['macro_f1']:.3f} | {o['micro_f1']:.3f} | "
            f"{o['prompt_tokens']:.1f} | {o['llm_calls']:.2f} | {o['evidence_lines']:.1f} |"
        )
    return rows


def _hop_table(outcomes: list[StageOutcome]) -> list[str]:
    groups = list(dict.fromkeys(g["name"] for o in outcomes for g in (*o.result.metrics["by_hops"], *o.result.metrics["by_topics"])))
    if len(groups) < 2:
        return []
    rows = ["| Hit by group | " + " | ".join(groups) + " |", "|:--|" + "--:|" * len(groups)]
    for outcome in outcomes:
        metrics = outcome.result.metrics
        hits = {g["name"]: g for g in (*metrics["by_hops"], *metrics["by_topics"])}
        cells = [f"{hits[g]['hit']:.3f} (n={hits[g]['n']})" if g in hits else "" for g in groups]
        rows.append(f"| {outcome.name.split('/', 1)[1]} | " + " | ".join(cells) + " |")
    return rows


def format_report(report: PipelineReport) -> str:
    """The results: a stage table, the QA table (overall and by group), and every file written."""
    ran = sum(1 for s in report.stages if s.status != "skipped")
    lines = [
        f"Pipeline {report.output_dir}: {len(report.stages)} stages ({ran} run, "
        f"{len(report.stages) - ran} skipped) in {report.seconds:.1f} s",
        "",
        "| stage | status | seconds | result |",
        "|:--|:--|--:|:--|",
    ]
    lines += [f"| {s.name} | {s.status} | {s.seconds:.1f} | {s.result.result} |" for s in report.stages]
    qa = [s for s in report.stages if s.name.startswith("qa/")]
    if qa:
        lines += ["", *_qa_table(qa)]
        hops = _hop_table(qa)
        lines += ["", *hops] if hops else []
    lines += ["", "Files:"]
    for stage in report.stages:
        for label, path in stage.result.files.items():
            lines.append(f"  {stage.name:<16} {label:<12} {path}")
    lines.append(f"  {'pipeline':<16} {'report':<12} {report.output_dir / REPORT_JSON}, {report.output_dir / REPORT_MARKDOWN}")
    return "\n".join(lines)
