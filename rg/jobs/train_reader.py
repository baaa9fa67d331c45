"""Training the tuned reader on Ray Train: ``python -m jobs.train`` with ``kind: train_reader``.

The driver reads the train and validation questions without their subgraphs; Ray Data streams
their rows from the input files (one id filter for both sides, :func:`rg.data.streaming.read_side`) to
one pool of actors that score the subgraphs with a trained retriever (the same scorer and evidence
settings as the QA evaluation, which scores in its actors too), build each question's evidence
chains and the training examples (:mod:`rg.training.reader_loop`); both sides are materialised in
the object store before training (for the reasons :mod:`rg.training.graph_stream` gives) and
handed to the workers as Ray Datasets (gold answers go only into the training targets and the
validation metric). ``examples_on: driver`` is the former path, kept as the baseline of
``bench.driver_memory`` and of the equivalence tests: every sample with its subgraph scored on
the driver and handed to the workers through the object store. Each worker loads the base model from
the registry, adds the LoRA adapter, trains its shard of the examples under DDP (gloo on CPU), reads its shard of the validation questions with
the constrained decoder, and the Hits@1 counts are summed across workers; rank 0 checkpoints
the reader (``model/``), the optimizer state, the epoch and the history each epoch in the harness's layout
(:mod:`rg.jobs.harness`). A resubmitted run
(same ``run_name``) resumes after its last checkpoint. The best epoch by validation Hits@1 is
exported to ``<output_dir>/reader`` (``adapter/`` + ``reader.json``), which the QA evaluation
reads with ``reader: {kind: tuned, checkpoint: <output_dir>/reader}`` and the local LLM server
serves with ``adapter: <output_dir>/reader/adapter``.

``train.strategy: deepspeed`` (GPU nodes, the ``deepspeed`` extra) trains through a DeepSpeed
engine over the loss module instead of DDP (:mod:`rg.training.strategy`); checkpoints keep the
adapter but not the ZeRO-partitioned optimizer state.
"""

from __future__ import annotations

import math
import pickle
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import torch
from pydantic import Field, model_validator

from rg.run.paths import resolve_data_path
from rg.data.splits import SplitConfig, load_split_samples
from rg.data.streaming import AUTO_DRIVER_MB, ExamplesOn, batch_samples, examples_on, read_side
from rg.jobs.evaluate import MethodConfig, build_scorer, check_planned_walks
from rg.evaluation.qa import question_evidence
from rg.evidence import EvidenceConfig
from rg.models.precision import dtype_name
from rg.reasoning.dualtower.template import topic_template
from rg.reasoning.hops import FOLDER as HOPS_FOLDER
from rg.reasoning.hops import HopPredictor
from rg.reasoning.tuned_reader import ADAPTER_DIR, SETTINGS_FILE, TunedReader, TunedReaderSettings
from rg.runtime import init_ray
from rg.text import EncoderConfig, TextEncoder
from rg.training.reader_loop import (
    SELECTION_METRIC,
    WEIGHT_DECAY,
    ReaderFitConfig,
    ReaderItem,
    ReaderLora,
    ReaderLoss,
    fit_reader,
    lora_reader_model,
    read_hits,
    reader_examples,
)
from rg.train_progress import posting_progress, step_board
from rg.training.shards import HeldRows, equal_steps, shard_rows
from rg.training.strategy import check_strategy
from rg.jobs.harness import EpochReporter, TrainRunConfig, best_of, distribute, fit_run, numeric, resume, start_run, write_report

if TYPE_CHECKING:
    import pyarrow as pa

READER_DIR = "reader"
"""The exported reader's folder under ``output_dir``."""


