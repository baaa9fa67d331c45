"""Distributed planner training on Ray Train (V2): ``python -m jobs.train`` with ``kind: train_planner``.

The driver reads the train and validation questions without their subgraphs
(:class:`~rg.data.splits.SplitConfig`); Ray Data derives their target relation paths from the
labels rows (refined, else the weak rows the weak-label step writes once, :mod:`rg.jobs.weak_labels`;
:mod:`rg.training.planner_data`) and the driver
keeps what is global (relation names, the training questions' prompts, counts, the template
vote; :mod:`rg.training.planner_stream`). The driver builds the planner once — tokenizer trained
on the training questions, base model, untrained LoRA adapter — and ships it to the workers as
the bytes of a checkpoint folder; Ray Data tokenises the examples into the object store, and the
trainer hands them to the workers as Ray Datasets. (``examples_on: driver`` is the former path,
kept as the baseline of ``bench.driver_memory`` and of the equivalence tests: every sample with
its subgraph on the driver, examples built there and handed to the workers through the object store.)
Each worker trains its shard of the training examples under DDP (gloo on CPU) with the shared loop
:func:`rg.training.planner_loop.fit_planner`, evaluates the whole validation set and reports
each epoch; rank 0 attaches a checkpoint in the harness's layout (:mod:`rg.jobs.harness`): the planner
in ``model/`` (adapter via peft ``save_pretrained``, tokenizer, model config, prompt template id; a tiny
model's base weights), the optimizer state, and the epoch and history in ``state.json``.

Resumption follows :mod:`rg.jobs.train_retriever`: the run is ``run_name`` under
``storage_path``; resubmitting restores the run and the workers continue after the latest
checkpoint. Afterwards the best checkpoint (validation path exact match, then loss) is exported
to ``<output_dir>/planner`` and, if ``evaluation.side`` is set, scored with constrained and
unconstrained beam search, by Ray Data actors that read the side's subgraphs
(:mod:`rg.jobs.planner_eval`; on the driver with ``examples_on: driver``); the
report goes to ``<output_dir>/train_report.json``::

    report = train_planner(load_config("configs/train_planner_synthetic.yaml", PlannerTrainConfig))

``train.strategy: deepspeed`` (GPU nodes, the ``deepspeed`` extra) replaces the DDP wrapping
with a DeepSpeed engine built from ``train.deepspeed.config`` (``configs/deepspeed_zero2.json``:
ZeRO stage 2) with its "auto" entries filled from the typed config
(:mod:`rg.training.strategy`); checkpoints still hold the adapter (of ``engine.module``), but
not the optimizer state, which ZeRO partitions across ranks, so a resumed DeepSpeed run restarts
the optimizer's moments.
"""

from __future__ import annotations

import functools
import io
import math
import pickle
import tarfile
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import torch
from pydantic import Field, model_validator

from rg.config import Config
from rg.data.paraphrase import ParaphraseConfig
from rg.data.sample import Sample
from rg.data.streaming import AUTO_DRIVER_MB, ExamplesOn, examples_on
from rg.data.splits import SplitConfig, load_split_samples
from rg.retrievers.base import CheckpointMeta
from rg.retrievers.inputs import require_labels
from rg.retrievers.planner.config import PlannerConfig
from rg.retrievers.planner.model import PlannerModel, load_planner, name_wording, prompt_question
from rg.reasoning.dualtower.prompts import protocol_words
from rg.runtime import init_ray
from rg.supervision.answer_paths import search_kb
from rg.data.labels import Labels, labels_by_id
from rg.evaluation.references import reference_paths
from rg.supervision.labels import LabelConfig
from rg.train_progress import posting_progress, step_board
from rg.training.shards import HeldRows, equal_steps, shard_rows
from rg.training.planner_data import (
    PlanTarget,
    TargetStats,
    TemplateConsensus,
    candidate_targets,
    select_targets,
    target_rows,
    with_paraphrases,
)
from rg.training.planner_loop import SELECTION_METRIC, PlannerFitConfig, fit_planner
from rg.training.planner_stream import scan_targets, stream_planner_examples
from rg.training.planner_view import load_view, view_name, view_references, view_relations, view_sample, view_target
from rg.training.strategy import check_strategy
from rg.jobs.weak_labels import labels_path, planner_labels
from rg.jobs.harness import (
    EpochReporter,
    TrainRunConfig,
    best_of,
    distribute,
    finite_or_lowest,
    fit_run,
    numeric,
    resume,
    start_run,
    write_report,
)
from rg.jobs.planner_eval import PlannerEvalConfig, score_planner, stream_planner_scores

