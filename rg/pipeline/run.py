"""Run the configured stages in order, skipping finished ones, and report where everything went.

:func:`run_pipeline` starts (or joins) Ray once, then for each :class:`~rg.pipeline.stages.Stage`
decides from :class:`~rg.pipeline.state.PipelineState` whether to skip it (finished with the
same config and upstream), resume it (interrupted), or clear its stale outputs and run it
again; ``fresh=True`` clears every stage first. QA stages that can share an actor pool and are
not finished run together (:func:`~rg.pipeline.stages.run_qa_pool`): its actors start and load
each model once. It writes ``pipeline_report.json`` and ``pipeline.md`` (the text
:func:`format_report` prints) into the output folder.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Literal

from rg.run.locks import output_lock
from rg.pipeline.config import PipelineConfig
from rg.pipeline.stages import Stage, StageResult, plan_stages, remove_outputs, run_qa_pool
from rg.pipeline.state import Decision, PipelineState, fingerprint
from rg.runtime import init_ray

REPORT_JSON = "pipeline_report.json"
REPORT_MARKDOWN = "pipeline.md"

Status = Literal["ran", "resumed", "skipped"]


@dataclass(frozen=True)
class StageOutcome:
    """One stage in this run: whether it ran, its time (of the run that produced it) and result.

    ``pool`` names the QA stages one actor pool answered together with this one (itself included);
    their ``seconds`` is then the pool's, shared.
    """

    name: str
    status: Status
    seconds: float
    result: StageResult
    pool: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status, "seconds": self.seconds,
                **({"pool": list(self.pool)} if self.pool else {}), **self.result.to_dict()}


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
    outcomes: dict[str, StageOutcome] = {}
    upstream = ""
    for number, stage in enumerate(stages, 1):
        if stage.name in outcomes:  # answered earlier in a shared actor pool
            continue
        print_ = fingerprint(stage.config, upstream)
        decision = state.decide(stage.name, print_, stage.complete)
        if decision == "skip":
            echo(f"[{number}/{len(stages)}] {stage.name}: {_MESSAGES[decision]}")
            record = state.stages[stage.name]
            outcomes[stage.name] = StageOutcome(stage.name, "skipped", float(record.get("seconds", 0.0)),
                                                StageResult.from_dict(state.summary(stage.name)),
                                                tuple(record.get("pool", ())))
            upstream = state.upstream_of(stage.name, print_) if stage.produces else upstream
            continue
        group = [_Pending(number, stage, print_, decision), *_pool_mates(stages, number, state, upstream)]
        if len(group) > 1:
            outcomes.update(_run_pool(group, len(stages), state, progress, echo))
            continue
        echo(f"[{number}/{len(stages)}] {stage.name}: {_MESSAGES[decision]}")
        if decision == "restart":
            remove_outputs(stage)
        state.start(stage.name, print_)
        begin = time.perf_counter()
        result = stage.run(progress)
        seconds = time.perf_counter() - begin
        state.finish(stage.name, print_, seconds, result.to_dict())
        upstream = state.upstream_of(stage.name, print_) if stage.produces else upstream
        outcomes[stage.name] = StageOutcome(stage.name, "resumed" if decision == "resume" else "ran", seconds, result)
        echo(f"      {result.result}  ({seconds:.1f} s)")
    outcomes = {stage.name: outcomes[stage.name] for stage in stages}  # in stage order
    report = PipelineReport(root, tuple(outcomes.values()), time.perf_counter() - started)
    root.mkdir(parents=True, exist_ok=True)
    (root / REPORT_JSON).write_text(json.dumps(report.to_dict(), indent=2) + "\n")
    (root / REPORT_MARKDOWN).write_text(format_report(report) + "\n")
    return report


@dataclass(frozen=True)
class _Pending:
    """A stage about to run: its number, fingerprint and what the state decided."""

    number: int
    stage: Stage
    print_: str
    decision: Decision


def _pool_mates(stages: list[Stage], number: int, state: PipelineState, upstream: str) -> list[_Pending]:
    """The stages after stage ``number`` that one actor pool can answer with it: the same ``pool`` key and
    not finished; the look stops at a stage whose outputs later stages read (it may change their upstream)."""
    key = stages[number - 1].pool
    if key is None or stages[number - 1].produces:
        return []
    mates = []
    for later, stage in enumerate(stages[number:], number + 1):
        if stage.produces:
            break
        if stage.pool != key:
            continue
        print_ = fingerprint(stage.config, upstream)
        decision = state.decide(stage.name, print_, stage.complete)
        if decision != "skip":
            mates.append(_Pending(later, stage, print_, decision))
    return mates


def _run_pool(group: list[_Pending], total: int, state: PipelineState, progress: bool,
              echo: Callable[[str], None]) -> dict[str, StageOutcome]:
    """Run QA stages in one actor pool (:func:`~rg.pipeline.stages.run_qa_pool`) and record each."""
    names = tuple(p.stage.name for p in group)
    for pending in group:
        echo(f"[{pending.number}/{total}] {pending.stage.name}: {_MESSAGES[pending.decision]}")
        if pending.decision == "restart":
            remove_outputs(pending.stage)
        state.start(pending.stage.name, pending.print_)
    echo(f"      one actor pool answers these {len(group)} QA runs, each model loaded once")
    begin = time.perf_counter()
    results = run_qa_pool([p.stage for p in group], progress)
    seconds = time.perf_counter() - begin
    outcomes = {}
    for pending in group:
        name, result = pending.stage.name, results[pending.stage.name]
        state.finish(name, pending.print_, seconds, result.to_dict(), pool=names)
        status: Status = "resumed" if pending.decision == "resume" else "ran"
        outcomes[name] = StageOutcome(name, status, seconds, result, names)
        echo(f"      {name}: {result.result}")
    echo(f"      ({seconds:.1f} s for the {len(group)} runs)")
    return outcomes


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
    lines += [f"| {s.name} | {s.status} | {s.seconds:.1f}{' ‡' if s.pool else ''} | {s.result.result} |"
              for s in report.stages]
    pools = list(dict.fromkeys(s.pool for s in report.stages if s.pool))
    lines += [f"\n‡ one actor pool answered {', '.join(pool)} together; the seconds are the pool's" for pool in pools]
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