class ReaderTrainConfig(TrainRunConfig):
    """``python -m jobs.train`` (kind ``train_reader``): retriever evidence + gold answers → LoRA reader."""

    KIND: ClassVar[str] = "train_reader"

    input: str | list[str] = Field(description="RoG parquet/jsonl(.gz) file(s) or folder(s) of shards; `@shared/...` allowed.")
    split: SplitConfig = Field(default_factory=SplitConfig, description="Train / val membership (as the QA evaluation's).")
    limit: int | None = Field(None, ge=2, description="Only the first N questions of each input (quick runs).")
    max_train_questions: int | None = Field(
        None, ge=1, description="Train on at most this many training questions (the first ones; bounds CPU time)."
    )
    max_val_questions: int | None = Field(
        60, ge=0, description="Validation questions read after each epoch. 0: no validation, and the last epoch is "
        "kept (for one epoch, when a QA run scores the val side anyway)."
    )
    retriever: MethodConfig = Field(description="The triple scorer whose evidence the reader learns to read.")
    top_k: int | None = Field(100, ge=1, description="Retrieved triples per question, as in the QA evaluation.")
    evidence: EvidenceConfig = Field(default_factory=EvidenceConfig, description="Chain length and merging.")
    encoder: EncoderConfig = Field(default_factory=EncoderConfig, description="Text encoder of the retriever.")
    reader: TunedReaderSettings = Field(default_factory=TunedReaderSettings, description="Base, prompt and decoding.")
    lora: ReaderLora = Field(default_factory=ReaderLora, description="The adapter.")
    train: ReaderFitConfig = Field(default_factory=ReaderFitConfig, description="Epochs, optimiser, batching.")
    num_workers: int = Field(1, ge=1, description="Ray Train workers (DDP replicas).")
    cpus_per_worker: float = Field(
        1.0, gt=0, description="CPUs reserved per worker, also its torch threads (Ray pins a worker's threads to "
        "its CPU share): one worker on a 2-core machine trains faster with 2 than two workers with 1 each."
    )
    keep_checkpoints: int = Field(1, ge=1, description="Checkpoints kept (the best by validation Hits@1).")
    examples_on: ExamplesOn = Field(
        "ray_data",
        description="Where evidence and examples are built: 'ray_data' streams the input files through Ray Data "
        "actors (the driver keeps the questions without subgraphs and counts); 'driver' is the former path (every "
        "sample with its subgraph scored on the driver, examples handed to the workers through the object store), kept as the "
        "baseline of bench.driver_memory. Both give the same examples. 'auto': 'driver' for local inputs of at most "
        f"{AUTO_DRIVER_MB:g} MB (no Ray Data pass to start), else 'ray_data'.",
    )

    @model_validator(mode="after")
    def _strategy_can_run(self) -> "ReaderTrainConfig":
        check_planned_walks(self.evidence.walks, self.retriever)
        t = self.train
        check_strategy(t.strategy, t.deepspeed, use_gpu=self.use_gpu, workers=self.num_workers,
                       micro_batch=t.batch_size, lr=t.lr, weight_decay=WEIGHT_DECAY, grad_clip=t.grad_clip)
        return self


def validates(cfg: ReaderTrainConfig) -> bool:
    """Whether the run reads validation questions after each epoch (``max_val_questions`` is not 0)."""
    return cfg.max_val_questions != 0


def _evaluate_shard(reader: TunedReader, items) -> dict[str, float]:
    """Hits@1 / Hit over every worker's validation shard (counts summed with all-reduce)."""
    import torch.distributed as dist

    local = read_hits(reader, items)
    counts = torch.tensor([local.get("hits_at_1", 0.0) * len(items), local.get("hit", 0.0) * len(items),
                           float(len(items))], dtype=torch.float64)
    if dist.is_available() and dist.is_initialized():
        dist.all_reduce(counts)
    n = float(counts[2])
    return {"hits_at_1": float(counts[0]) / n, "hit": float(counts[1]) / n, "questions": n} if n else {}


def reader_loop_per_worker(config: dict[str, Any]) -> None:
    """Ray Train worker: DDP training of the adapter, sharded validation, rank-0 checkpoints."""
    import ray.train
    from peft import PeftModel

    settings = TunedReaderSettings.model_validate(config["reader"])
    fit_cfg = ReaderFitConfig.model_validate(config["train"])
    lora = ReaderLora.model_validate(config["lora"])
    torch.set_num_threads(max(1, int(config["cpus_per_worker"])))
    train = equal_steps(shard_rows(config, "train", "example"))
    val = shard_rows(config, "val", "item") if config["validate"] else []
    torch.manual_seed(fit_cfg.seed)
    model, tokenizer = lora_reader_model(settings, lora)
    dtype = dtype_name(model.get_base_model().dtype)  # what settings.precision means on this worker

    resumed = resume(lambda folder: PeftModel.from_pretrained(model.unload(), str(folder / ADAPTER_DIR),
                                                              is_trainable=True))
    model = resumed.model or model
    if resumed.start_epoch >= fit_cfg.epochs:
        return
    engine, wrapped = distribute(ReaderLoss(model), fit_cfg.strategy, fit_cfg.deepspeed,
                                 micro_batch=fit_cfg.batch_size, lr=fit_cfg.lr, weight_decay=WEIGHT_DECAY,
                                 grad_clip=fit_cfg.grad_clip)
    reporter = EpochReporter(lambda folder, _epoch: save_reader(model, settings, folder), resumed, engine,
                             state={"dtype": dtype})
    fit_reader(model, tokenizer, train, val, settings, fit_cfg, wrapped=wrapped, on_epoch_end=reporter,
               start_epoch=resumed.start_epoch,
               optimizer_state=None if engine is not None else resumed.optimizer_state,
               evaluate=_evaluate_shard, engine=engine,
               progress=posting_progress(config["board"], ray.train.get_context().get_world_rank()))