PLANNER_DIR = "planner"
"""The exported planner's folder under ``output_dir``."""


class PlannerParaphrases(Config):
    """Other wordings of the training questions (:func:`rg.training.planner_data.with_paraphrases`)."""

    bank: ParaphraseConfig = Field(default_factory=ParaphraseConfig, description="Where the template families come "
                                   "from: the synthetic KG's (default) or MetaQA's question files.")
    per_question: int = Field(2, ge=1, le=10, description="Other wordings added per training question (at most what "
                                                           "its family holds).")


class PlannerTrainConfig(TrainRunConfig):
    """``python -m jobs.train`` (kind ``train_planner``): questions → path targets → LoRA planner."""

    KIND: ClassVar[str] = "train_planner"

    input: str | list[str] = Field(
        description="RoG parquet/jsonl(.gz) file(s) or folder(s) of shards; `@shared/...` allowed."
    )
    split: SplitConfig = Field(default_factory=SplitConfig, description="Train / val (/ test) membership.")
    limit: int | None = Field(None, ge=2, description="Only the first N questions of each input (quick runs).")
    planner: PlannerConfig = Field(default_factory=PlannerConfig, description="Base model, tokenizer, LoRA.")
    labels: LabelConfig = Field(
        default_factory=LabelConfig,
        description="'weak': weak relation paths, computed once into <output_dir>/weak_labels; 'refined': the paths "
        "of the refine job's rows (a row that fell back carries its weak paths).",
    )
    max_paths_per_question: int | None = Field(
        4, ge=1, description="Target paths kept per question (weak ones: those reaching most answers first)."
    )
    target_consensus: bool = Field(
        False,
        description="Of a question's tied target paths, keep those most often chosen by the training questions "
        "worded alike (topic entities blanked out); see rg.training.planner_data.TemplateConsensus.",
    )
    paraphrases: PlannerParaphrases | None = Field(
        None,
        description="Also train on other wordings of each training question: its template family's other wordings "
        "with its own topic entities and target paths (rg.data.paraphrase; validation questions keep their own). "
        "None: the questions as written only.",
    )
    train: PlannerFitConfig = Field(default_factory=PlannerFitConfig, description="Epochs, optimiser, batching.")
    evaluation: PlannerEvalConfig = Field(default_factory=PlannerEvalConfig, description="Scoring after training.")
    view_schema_dir: str | None = Field(
        None,
        description="Train the dual tower's local Brain for privacy mode: the folder of the KG's privacy schema "
        "(privacy_schema.json, written by `python -m jobs.privacy_report`). Target paths, the relation vocabulary "
        "and the evaluation's grounding then use the schema's relation clusters, the labels the Brain sees in "
        "privacy mode (rg.training.planner_view). None trains on raw relations.",
    )
    examples_on: ExamplesOn = Field(
        "ray_data",
        description="Where the targets and examples are built: 'ray_data' streams the input files through Ray Data "
        "and keeps only vocabulary, prompts and counts on the driver; 'driver' is the former path (every sample with "
        "its subgraph read on the driver, examples handed to the workers through the object store), kept as the baseline of "
        "bench.driver_memory. Both give the same examples. 'auto': 'driver' for local inputs of at most "
        f"{AUTO_DRIVER_MB:g} MB (no Ray Data pass to start), else 'ray_data'.",
    )

    @model_validator(mode="after")
    def _strategy_can_run(self) -> "PlannerTrainConfig":
        t = self.train
        check_strategy(t.strategy, t.deepspeed, use_gpu=self.use_gpu, workers=self.num_workers,
                       micro_batch=t.batch_size, lr=t.lr, weight_decay=t.weight_decay, grad_clip=t.grad_clip)
        return self


