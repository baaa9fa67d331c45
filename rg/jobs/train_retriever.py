"""Distributed retriever training on Ray Train (V2): ``python -m jobs.train``.

The driver reads the questions **without their subgraphs** (ids, texts, answers), splits them
into train and validation (a split file, or a seeded shuffle of their ids), and has Ray Data build
the rest from the input files (:func:`rg.training.graph_stream.stream_training_graphs`): a scan
pass returns each question's entity and relation names, from which the driver embeds every
string **once** (a :class:`~rg.text.TextEncoder` and its on-disk cache); a graph pass joins the
labels rows per batch (the refine job's, or the weak rows this job's weak-label step writes once,
:mod:`rg.jobs.weak_labels`) and turns each row into a pickled :class:`QuestionGraph`, materialised in the
object store. The driver holds block references, never the subgraphs or the graphs, and hands
both datasets to a :class:`ray.train.torch.TorchTrainer`. Each worker trains its shard of the
training questions (``get_dataset_shard``) under DDP (gloo on CPU) with the shared loop
:func:`rg.training.loop.fit`, after the workers swap a few questions so that their shards hold
about as many triples (:func:`rg.training.shards.balance_shards`: a step waits for the slowest
worker); every worker evaluates the *whole* validation set (it is not split
across workers, and the DDP replicas hold identical weights, so all ranks compute the same
metrics) and reports them each epoch. Rank 0 attaches a checkpoint in the harness's layout
(:mod:`rg.jobs.harness`: weights and model config in ``model/``, the optimizer, the epoch and history). Ray Train keeps the ``keep_checkpoints`` best by the validation recall
that selects epochs (SubgraphRAG, Li et al., 2024: triple recall@100).

Resumption: a run is named by ``run_name`` under ``storage_path``; resubmitting the same config
restores Ray Train's checkpoint manager from storage, the workers load the latest checkpoint and
continue at the next epoch. After training the best checkpoint is exported with
:meth:`Retriever.save` to ``output_dir`` and a ``train_report.json`` is written beside it::

    report = train_retriever(load_config("configs/train_synthetic_mlp.yaml", TrainJobConfig))
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, ClassVar

import torch
from pydantic import Field, model_validator
from torch import nn

from rg.run.paths import require_input
from rg.data.splits import SplitConfig, load_split_samples
from rg.data.streaming import AUTO_DRIVER_MB, ExamplesOn, examples_on
from rg.retrievers.base import CheckpointMeta, Ranked, Retriever
from rg.data.sample import Sample
from rg.retrievers.graphs import EmbeddingTables, GraphBatch
from rg.retrievers.mlp import MLPConfig
from rg.retrievers.pna import PNAConfig
from rg.retrievers.registry import build_retriever, load_retriever
from rg.run.locks import output_lock
from rg.runtime import init_ray
from rg.text.encoder import EncoderConfig, TextEncoder
from rg.training.shards import balance_shards, equal_steps, shard_rows
from rg.retrievers.inputs import TextIndex
from rg.supervision.answer_paths import search_kb
from rg.supervision.labels import LabelConfig
from rg.training.graph_stream import TrainingGraphs, held_training_graphs, iter_graphs, stream_training_graphs
from rg.training.gate_pretrain import GatePretrainConfig, pretrain_walk
from rg.training.loop import TrainConfig, fit
from rg.jobs.weak_labels import labels_path, voted_paths
from rg.jobs.harness import (
    Best,
    EpochReporter,
    TrainRunConfig,
    best_of,
    distribute,
    fit_run,
    numeric,
    resume,
    start_run,
    write_report,
)

MODEL_FILE = "model.pt"
MODEL_CONFIG_FILE = "model_config.json"
"""The weights and the model config in a checkpoint's ``model/`` folder."""

RetrieverChoice = Annotated[MLPConfig | PNAConfig, Field(discriminator="kind")]


