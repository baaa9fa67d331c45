"""The pipeline's stages: each calls one existing job function and condenses its report.

A :class:`Stage` pairs a section of the pipeline config with the job function that runs it
(:func:`rg.jobs.build_subgraphs.build_subgraphs`, :func:`rg.jobs.refine.refine`,
:func:`rg.jobs.train_retriever.train_retriever`, :func:`rg.jobs.train_planner.train_planner`,
:func:`rg.jobs.train_reader.train_reader`,
:func:`rg.jobs.evaluate.evaluate`,
:func:`rg.jobs.evaluate_qa.evaluate_qa`; QA stages over the same questions share one actor pool,
:func:`run_qa_pool`), the file whose existence says it finished, the
folders it owns (cleared when its config changes or on ``--fresh``), and a
:class:`StageResult`: a one-line result, the key metrics and where its files went.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from rg.config import Config
from rg.jobs.build_subgraphs import REPORT_FILE as BUILD_REPORT
from rg.jobs.build_subgraphs import BuildSubgraphsConfig, build_subgraphs
from rg.jobs.evaluate import EvaluateConfig, evaluate
from rg.jobs.evaluate_qa import QAEvaluateConfig, QAResult, evaluate_qa, evaluate_qa_runs
from rg.jobs.qa_pool import shared_pool_key
from rg.evaluation.qa_report import JSON_NAME as QA_JSON
from rg.evaluation.report import JSON_NAME as RETRIEVAL_JSON
from rg.pipeline.config import PipelineConfig
from rg.jobs.refine import LABELS_DIR, RefineConfig, refine
from rg.jobs.harness import REPORT_FILE as TRAIN_REPORT
from rg.jobs.refine import REPORT_FILE as REFINE_REPORT
from rg.jobs.train_planner import PlannerTrainConfig, train_planner
from rg.jobs.train_retriever import TrainJobConfig, train_retriever
from rg.jobs.train_reader import ReaderTrainConfig, train_reader

RECALL_K = 100
"""Cut-off of the recall quoted in one-line results (the largest K evaluated if absent)."""


@dataclass(frozen=True)
class StageResult:
    """What one stage produced, condensed for the results table (and stored in the state file).

    Attributes:
        result: One line: the stage's headline numbers.
        metrics: Key metrics, JSON-ready.
        files: Label → path of what it wrote.
    """

    result: str
    metrics: dict[str, Any] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"result": self.result, "metrics": self.metrics, "files": self.files}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "StageResult":
        return cls(result=str(data["result"]), metrics=dict(data["metrics"]), files=dict(data["files"]))


@dataclass(frozen=True)
class Stage:
    """One step of the pipeline.

    Attributes:
        name: ``build``, ``refine``, ``train``, ``plan``, ``evaluate`` or ``qa/<run>``.
        config: Its validated section.
        complete: The file the stage writes last; it exists only after a finished run.
        owned: Local folders it writes (removed before a restart).
        produces: Whether later stages read its outputs (its fingerprint flows downstream).
        run: Runs the stage: ``run(progress) -> StageResult``.
        pool: QA stages only: stages with the same key can be answered by one actor pool
            (:func:`run_qa_pool`); None for a stage that runs alone.
    """

    name: str
    config: Config
    complete: Path
    owned: tuple[Path, ...]
    produces: bool
    run: Callable[[bool], StageResult]
    pool: str | None = None


def short_method(name: str) -> str:
    """A scorer name without its encoder version: ``cosine:m==0.1.0`` → ``cosine:m``."""
    return name.split("==", 1)[0]


def _build(cfg: BuildSubgraphsConfig, progress: bool) -> StageResult:
    report = build_subgraphs(cfg, fresh=False, progress=progress)
    sources = report["sources"].values()
    lines = sum(s["lines"] for s in sources)
    built = sum(s["built"] for s in sources)
    triples = sum((s["mean_triples"] or 0.0) * s["built"] for s in sources)
    mean = triples / built if built else 0.0
    out = Path(cfg.output_dir)
    return StageResult(
        result=f"{built:,}/{lines:,} questions got subgraphs (mean {mean:.0f} triples) from a KG of "
        f"{report['kb']['triples']:,} triples",
        metrics={"questions": lines, "built": built, "mean_triples": mean, "kg_triples": report["kb"]["triples"]},
        files={"shards": ", ".join(str(out / name) for name in report["sources"]), "report": str(out / BUILD_REPORT)},
    )


def _refine(cfg: RefineConfig, progress: bool) -> StageResult:
    report = refine(cfg, progress=progress)
    pool = (
        f"; candidates {report['mean_pool_before']:.1f} → {report['mean_pool_after']:.1f} per question"
        if report["mean_pool_before"] is not None
        else ""
    )
    out = Path(cfg.output_dir)
    keys = ("questions", "refined", "weak_fallback", "compression_ratio", "mean_positive_triples", "selector")
    return StageResult(
        result=f"{report['questions']:,} questions labelled by {report['selector']}: {report['refined']:,} refined, "
        f"{report['weak_fallback']:,} weak fallback{pool}",
        metrics={k: report[k] for k in keys},
        files={"labels": str(out / LABELS_DIR), "report": str(out / REFINE_REPORT)},
    )


def _train(cfg: TrainJobConfig, progress: bool) -> StageResult:
    del progress  # Ray Train reports per epoch; the job has no bar of its own
    report = train_retriever(cfg)
    best = report["best_metrics"]
    answer = best.get(f"val_answer_recall@{RECALL_K}")
    extra = f", answer recall@{RECALL_K} {answer:.3f}" if answer is not None else ""
    return StageResult(
        result=f"{report['kind']} on {report['label_source']} labels ({report['train_questions']} train / "
        f"{report['val_questions']} val questions, {report['num_workers']} workers): best {report['metric']} "
        f"{report['best_value']:.3f} at epoch {report['best_epoch']}{extra}",
        metrics={"metric": report["metric"], "best_value": report["best_value"], "best_epoch": report["best_epoch"],
                 "best_metrics": best, "seconds": report["seconds"]},
        files={"retriever": report["retriever_dir"], "report": str(Path(cfg.output_dir) / TRAIN_REPORT)},
    )


def _plan(cfg: PlannerTrainConfig, progress: bool) -> StageResult:
    report = train_planner(cfg, progress=progress)
    best = report["best_metrics"]
    exact = best.get(report["metric"])
    scores = (report.get("evaluation") or {}).get("scores") or []
    overall = [r for r in scores if r["group"] == "all" and r["mode"] == "constrained"]
    widest = max(overall, key=lambda r: r["beam_width"]) if overall else None
    recall = (
        f"; constrained k={widest['beam_width']} answer recall {widest['answer_recall']:.3f}"
        if widest and widest.get("answer_recall") is not None else ""
    )
    return StageResult(
        result=f"planner on {report['label_source']} paths ({report['train_questions']} train / "
        f"{report['val_questions']} val questions, {report['num_workers']} workers): best val path exact match "
        f"{'n/a' if exact is None else f'{exact:.3f}'} at epoch {report['best_epoch']}{recall}",
        metrics={"metric": report["metric"], "best_value": exact, "best_epoch": report["best_epoch"],
                 "evaluation": report.get("evaluation"), "seconds": report["seconds"]},
        files={"planner": report["planner_dir"], "report": str(Path(cfg.output_dir) / TRAIN_REPORT)},
    )


def _read(cfg: ReaderTrainConfig, progress: bool) -> StageResult:
    report = train_reader(cfg, progress=progress)
    best, depth = report["best_metrics"], report.get("depth_predictor")
    return StageResult(
        result=f"tuned reader ({report['base']} in {report['precision']['base_weights']} + LoRA) on {report['train_examples']} of {report['train_questions']} "
        f"train questions ({report['num_workers']} workers, mean prompt {report['mean_prompt_tokens']:.0f} tokens): "
        + (f"best val Hits@1 {best.get('val_hits_at_1', float('nan')):.3f} at epoch {report['best_epoch']}"
           if report["metric"] == "val_hits_at_1" else f"epoch {report['best_epoch']} kept (no validation)")
        + ("" if depth is None or depth["val_accuracy"] is None else f"; question depth right on {depth['val_accuracy']:.3f}"),
        metrics={"metric": report["metric"], "best_value": best.get("val_hits_at_1"), "best_epoch": report["best_epoch"],
                 "seconds": report["seconds"], "depth_predictor": depth},
        files={"reader": report["reader_dir"], "report": str(Path(cfg.output_dir) / TRAIN_REPORT)},
    )


def _evaluate(cfg: EvaluateConfig, progress: bool) -> StageResult:
    del progress  # seconds on the driver
    results, files = evaluate(cfg)
    ks = results[0]["ks"]
    k = RECALL_K if RECALL_K in ks else max(ks)
    recalls = {r["method"]: r["answer_recall"]["recall"].get(str(k)) for r in results}
    text = " · ".join(f"{short_method(m)} {'n/a' if v is None else f'{v:.3f}'}" for m, v in recalls.items())
    return StageResult(
        result=f"answer recall@{k} on {results[0]['questions']} {cfg.side} questions: {text}",
        metrics={"k": k, "answer_recall": recalls, "results": results},
        files={"table": str(files.markdown), "plot": str(files.plot), "json": str(files.json)},
    )


def _qa(cfg: QAEvaluateConfig, progress: bool) -> StageResult:
    return _qa_result(cfg, evaluate_qa(cfg, progress=progress))


def run_qa_pool(stages: Sequence[Stage], progress: bool) -> dict[str, StageResult]:
    """Several QA stages answered by one actor pool, each model loaded once (their ``pool`` keys are equal);
    each stage's files and result are what it would write and return alone."""
    configs = {stage.name: stage.config for stage in stages}
    results = evaluate_qa_runs(configs, progress=progress)  # type: ignore[arg-type]
    return {name: _qa_result(configs[name], result) for name, result in results.items()}  # type: ignore[arg-type]