def pack_folder(folder: str | Path) -> bytes:
    """A folder as the bytes of an uncompressed tar (to ship a small checkpoint through the object store)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        tar.add(str(folder), arcname=".")
    return buffer.getvalue()


def unpack_folder(data: bytes, folder: str | Path) -> Path:
    """Inverse of :func:`pack_folder`."""
    with tarfile.open(fileobj=io.BytesIO(data), mode="r") as tar:
        tar.extractall(str(folder), filter="data")
    return Path(folder)


def planner_loop_per_worker(config: dict[str, Any]) -> None:
    """Ray Train worker: DDP training of the planner's adapter, per-epoch reports, rank-0 checkpoints.

    ``config`` holds ``initial`` (an ObjectRef of the packed initial planner folder), ``train``
    (a :class:`PlannerFitConfig` dict), ``meta`` (a :class:`CheckpointMeta` dict) and ``board`` (the
    :class:`rg.train_progress.StepBoard` rank 0 posts its steps to).
    """
    import ray
    import ray.train

    fit_cfg = PlannerFitConfig.model_validate(config["train"])
    meta = CheckpointMeta.model_validate(config["meta"])
    train = equal_steps(shard_rows(config, "train", "example"))
    val = shard_rows(config, "val", "example")

    resumed = resume(lambda folder: PlannerModel.load(folder, trainable=True))
    planner = resumed.model
    if planner is None:
        with tempfile.TemporaryDirectory() as tmp:
            planner = PlannerModel.load(unpack_folder(ray.get(config["initial"]), tmp), trainable=True)
    if resumed.start_epoch >= fit_cfg.epochs:
        return
    engine, wrapped = distribute(planner, fit_cfg.strategy, fit_cfg.deepspeed, micro_batch=fit_cfg.batch_size,
                                 lr=fit_cfg.lr, weight_decay=fit_cfg.weight_decay, grad_clip=fit_cfg.grad_clip)

    def save(folder: Path, epoch: int) -> None:
        planner.save(folder, meta.model_copy(update={"extra": {**meta.extra, "epoch": epoch}}))

    fit_planner(planner, train, val, fit_cfg, model=wrapped, on_epoch_end=EpochReporter(save, resumed, engine),
                start_epoch=resumed.start_epoch,
                optimizer_state=None if engine is not None else resumed.optimizer_state, engine=engine,
                progress=posting_progress(config["board"], ray.train.get_context().get_world_rank()))


def _labels_path(cfg: PlannerTrainConfig, train: Sequence[Sample], val: Sequence[Sample], held: bool) -> str:
    """The labels the planner trains on: the refined rows, or the weak rows written once (:mod:`rg.jobs.weak_labels`),
    computed in this process when the samples hold their subgraphs (``held``), else by a Ray Data pass."""
    sides = {"train": [s.id for s in train], "val": [s.id for s in val]}
    return labels_path(planner_labels(cfg.labels, cfg.planner.max_path_len), cfg.input, sides, cfg.output_dir,
                       samples=[*train, *val] if held else None)


def _relations(samples: Sequence[Sample]) -> set[str]:
    return {r for s in samples for _, r, _ in s.triples}


def _selection_key(metrics: dict[str, Any]) -> tuple[float, float]:
    """Validation path exact match, then the lower validation loss (NaN lowest)."""
    return (finite_or_lowest(metrics.get(SELECTION_METRIC, math.nan)),
            finite_or_lowest(-float(metrics.get("val_loss", math.nan))))


@dataclass(frozen=True)
class _TrainInput:
    """What :func:`train_planner` trains on, from either path of ``examples_on``."""

    planner: PlannerModel
    train: Any  # ray.data.Dataset or HeldRows of pickled examples ("example" column)
    val: Any
    train_questions: int
    val_questions: int
    train_examples: int
    val_examples: int
    train_stats: TargetStats
    val_stats: TargetStats
    evaluation: tuple[list[Sample], dict[str, Labels] | None] | None
    """The evaluation side's samples and labels when the driver holds them already, else None."""