class TrainJobConfig(TrainRunConfig):
    """``python -m jobs.train``: RoG samples → labels → distributed retriever training → best retriever."""

    KIND: ClassVar[str] = "train"

    input: str | list[str] = Field(
        description="RoG parquet/jsonl(.gz) file(s) or folder(s) of parquet shards (e.g. the subgraph builder's "
        "output); `@shared/...` allowed."
    )
    split: SplitConfig = Field(
        default_factory=SplitConfig,
        description="Train/val membership: a canonical split file or a seeded split, optionally capped per side.",
    )
    limit: int | None = Field(None, ge=2, description="Only the first N questions of each input (quick runs).")
    retriever: RetrieverChoice = Field(
        default_factory=MLPConfig, description="Retriever config; `kind: mlp` or `kind: pna` picks the model."
    )
    labels: LabelConfig = Field(default_factory=LabelConfig, description="Supervision: refined or weak label rows.")
    encoder: EncoderConfig = Field(
        default_factory=EncoderConfig,
        description="Text encoder of the embedding tables; set cache_dir so reruns skip the encoding.",
    )
    train: TrainConfig = Field(default_factory=TrainConfig, description="Epochs, optimiser, batching, selection.")
    resources_per_worker: dict[str, Annotated[float, Field(ge=0)]] | None = Field(
        None,
        description="Ray resources of each worker, e.g. {CPU: 1, trainer: 1} to place the workers on nodes that "
        "offer a custom resource `trainer`; None: one CPU (one GPU with use_gpu) per worker.",
    )
    walk_pretrain: GatePretrainConfig = Field(
        default_factory=GatePretrainConfig,
        description="Pretrain the gated walk's gates on many training-side questions' relation paths (rg.training.gate_pretrain).",
    )
    examples_on: ExamplesOn = Field(
        "ray_data",
        description="Where the training graphs are built: 'ray_data' streams the input files through Ray Data (the "
        "driver never holds a subgraph); 'driver' reads the questions with their subgraphs here and builds the same "
        "tables and graphs without a Ray Data pass (small inputs). 'auto': 'driver' for local inputs of at most "
        f"{AUTO_DRIVER_MB:g} MB, else 'ray_data'.",
    )

    @model_validator(mode="after")
    def _pretrain_needs_a_walk(self) -> "TrainJobConfig":
        if self.walk_pretrain.questions and not self.retriever.walk_steps:
            raise ValueError(
                "walk_pretrain.questions pretrains the gated walk; set retriever.walk_steps > 0 or walk_pretrain.questions: 0"
            )
        if self.walk_pretrain.questions and self.labels.weak.kb is None:
            raise ValueError(
                "walk_pretrain searches the questions' relation paths on the whole KB (they are read without "
                "subgraphs); set labels.weak.kb, e.g. {path: ..., format: metaqa}"
            )
        return self


class _LossModule(nn.Module):
    """Puts a retriever's training loss behind ``forward`` so DDP can wrap it (gradients sync in backward)."""

    def __init__(self, retriever: Retriever) -> None:
        super().__init__()
        self.retriever = retriever

    def forward(self, batch: GraphBatch, tables: EmbeddingTables) -> torch.Tensor:
        return self.retriever.loss(batch, tables)


class _DistributedRetriever:
    """What :func:`fit` sees: the raw retriever, except that ``loss`` runs through the DDP wrapper.

    ``parameters``/``state_dict``/``train``/``eval`` are the raw module's (no ``module.`` prefix),
    ``retrieve`` is the raw module's (inference needs no gradient sync).
    """

    def __init__(self, retriever: Retriever, wrapped: nn.Module) -> None:
        self.retriever = retriever
        self.wrapped = wrapped

    @property
    def training(self) -> bool:
        return self.retriever.training

    def train(self, mode: bool = True) -> "_DistributedRetriever":
        self.wrapped.train(mode)
        return self

    def eval(self) -> "_DistributedRetriever":
        return self.train(False)

    def parameters(self):
        return self.retriever.parameters()

    def state_dict(self) -> dict[str, torch.Tensor]:
        return self.retriever.state_dict()

    def loss(self, batch: GraphBatch, tables: EmbeddingTables) -> torch.Tensor:
        return self.wrapped(batch, tables)

    def retrieve(self, batch: GraphBatch, tables: EmbeddingTables, k: int) -> list[Ranked]:
        return self.retriever.retrieve(batch, tables, k)