def save_reader(model, settings: TunedReaderSettings, folder: str | Path) -> Path:
    """Write a tuned reader folder: the adapter (peft) and its settings."""
    folder = Path(folder)
    model.save_pretrained(str(folder / ADAPTER_DIR))
    (folder / SETTINGS_FILE).write_text(settings.model_dump_json(indent=2) + "\n")
    return folder


def fit_depth(cfg: ReaderTrainConfig, folder: Path) -> dict[str, Any] | None:
    """Fit the Hand's depth predictor (:mod:`rg.reasoning.hops`) on the training side's question templates and
    their dataset depths, save it in ``folder``, and score it on the validation side; None (nothing saved)
    when no training question states its depth."""
    sides = load_split_samples(cfg.input, cfg.split, ("train", "val"), cfg.limit, graph=False)
    known = {side: [s for s in samples if s.hops is not None] for side, samples in sides.items()}
    if not known["train"]:
        return None
    encoder = TextEncoder(cfg.encoder)
    predictor = HopPredictor.fit([topic_template(s.question, s.q_entities) for s in known["train"]],
                                 [s.hops for s in known["train"]], encoder)
    predictor.save(folder)
    val = known["val"]
    predicted = predictor.predict([topic_template(s.question, s.q_entities) for s in val], encoder)
    right = sum(p == s.hops for p, s in zip(predicted, val))
    return {"train_questions": len(known["train"]), "val_questions": len(val),
            "val_accuracy": right / len(val) if val else None, "k": predictor.k}


def reader_items(cfg: ReaderTrainConfig, samples, scorer) -> list[ReaderItem]:
    """Evidence of each question from the configured retriever, as the QA evaluation builds it (with
    ``evidence.walks: planned``, the groundings of the planner's decoded paths)."""
    planned = cfg.evidence.walks == "planned"
    items = []
    for sample, scores in zip(samples, scorer.score(samples)):
        paths = scorer.decoded_paths(sample.id) if planned else None
        evidence = question_evidence(sample, scores, cfg.top_k, True, cfg.evidence, paths=paths)
        items.append(ReaderItem(sample.id, sample.question, evidence, tuple(sample.answers)))
    return items


@dataclass(frozen=True)
class _TrainInput:
    """What :func:`train_reader` trains on, from either path of ``examples_on``."""

    train: Any  # ray.data.Dataset or HeldRows: "example" column (pickled Example)
    val: Any  # likewise: "item" column (pickled ReaderItem)
    train_questions: int
    val_questions: int
    train_examples: int
    skipped: int
    prompt_tokens: int


def _require_examples(cfg: ReaderTrainConfig, examples: int, skipped: int) -> None:
    if examples < cfg.num_workers:
        raise ValueError(f"{examples} training example(s) for {cfg.num_workers} workers ({skipped} questions had "
                         "no gold answer among their evidence's chain ends); use more questions or a larger top_k")


def _driver_input(cfg: ReaderTrainConfig, base_folder: Path) -> _TrainInput:
    """The former path (``examples_on: driver``): every sample with its subgraph scored on the driver, the rows
    handed to the workers as :class:`~rg.training.shards.HeldRows`."""
    from transformers import AutoTokenizer

    sides = load_split_samples(cfg.input, cfg.split, ("train", "val"), cfg.limit)
    train_samples = sides["train"][: cfg.max_train_questions]
    val_samples = sides["val"][: cfg.max_val_questions]
    needs_encoder = cfg.retriever.kind in ("retriever", "cosine")
    scorer = build_scorer(cfg.retriever, TextEncoder(cfg.encoder) if needs_encoder else None)
    train_items, val_items = reader_items(cfg, train_samples, scorer), reader_items(cfg, val_samples, scorer)
    tokenizer = AutoTokenizer.from_pretrained(base_folder, local_files_only=True)
    eos = int(tokenizer.convert_tokens_to_ids(tokenizer.eos_token))
    examples, skipped = reader_examples(train_items, tokenizer, cfg.reader, eos, cfg.train.shuffle_lines,
                                        cfg.train.seed)
    _require_examples(cfg, len(examples), skipped)
    return _TrainInput(
        HeldRows.put([{"example": pickle.dumps(e)} for e in examples]),
        HeldRows.put([{"item": pickle.dumps(i)} for i in val_items]),
        len(train_samples), len(val_samples), len(examples), skipped, sum(len(e.input_ids) for e in examples),
    )