def paraphraser(cfg: PlannerTrainConfig) -> Callable[[Sequence[PlanTarget]], list[PlanTarget]] | None:
    """What adds the other wordings of ``cfg.paraphrases`` to training targets (picklable), or None."""
    if cfg.paraphrases is None:
        return None
    bank = cfg.paraphrases.bank
    return functools.partial(with_paraphrases, bank=bank.build(), per_question=cfg.paraphrases.per_question,
                             seed=bank.seed)


def with_protocol(planner: PlannerConfig) -> PlannerConfig:
    """``planner`` with the Brain protocol's words recorded in ``mask_names`` (they are public in the session's
    masking, :func:`rg.reasoning.dualtower.prompts.protocol_words`); unchanged without ``mask_names`` or when
    the config already records some."""
    if planner.mask_names is None or planner.mask_names.protocol:
        return planner
    mask = planner.mask_names.model_copy(update={"protocol": tuple(sorted(protocol_words()))})
    return planner.model_copy(update={"mask_names": mask})


def _require_targets(train_targets: int, val_targets: int) -> None:
    if not train_targets or not val_targets:
        raise ValueError(
            f"{train_targets} training and {val_targets} validation questions have a target path; "
            "both need some: check `input`, `split` and `labels`"
        )


def _require_examples(cfg: PlannerTrainConfig, train_examples: int) -> None:
    if train_examples < cfg.num_workers:
        raise ValueError(f"{train_examples} training example(s) for {cfg.num_workers} workers; use more questions")


def _streamed_input(cfg: PlannerTrainConfig) -> _TrainInput:
    """Targets and examples built by Ray Data from the input files (:mod:`rg.training.planner_stream`)."""
    sides = load_split_samples(cfg.input, cfg.split, ("train", "val"), cfg.limit, graph=False)
    train, val = sides["train"], sides["val"]
    del sides
    labels = _labels_path(cfg, train, val, held=False)
    augment = paraphraser(cfg)
    planner_cfg = with_protocol(cfg.planner)
    wording = name_wording(planner_cfg)
    scan = scan_targets(cfg.input, train, val, labels, cfg.planner.max_path_len, cfg.target_consensus,
                        lambda question, topics: prompt_question(planner_cfg, question, topics, wording),
                        cfg.view_schema_dir, augment)
    _require_targets(scan.train_stats.questions_with_target, scan.val_stats.questions_with_target)
    torch.manual_seed(cfg.train.seed)
    planner = PlannerModel.build(planner_cfg, scan.questions, scan.relations, wording)
    examples = stream_planner_examples(scan, train, val, planner.encoder, cfg.max_paths_per_question, augment)
    _require_examples(cfg, examples.train_examples)
    return _TrainInput(planner, examples.train, examples.val, len(train), len(val), examples.train_examples,
                       examples.val_examples, scan.train_stats, scan.val_stats, None)