def train_loop_per_worker(config: dict[str, Any]) -> None:
    """Ray Train worker: DDP training of one retriever with per-epoch reports and rank-0 checkpoints.

    ``config`` holds ``tables`` (an ObjectRef of :class:`EmbeddingTables`), ``kind`` and
    ``model_config`` (a dict; PNA's ``deg`` already filled on the driver) and ``train`` (a
    :class:`TrainConfig` dict).
    """
    import ray

    train_cfg = TrainConfig.model_validate(config["train"])
    tables: EmbeddingTables = ray.get(config["tables"])
    train_graphs = equal_steps(shard_rows(config, "train", "graph"))
    # a few questions swapped between the workers so that every shard holds about as many triples
    train_graphs = balance_shards(train_graphs, [g.num_triples for g in train_graphs])
    val_graphs = shard_rows(config, "val", "graph")

    torch.manual_seed(train_cfg.seed)
    retriever = build_retriever(config["kind"], config["model_config"])
    if config.get("walk_state") is not None:
        retriever.walk.load_state_dict(config["walk_state"])  # pretrained gates (a checkpoint overrides them)
        retriever.walk.requires_grad_(not config["freeze_walk"])

    def load(folder: Path) -> None:
        retriever.load_state_dict(torch.load(folder / MODEL_FILE, map_location="cpu"))

    def save(folder: Path, _epoch: int) -> None:
        folder.mkdir(parents=True)
        torch.save(retriever.state_dict(), folder / MODEL_FILE)
        (folder / MODEL_CONFIG_FILE).write_text(retriever.config.model_dump_json(indent=2) + "\n")

    resumed = resume(load)
    if resumed.start_epoch >= train_cfg.epochs:
        return
    _, wrapped = distribute(_LossModule(retriever), find_unused=True)
    model = _DistributedRetriever(retriever, wrapped)
    # ASYNC: a background thread uploads the checkpoint and waits for the controller to take the
    # report (it polls every few seconds), so training goes on; the folder is deleted once uploaded.
    reporter = EpochReporter(save, resumed, row={"train_questions_per_worker": float(len(train_graphs)),
                                                 "train_triples_this_worker": float(sum(g.num_triples for g in train_graphs))},
                             upload_async=True)
    fit(
        model,  # type: ignore[arg-type]  # duck-typed: loss through DDP, everything else the raw module
        train_graphs,
        val_graphs,
        tables,
        train_cfg,
        on_epoch_end=lambda epoch, metrics, _model, optimizer: reporter(epoch, metrics, optimizer),
        start_epoch=resumed.start_epoch,
        optimizer_state=resumed.optimizer_state,
    )


def _pretrained_walk(
    cfg: TrainJobConfig,
    model_config: Any,
    val_samples: Sequence[Sample],
    index: TextIndex,
    tables: EmbeddingTables,
    encoder: TextEncoder,
) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """The walk's weights after :func:`pretrain_walk` on ``cfg.walk_pretrain.questions`` training-side questions.

    The walk starts from the same seeded initialisation the workers use.
    """
    split = cfg.split.model_copy(update={"max_questions": {"train": cfg.walk_pretrain.questions}})
    questions = load_split_samples(cfg.input, split, ("train",), cfg.limit, graph=False)["train"]
    torch.manual_seed(cfg.train.seed)
    walk = build_retriever(cfg.retriever.kind, model_config).walk
    relations = torch.as_tensor(tables.relations, dtype=torch.float32)
    paths = voted_paths([*questions, *val_samples], cfg.labels.weak, {s.id for s in questions}, search_kb(cfg.labels.weak))
    report = pretrain_walk(walk, questions, val_samples, index.relations, relations, encoder, paths, cfg.walk_pretrain)
    print(
        f"gate pretraining: {report['with_paths']} of {report['questions']} questions with paths, "
        f"{report['steps']} steps, all steps right on {report['train_step_accuracy']:.3f} of them and on "
        f"{report['val_step_accuracy']:.3f} of {report['val_questions_with_paths']} validation questions "
        f"({report['seconds']:.0f} s)",
        flush=True,
    )
    return {k: v.detach().clone() for k, v in walk.state_dict().items()}, report