def _qa_result(cfg: QAEvaluateConfig, result: QAResult) -> StageResult:
    overall = result.summary.overall
    exposure = result.run.get("exposure", {}).get("by_side")
    return StageResult(
        result=f"Hit {overall.hit:.3f} · Hits@1 {overall.hits_at_1:.3f} · Macro-F1 {overall.macro_f1:.3f} · "
        f"Micro-F1 {overall.micro_f1:.3f} ({overall.n} {cfg.side} questions, {overall.failed} failed)"
        + (f" · {exposure_line(exposure)}" if exposure else ""),
        metrics={
            "overall": overall.to_dict(),
            "by_hops": [g.to_dict() for g in result.summary.by_hops],
            "by_topics": [g.to_dict() for g in result.summary.by_topics],
            "failures": result.summary.failures,
            "scorer": short_method(str(result.run["scorer"])),
            "reader": result.run["reader"],
            "chains": cfg.chains,
            "walks": cfg.evidence.walks,
            "top_k": cfg.top_k,
            "reasoner": cfg.reasoner,
            "privacy_mode": cfg.dualtower.privacy.mode if cfg.dualtower is not None else None,
            "brain_calls_per_question": result.run.get("brain_calls_per_question"),
            "exposure": exposure,
        },
        files={"table": str(result.files.markdown), "plot": str(result.files.plot),
               "predictions": str(result.files.predictions)},
    )