def _driver_input(cfg: PlannerTrainConfig) -> _TrainInput:
    """The former path (``examples_on: driver``): every sample with its subgraph on the driver, the examples
    handed to the workers as :class:`~rg.training.shards.HeldRows`."""
    sides = ("train", "val") + (("test",) if cfg.evaluation.side == "test" else ())
    by_side = load_split_samples(cfg.input, cfg.split, sides, cfg.limit)
    train_samples, val_samples = by_side["train"], by_side["val"]
    labels = labels_by_id(_labels_path(cfg, train_samples, val_samples, held=True), {s.id for s in train_samples + val_samples})
    require_labels([s.id for s in train_samples + val_samples], labels)
    max_len = cfg.planner.max_path_len
    view = load_view(cfg.view_schema_dir)
    train_targets, train_stats = candidate_targets(train_samples, labels, max_len)
    val_targets, val_stats = candidate_targets(val_samples, labels, max_len)
    train_targets = [view_target(t, view) for t in train_targets]
    val_targets = [view_target(t, view) for t in val_targets]
    # the vote counts training questions only; validation targets are voted by the same counts
    consensus = TemplateConsensus.fit(train_targets) if cfg.target_consensus else None
    train_targets = select_targets(train_targets, train_stats, cfg.max_paths_per_question, consensus)
    val_targets = select_targets(val_targets, val_stats, cfg.max_paths_per_question, consensus)
    _require_targets(len(train_targets), len(val_targets))
    augment = paraphraser(cfg)
    train_targets = augment(train_targets) if augment is not None else train_targets

    torch.manual_seed(cfg.train.seed)
    planner_cfg = with_protocol(cfg.planner)
    wording = name_wording(planner_cfg)
    questions = [prompt_question(planner_cfg, t.question, t.topics, wording) for t in train_targets]
    planner = PlannerModel.build(planner_cfg, questions, view_relations(_relations(train_samples + val_samples), view),
                                 wording)
    train_examples = planner.examples(target_rows(train_targets, planner.prompt_question))
    val_examples = planner.examples(target_rows(val_targets, planner.prompt_question))
    _require_examples(cfg, len(train_examples))
    evaluation = None if cfg.evaluation.side is None else (by_side[cfg.evaluation.side], labels)
    return _TrainInput(
        planner,
        # the shards of one block per side, the stream's layout for an input one task reads (the demo's)
        HeldRows.put([{"example": pickle.dumps(e)} for e in train_examples]),
        HeldRows.put([{"example": pickle.dumps(e)} for e in val_examples]),
        len(train_samples), len(val_samples), len(train_examples), len(val_examples), train_stats, val_stats,
        evaluation,
    )


def train_planner(cfg: PlannerTrainConfig, callbacks: Sequence[Any] = (), progress: bool = True) -> dict[str, Any]:
    """Train ``cfg.planner`` on Ray Train, export the best checkpoint, score it and return the report.

    Args:
        cfg: The validated job config.
        callbacks: Ray Train callbacks, e.g. Tune's ``TuneReportCallback`` when a sweep trial drives the run.
        progress: Draw the steps of each epoch on the driver (:mod:`rg.train_progress`).

    Returns:
        The report also written to ``<output_dir>/train_report.json``: split sizes and target
        counts, the best epoch and its metrics, the history (including a resumed run's earlier
        epochs), ``resumed``/``start_epoch``, the export folder and the evaluation scores.

    Raises:
        ValueError: if there are no training or validation examples.
        RuntimeError: if the run produced no checkpoint.
    """
    import ray

    started = time.perf_counter()
    storage = start_run(cfg)
    init_ray(cfg.ray)
    where = examples_on(cfg.examples_on, cfg.input)
    data = _driver_input(cfg) if where == "driver" else _streamed_input(cfg)
    planner, train_stats, val_stats = data.planner, data.train_stats, data.val_stats
    view = view_name(load_view(cfg.view_schema_dir))
    meta = CheckpointMeta(
        label_source=cfg.labels.source,
        extra={"run_name": cfg.run_name, "targets": train_stats.to_dict(), "relation_view": view},
    )
    with tempfile.TemporaryDirectory() as tmp:
        initial = ray.put(pack_folder(planner.save(tmp, meta)))

    board = step_board(progress)
    result = fit_run(cfg, planner_loop_per_worker, {"initial": initial, "train": cfg.train.model_dump(mode="json"),
                                                    "meta": meta.model_dump(mode="json"), "board": board},
                     storage=storage, datasets={"train": data.train, "val": data.val}, metric=SELECTION_METRIC,
                     callbacks=callbacks, board=board)
    best = best_of(result, cfg, storage, SELECTION_METRIC, key=_selection_key)
    exported = best.export(lambda folder: PlannerModel.load(folder, merge=False))
    planner_dir = exported.save(Path(cfg.output_dir) / PLANNER_DIR, meta.model_copy(update={"extra": {
        **meta.extra, "epoch": best.epoch, "metric": SELECTION_METRIC, "value": best.metrics[SELECTION_METRIC]}}))
    exported = load_planner(planner_dir)  # fail here, not at inference, if the export does not read back

    evaluation = _evaluate(cfg, data, exported, planner_dir)
    return write_report(cfg.output_dir, {
        "run_name": cfg.run_name,
        "storage_path": storage,
        "label_source": cfg.labels.source,
        "weak_rule": cfg.labels.weak.rule,
        "weak_search": "subgraph" if cfg.labels.weak.kb is None else cfg.labels.weak.kb.path,
        "examples_on": where,
        "examples_on_setting": cfg.examples_on,
        "relation_view": view,
        "view_schema_dir": cfg.view_schema_dir,
        "train_questions": data.train_questions,
        "val_questions": data.val_questions,
        "train_targets": train_stats.to_dict(),
        "val_targets": val_stats.to_dict(),
        "train_examples": data.train_examples,
        "val_examples": data.val_examples,
        "vocab_size": len(exported.tokenizer),
        "relation_tokens": len(exported.vocab.label_to_id),
        "adapter_parameters": exported.adapter_parameters,
        "num_workers": cfg.num_workers,
        "metric": SELECTION_METRIC,
        "best_epoch": best.epoch,
        "best_metrics": numeric(best.metrics),
        "resumed": best.start_epoch > 0,
        "start_epoch": best.start_epoch,
        "epochs_run": best.epochs_run,
        "history": best.history,
        "planner_dir": str(Path(planner_dir).resolve()),
        "evaluation": evaluation,
        "seconds": time.perf_counter() - started,
    })