def train_retriever(cfg: TrainJobConfig, callbacks: Sequence[Any] = ()) -> dict[str, Any]:
    """Train ``cfg.retriever`` on Ray Train, export the best checkpoint and return the report.

    Args:
        cfg: The validated job config.
        callbacks: Ray Train callbacks, e.g. Tune's ``TuneReportCallback`` when a sweep trial drives the run.

    Returns:
        The report also written to ``<output_dir>/train_report.json``: split sizes, the
        selection metric and the best epoch's metrics, the history of every epoch (including
        those of an earlier, resumed submission), ``resumed`` and ``start_epoch``, and the
        export folder.

    Raises:
        OutputLockedError: another job writes into ``output_dir``.
        ValueError: if no training question is usable (no labels / positives).
        RuntimeError: if the run produced no checkpoint.
    """
    with output_lock(cfg.output_dir, "jobs.train"):
        return _train_locked(cfg, callbacks)


def _train_locked(cfg: TrainJobConfig, callbacks: Sequence[Any]) -> dict[str, Any]:
    import ray

    started = time.perf_counter()
    for path in [cfg.input] if isinstance(cfg.input, str) else cfg.input:
        require_input(path)  # before Ray starts and before the run's settings are recorded
    storage_path = start_run(cfg)
    init_ray(cfg.ray)
    train_samples, val_samples, graphs, encoder = _training_graphs(cfg)
    tables, index = graphs.tables, graphs.index
    train_graphs = iter_graphs(graphs.train)  # read one block at a time, only by a model that needs statistics (PNA)
    model_config = build_retriever(cfg.retriever.kind, cfg.retriever, train_graphs=train_graphs).config
    walk_state, pretrain_report = None, None
    if cfg.walk_pretrain.questions:
        walk_state, pretrain_report = _pretrained_walk(cfg, model_config, val_samples, index, tables, encoder)
    metric = cfg.train.selection_metric
    loop_config = {
        "tables": ray.put(tables),
        "kind": cfg.retriever.kind,
        "model_config": model_config.model_dump(mode="json"),
        "train": cfg.train.model_dump(mode="json"),
        "walk_state": walk_state,
        "freeze_walk": cfg.walk_pretrain.freeze,
    }
    result = fit_run(cfg, train_loop_per_worker, loop_config, storage=storage_path,
                     datasets={"train": graphs.train, "val": graphs.val}, metric=metric,
                     resources_per_worker=cfg.resources_per_worker, callbacks=callbacks)
    best = best_of(result, cfg, storage_path, metric)

    retriever_dir = _export(cfg, best, index.encoder_model_id, metric)

    return write_report(
        cfg.output_dir,
        {
            "run_name": cfg.run_name,
            "storage_path": storage_path,
            "kind": cfg.retriever.kind,
            "label_source": cfg.labels.source,
            "examples_on": examples_on(cfg.examples_on, cfg.input),
            "examples_on_setting": cfg.examples_on,
            "encoder_model_id": index.encoder_model_id,
            "questions": len(train_samples) + len(val_samples),
            "train_questions": len(train_samples),
            "train_usable": graphs.train_usable,
            "val_questions": len(val_samples),
            "num_workers": cfg.num_workers,
            "metric": metric,
            "best_epoch": best.epoch,
            "best_value": float(best.metrics[metric]),
            "best_metrics": numeric(best.metrics),
            "resumed": best.start_epoch > 0,
            "start_epoch": best.start_epoch,
            "epochs_run": best.epochs_run,
            "history": best.history,
            "retriever_dir": str(Path(retriever_dir).resolve()),
            "walk_pretrain": pretrain_report,
            "seconds": time.perf_counter() - started,
        },
    )