def _streamed_input(cfg: ReaderTrainConfig, base_folder: Path) -> _TrainInput:
    """Evidence and examples built by Ray Data actors from the input files; the driver keeps counts.

    One pass of actors maps both sides (each actor loads the retriever, the encoder and the
    tokenizer once), and the materialised rows are split by their ``side`` column.
    """
    from ray.data.expressions import col

    sides = load_split_samples(cfg.input, cfg.split, ("train", "val"), cfg.limit, graph=False)
    train_ids = [s.id for s in sides["train"][: cfg.max_train_questions]]
    val_ids = [s.id for s in sides["val"][: cfg.max_val_questions]]
    del sides
    sources = [cfg.input] if isinstance(cfg.input, str) else list(cfg.input)
    actor_cfg = _absolute_paths(cfg)  # the actors read them: give them the driver's absolute paths
    kwargs = {"cfg": actor_cfg, "base_folder": str(base_folder), "val_ids": frozenset(val_ids)}
    rows = read_side(sources, [*train_ids, *val_ids], _ReaderRows, kwargs).materialize()
    train = rows.filter(expr=col("side") == "train").select_columns(["example", "prompt_tokens"]).materialize()
    val = rows.filter(expr=col("side") == "val").select_columns(["item"]).materialize()
    examples = train.count()
    skipped = len(train_ids) - examples
    _require_examples(cfg, examples, skipped)
    # summed over the blocks: Dataset.sum runs a hash aggregation (5 s on the demo's 104 rows)
    tokens = sum(int(b["prompt_tokens"].sum()) for b in train.select_columns(["prompt_tokens"]).iter_batches(
        batch_size=None, batch_format="numpy"))
    return _TrainInput(train, val, len(train_ids), len(val_ids), examples, skipped, tokens)


def _absolute_paths(cfg: ReaderTrainConfig) -> ReaderTrainConfig:
    retriever = cfg.retriever
    if retriever.path is not None:
        retriever = retriever.model_copy(update={"path": str(resolve_data_path(retriever.path).resolve())})
    encoder = cfg.encoder
    if encoder.cache_dir is not None:
        encoder = encoder.model_copy(update={"cache_dir": str(resolve_data_path(encoder.cache_dir).resolve())})
    return cfg.model_copy(update={"retriever": retriever, "encoder": encoder})


class _ReaderRows:
    """Ray Data actor: a batch of RoG rows scored, turned into evidence, and (training side) tokenised.

    A training question gives one ``example`` row (a pickled :class:`Example`, with its
    ``prompt_tokens``) when a gold answer is among its evidence (as :func:`reader_examples` keeps
    them), else none; a validation question (in ``val_ids``) gives one ``item`` row (a pickled
    :class:`ReaderItem`). The ``side`` column says which.
    """

    def __init__(self, cfg: ReaderTrainConfig, base_folder: str, val_ids: frozenset[str]) -> None:
        from transformers import AutoTokenizer

        self.cfg = cfg
        self.val_ids = val_ids
        needs_encoder = cfg.retriever.kind in ("retriever", "cosine")
        self.scorer = build_scorer(cfg.retriever, TextEncoder(cfg.encoder) if needs_encoder else None)
        self.tokenizer = AutoTokenizer.from_pretrained(base_folder, local_files_only=True)
        self.eos = int(self.tokenizer.convert_tokens_to_ids(self.tokenizer.eos_token))

    def __call__(self, batch: "pa.Table") -> "pa.Table":
        import pyarrow as pa

        items = reader_items(self.cfg, batch_samples(batch), self.scorer)
        val = [i for i in items if i.id in self.val_ids]
        train = self.cfg.train
        examples, _ = reader_examples([i for i in items if i.id not in self.val_ids], self.tokenizer, self.cfg.reader,
                                      self.eos, train.shuffle_lines, train.seed)
        return pa.table({
            "side": pa.array(["train"] * len(examples) + ["val"] * len(val), pa.string()),
            "example": pa.array([pickle.dumps(e) for e in examples] + [b""] * len(val), pa.binary()),
            "prompt_tokens": pa.array([len(e.input_ids) for e in examples] + [0] * len(val), pa.int64()),
            "item": pa.array([b""] * len(examples) + [pickle.dumps(i) for i in val], pa.binary()),
        })