def _evaluate(
    cfg: PlannerTrainConfig, data: _TrainInput, exported: PlannerModel, planner_dir: str | Path
) -> dict[str, Any] | None:
    """The exported planner's scores on ``cfg.evaluation.side``: on the driver when it holds that side's
    questions (``examples_on: driver``), else streamed through Ray Data; None without an evaluation side."""
    side = cfg.evaluation.side
    if side is None:
        return None
    if data.evaluation is not None:  # examples_on: driver holds the side
        samples, labels = data.evaluation
        kb = search_kb(cfg.labels.weak)
        schema = load_view(cfg.view_schema_dir)
        references = view_references(reference_paths(samples, labels, cfg.labels.weak, cfg.planner.max_path_len, kb),
                                     schema)
        samples = [view_sample(s, schema) for s in samples]
        return {**score_planner(exported, samples, references, cfg.evaluation), "scored_on": "driver"}
    questions = load_split_samples(cfg.input, cfg.split, (side,), cfg.limit, graph=False)[side]
    # as on the driver path, labels rows speak for training and validation questions only
    labels_for_side = cfg.labels if side == "val" else None
    return stream_planner_scores(cfg.input, questions, planner_dir, labels_for_side,
                                 cfg.planner.max_path_len, cfg.evaluation, cfg.view_schema_dir)


def format_planner_report(report: dict[str, Any]) -> str:
    """A short text summary of a :func:`train_planner` report."""
    best = report["best_metrics"]
    lines = [
        f"run {report['run_name']} (planner, {report['label_source']} labels, {report['num_workers']} workers)",
        f"questions: {report['train_questions']} train, {report['val_questions']} val; "
        f"examples: {report['train_examples']} train, {report['val_examples']} val",
        f"epochs run: {report['epochs_run']}" + (f" (resumed at epoch {report['start_epoch']})" if report["resumed"] else ""),
        f"best epoch {report['best_epoch']}: val path exact match {best.get(SELECTION_METRIC, float('nan')):.4f}, "
        f"val loss {best.get('val_loss', float('nan')):.4f}",
    ]
    evaluation = report.get("evaluation")
    if evaluation:
        lines.append(f"{evaluation['side']} ({evaluation['questions']} questions):")
        lines.append(f"{'group':>6} {'mode':>13} {'k':>3} {'path EM':>8} {'ans recall':>10} {'groundable':>10} {'q/s':>8}")
        for r in evaluation["scores"]:
            lines.append(
                f"{r['group']:>6} {r['mode']:>13} {r['beam_width']:>3} {_fmt(r['path_exact_match']):>8} "
                f"{_fmt(r['answer_recall']):>10} {_fmt(r['groundable_fraction']):>10} {_fmt(r['questions_per_s'], 1):>8}"
            )
    lines.append(f"planner saved to {report['planner_dir']}")
    return "\n".join(lines)


def _fmt(value: float | None, digits: int = 4) -> str:
    return "-" if value is None else f"{value:.{digits}f}"