def _training_graphs(cfg: TrainJobConfig) -> tuple[list[Sample], list[Sample], TrainingGraphs, TextEncoder]:
    """The training and validation questions and their graphs, with the encoder that embedded their strings:
    built by Ray Data from the files, the questions read without subgraphs (:mod:`rg.training.graph_stream`), or
    with ``examples_on`` resolving to ``driver``, built here from the questions with their subgraphs.

    Raises:
        ValueError: a side is empty, or fewer usable training questions than workers.
    """
    held = examples_on(cfg.examples_on, cfg.input) == "driver"
    sides = load_split_samples(cfg.input, cfg.split, ("train", "val"), cfg.limit, graph=held)
    train_samples, val_samples = sides["train"], sides["val"]
    if not train_samples or not val_samples:
        raise ValueError(
            f"the split gives {len(train_samples)} training and {len(val_samples)} validation questions from "
            f"{cfg.input}; both need at least one (check `input` and `split`)"
        )
    encoder = TextEncoder(cfg.encoder)
    sides = {"train": [s.id for s in train_samples], "val": [s.id for s in val_samples]}
    held_samples = [*train_samples, *val_samples] if held else None
    labels = labels_path(cfg.labels, cfg.input, sides, cfg.output_dir, samples=held_samples)
    if held:
        graphs = held_training_graphs(train_samples, val_samples, labels, encoder, cfg.train.skip_unlabelled)
    else:
        graphs = stream_training_graphs(cfg.input, train_samples, val_samples, labels, encoder,
                                        cfg.train.skip_unlabelled)
    if graphs.train_usable < cfg.num_workers:
        raise ValueError(
            f"only {graphs.train_usable} usable training question(s) for {cfg.num_workers} workers; "
            "use more questions (limit), fewer num_workers, or labels with positives"
        )
    return train_samples, val_samples, graphs, encoder


def _export(cfg: TrainJobConfig, best: Best, encoder_model_id: str, metric: str) -> Path:
    """Save the best epoch's retriever to ``<output_dir>/retriever`` and read it back (a bad export fails here,
    not at inference)."""

    def read(folder: Path) -> Retriever:
        exported = build_retriever(cfg.retriever.kind, json.loads((folder / MODEL_CONFIG_FILE).read_text()))
        exported.load_state_dict(torch.load(folder / MODEL_FILE, map_location="cpu"))
        return exported

    meta = CheckpointMeta(
        label_source=cfg.labels.source,
        encoder_model_id=encoder_model_id,
        extra={"run_name": cfg.run_name, "epoch": best.epoch, "metric": metric, "value": best.metrics[metric]},
    )
    retriever_dir = best.export(read).save(Path(cfg.output_dir) / "retriever", meta)
    load_retriever(retriever_dir)
    return retriever_dir


def format_report(report: dict[str, Any]) -> str:
    """A short text summary of a :func:`train_retriever` report."""
    best = report["best_metrics"]
    ks = sorted({int(k.split("@")[1]) for k in best if k.startswith("val_triple_recall@")})
    rows = [
        f"run {report['run_name']} ({report['kind']}, {report['label_source']} labels, {report['num_workers']} workers)",
        f"questions: {report['train_questions']} train ({report['train_usable']} usable), {report['val_questions']} val",
        f"epochs run: {report['epochs_run']}" + (f" (resumed at epoch {report['start_epoch']})" if report["resumed"] else ""),
        f"best epoch {report['best_epoch']} by {report['metric']} = {report['best_value']:.4f}",
        f"{'K':>6}  {'triple recall':>13}  {'answer recall':>13}",
    ]
    for k in ks:
        triple = best.get(f"val_triple_recall@{k}")
        answer = best.get(f"val_answer_recall@{k}")
        rows.append(
            f"{k:>6}  {'-' if triple is None else f'{triple:.4f}':>13}  {'-' if answer is None else f'{answer:.4f}':>13}"
        )
    rows.append(f"retriever saved to {report['retriever_dir']}")
    return "\n".join(rows)