def train_reader(cfg: ReaderTrainConfig, callbacks=(), progress: bool = True) -> dict[str, Any]:
    """Build evidence, train the reader on Ray Train, export the best epoch; returns the report. With
    ``progress`` the driver draws the steps of each epoch (:mod:`rg.train_progress`).

    Raises:
        ValueError: when no training question has a gold answer in its evidence.
        RuntimeError: if the run produced no checkpoint.
    """
    from rg.models.registry import resolve_model

    started = time.perf_counter()
    storage = start_run(cfg)
    base_folder = resolve_model(cfg.reader.base)  # convert once here, not in every worker
    init_ray(cfg.ray)
    where = examples_on(cfg.examples_on, cfg.input)
    data = _driver_input(cfg, base_folder) if where == "driver" else _streamed_input(cfg, base_folder)

    board = step_board(progress)
    loop_config = {"reader": cfg.reader.model_copy(update={"evidence": cfg.evidence}).model_dump(mode="json"),
                   "train": cfg.train.model_dump(mode="json"), "lora": cfg.lora.model_dump(mode="json"),
                   "cpus_per_worker": cfg.cpus_per_worker, "board": board, "validate": validates(cfg)}
    # without validation the latest epoch is the one kept
    metric = SELECTION_METRIC if validates(cfg) else "epoch"
    datasets = {"train": data.train, **({"val": data.val} if validates(cfg) else {})}
    result = fit_run(cfg, reader_loop_per_worker, loop_config, storage=storage, datasets=datasets, split=tuple(datasets),
                     metric=metric, resources_per_worker={"CPU": cfg.cpus_per_worker}, callbacks=callbacks,
                     board=board)
    best = best_of(result, cfg, storage, metric,
                   key=lambda metrics: (metrics[metric], -metrics["train_loss"]))
    target = Path(cfg.output_dir) / READER_DIR
    shutil.rmtree(target, ignore_errors=True)
    best.export(lambda folder: shutil.copytree(folder, target))
    TunedReader.load(target)  # fail here, not at inference, if the export does not read back
    depth = fit_depth(cfg, target / HOPS_FOLDER)
    return write_report(cfg.output_dir, {
        "run_name": cfg.run_name,
        "base": cfg.reader.base,
        "precision": {"setting": cfg.reader.precision, "base_weights": best.state.get("dtype", "fp32")},
        "retriever": cfg.retriever.name or f"{cfg.retriever.kind}:{cfg.retriever.path}",
        "examples_on": where,
        "examples_on_setting": cfg.examples_on,
        "train_questions": data.train_questions,
        "val_questions": data.val_questions,
        "train_examples": data.train_examples,
        "train_questions_without_gold_in_evidence": data.skipped,
        "mean_prompt_tokens": data.prompt_tokens / data.train_examples,
        "num_workers": cfg.num_workers,
        "metric": metric,
        "best_epoch": best.epoch,
        "best_metrics": {k: v for k, v in numeric(best.metrics).items() if math.isfinite(v)},
        "resumed": best.start_epoch > 0,
        "history": best.history,
        "depth_predictor": depth,
        "reader_dir": str(target.resolve()),
        "seconds": time.perf_counter() - started,
    })


def format_reader_report(report: dict[str, Any]) -> str:
    """A short text summary of a :func:`train_reader` report."""
    best = report["best_metrics"]
    return "\n".join([
        f"run {report['run_name']} (tuned reader on {report['base']} in {report['precision']['base_weights']}, "
        f"evidence from {report['retriever']}, "
        f"{report['num_workers']} workers)",
        f"questions: {report['train_questions']} train ({report['train_examples']} with a gold answer in evidence), "
        f"{report['val_questions']} val; mean prompt {report['mean_prompt_tokens']:.0f} tokens",
        f"best epoch {report['best_epoch']}: val Hits@1 {best.get(SELECTION_METRIC, float('nan')):.3f}, "
        f"Hit {best.get('val_hit', float('nan')):.3f}" if report["metric"] == SELECTION_METRIC else
        f"epoch {report['best_epoch']} kept, the last (no validation: max_val_questions is 0)",
        *([] if not report.get("depth_predictor") else [_depth_line(report["depth_predictor"])]),
        f"reader saved to {report['reader_dir']}",
    ])


def _depth_line(depth: dict[str, Any]) -> str:
    accuracy = "no validation question states its depth" if depth["val_accuracy"] is None else \
        f"right on {depth['val_accuracy']:.3f} of {depth['val_questions']} val questions"
    return f"depth predictor ({depth['k']} nearest of {depth['train_questions']} train templates): {accuracy}"