def exposure_line(by_side: dict) -> str:
    """What the Brain was sent, in a few words (:func:`rg.privacy.exposure.side_totals`)."""
    brain = by_side["brain"]
    refused = sum(brain["refused"].values())
    kinds = ", ".join(f"{k} {v}" for k, v in brain["refused"].items())
    return (f"Brain sent {brain['requests']} requests, {brain['request_chars']:,} chars, "
            f"{brain['shown']['pseudonyms']} pseudonyms; {refused} refused" + (f" ({kinds})" if kinds else ""))


def _local(path: str) -> tuple[Path, ...]:
    return () if "://" in path else (Path(path),)


def plan_stages(cfg: PipelineConfig) -> list[Stage]:
    """The configured stages in order: build, refine, train, plan, read, evaluate, then each QA run."""
    stages: list[Stage] = []
    if cfg.build is not None:
        out = Path(cfg.build.output_dir)
        stages.append(Stage("build", cfg.build, out / BUILD_REPORT, (out,), True,
                            lambda p, c=cfg.build: _build(c, p)))
    if cfg.refine is not None:
        out = Path(cfg.refine.output_dir)
        stages.append(Stage("refine", cfg.refine, out / REFINE_REPORT, (out,), True,
                            lambda p, c=cfg.refine: _refine(c, p)))
    if cfg.train is not None:
        out = Path(cfg.train.output_dir)
        run_dir = _local(str(Path(cfg.train.storage_path) / cfg.train.run_name))
        stages.append(Stage("train", cfg.train, out / TRAIN_REPORT, (out, *run_dir), True,
                            lambda p, c=cfg.train: _train(c, p)))
    if cfg.plan is not None:
        out = Path(cfg.plan.output_dir)
        run_dir = _local(str(Path(cfg.plan.storage_path) / cfg.plan.run_name))
        stages.append(Stage("plan", cfg.plan, out / TRAIN_REPORT, (out, *run_dir), True,
                            lambda p, c=cfg.plan: _plan(c, p)))
    if cfg.read is not None:
        out = Path(cfg.read.output_dir)
        run_dir = _local(str(Path(cfg.read.storage_path) / cfg.read.run_name))
        stages.append(Stage("read", cfg.read, out / TRAIN_REPORT, (out, *run_dir), True,
                            lambda p, c=cfg.read: _read(c, p)))
    if cfg.evaluate is not None:
        out = Path(cfg.evaluate.output_dir)
        stages.append(Stage("evaluate", cfg.evaluate, out / RETRIEVAL_JSON, (out,), False,
                            lambda p, c=cfg.evaluate: _evaluate(c, p)))
    for name, qa in cfg.qa.items():
        out = Path(qa.output_dir)
        stages.append(Stage(f"qa/{name}", qa, out / QA_JSON, (out,), False, lambda p, c=qa: _qa(c, p),
                            pool=shared_pool_key(qa)))
    return stages


def remove_outputs(stage: Stage) -> None:
    """Delete the folders a stage owns, refusing any that holds the working directory or home."""
    protected = {Path.cwd().resolve(), Path.home().resolve()}
    for folder in stage.owned:
        target = folder.resolve()
        if any(target == p or target in p.parents for p in protected):
            raise ValueError(
                f"stage {stage.name}: refusing to delete {target}, which holds the working directory or home. "
                "Fix: give the stage its own output folder"
            )
        if target.exists():
            shutil.rmtree(target)
