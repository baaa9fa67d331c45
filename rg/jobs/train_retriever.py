"""Distributed retriever training on Ray Train (V2): ``python -m jobs.train``.

The driver reads the questions **without their subgraphs** (ids, texts, answers), splits them
into train and validation (a split file, or a seeded shuffle of their ids), and has Ray Data build
the rest from the input files (:func:`rg.training.graph_stream.stream_training_graphs`): a scan
pass returns each question's entity and relation names, from which the driver embeds every
string **once** (a :class:`~rg.text.TextEncoder` and its on-disk cache); a graph pass joins the
labels per batch and turns each row into a pickled :class:`QuestionGraph`, materialised in the
object store. The driver holds block references, never the subgraphs or the graphs, and hands
both datasets to a :class:`ray.train.torch.TorchTrainer`. Each worker trains its shard of the
training questions (``get_dataset_shard``) under DDP (gloo on CPU) with the shared loop
:func:`rg.training.loop.fit`, after the workers swap a few questions so that their shards hold
about as many triples (:func:`rg.training.shards.balance_shards`: a step waits for the slowest
worker); every worker evaluates the *whole* validation set (it is not split
across workers, and the DDP replicas hold identical weights, so all ranks compute the same
metrics) and reports them each epoch. Rank 0 attaches a checkpoint (weights, optimizer, epoch,
model config, history). Ray Train keeps the ``keep_checkpoints`` best by the validation recall
that selects epochs (SubgraphRAG, Li et al., 2024: triple recall@100).

Resumption: a run is named by ``run_name`` under ``storage_path``; resubmitting the same config
restores Ray Train's checkpoint manager from storage, the workers load the latest checkpoint and
continue at the next epoch. After training the best checkpoint is exported with
:meth:`Retriever.save` to ``output_dir`` and a ``train_report.json`` is written beside it::

    report = train_retriever(load_config("configs/train_synthetic_mlp.yaml", TrainJobConfig))
"""

from __future__ import annotations

import json
import math
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, ClassVar

import torch
from pydantic import Field, model_validator
from torch import nn

from rg.config import Config
from rg.run.paths import require_input, resolve_data_path
from rg.data.splits import SplitConfig, load_split_samples
from rg.retrievers.base import CheckpointMeta, Ranked, Retriever
from rg.data.sample import Sample
from rg.retrievers.graphs import EmbeddingTables, GraphBatch
from rg.retrievers.mlp import MLPConfig
from rg.retrievers.pna import PNAConfig
from rg.retrievers.registry import build_retriever, load_retriever
from rg.run.locks import output_lock
from rg.runtime import RayConfig, init_ray
from rg.text.encoder import EncoderConfig, TextEncoder
from rg.run.guard import check_run_config
from rg.training.shards import balance_shards, equal_steps, shard_rows, with_worker_group
from rg.retrievers.inputs import TextIndex
from rg.training.labels import LabelConfig
from rg.training.graph_stream import iter_graphs, stream_training_graphs
from rg.training.gate_pretrain import GatePretrainConfig, pretrain_walk
from rg.training.loop import TrainConfig, fit

REPORT_FILE = "train_report.json"
MODEL_FILE = "model.pt"
OPTIMIZER_FILE = "optimizer.pt"
EPOCH_FILE = "epoch.json"
MODEL_CONFIG_FILE = "model_config.json"
HISTORY_FILE = "history.json"

RetrieverChoice = Annotated[MLPConfig | PNAConfig, Field(discriminator="kind")]


class TrainJobConfig(Config):
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
    labels: LabelConfig = Field(default_factory=LabelConfig, description="Supervision: weak or refined labels.")
    encoder: EncoderConfig = Field(
        default_factory=EncoderConfig,
        description="Text encoder of the embedding tables; set cache_dir so reruns skip the encoding.",
    )
    train: TrainConfig = Field(default_factory=TrainConfig, description="Epochs, optimiser, batching, selection.")
    num_workers: int = Field(2, ge=1, description="Ray Train workers (DDP replicas).")
    use_gpu: bool = Field(False, description="One GPU per worker (NCCL); False trains on CPU with gloo.")
    resources_per_worker: dict[str, Annotated[float, Field(ge=0)]] | None = Field(
        None,
        description="Ray resources of each worker, e.g. {CPU: 1, trainer: 1} to place the workers on nodes that "
        "offer a custom resource `trainer`; None: one CPU (one GPU with use_gpu) per worker.",
    )
    run_name: str = Field(
        min_length=1,
        description="Stable name of the Ray Train run; resubmitting with the same name resumes from its latest checkpoint.",
    )
    storage_path: str = Field(
        "outputs/ray_results",
        description="Where Ray Train persists checkpoints (<storage_path>/<run_name>). On a multi-node cluster this "
        "must be shared storage (NFS path or s3:// / gs:// URI) reachable from every node.",
    )
    keep_checkpoints: int = Field(2, ge=1, description="Checkpoints kept (the best by the selection metric).")
    max_failures: int = Field(0, ge=-1, description="Worker-group restarts on failure (-1: unlimited).")
    output_dir: str = Field(description="The best retriever is exported here (Retriever.save) with train_report.json.")
    ray: RayConfig = Field(default_factory=RayConfig, description="Where Ray runs.")
    walk_pretrain: GatePretrainConfig = Field(
        default_factory=GatePretrainConfig,
        description="Pretrain the gated walk's gates on many training-side questions' relation paths (rg.training.gate_pretrain).",
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
    import ray.train
    import ray.train.torch

    context = ray.train.get_context()
    rank = context.get_world_rank()
    train_cfg = TrainConfig.model_validate(config["train"])
    tables: EmbeddingTables = ray.get(config["tables"])
    train_graphs = equal_steps(shard_rows("train", "graph"))
    # a few questions swapped between the workers so that every shard holds about as many triples
    train_graphs = balance_shards(train_graphs, [g.num_triples for g in train_graphs])
    val_graphs = shard_rows("val", "graph")

    torch.manual_seed(train_cfg.seed)
    retriever = build_retriever(config["kind"], config["model_config"])
    if config.get("walk_state") is not None:
        retriever.walk.load_state_dict(config["walk_state"])  # pretrained gates (a checkpoint overrides them)
        retriever.walk.requires_grad_(not config["freeze_walk"])
    start_epoch, optimizer_state, history = 0, None, []
    checkpoint = ray.train.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as folder:
            folder = Path(folder)
            retriever.load_state_dict(torch.load(folder / MODEL_FILE, map_location="cpu"))
            optimizer_state = torch.load(folder / OPTIMIZER_FILE, map_location="cpu")
            start_epoch = int(json.loads((folder / EPOCH_FILE).read_text())["epoch"]) + 1
            history = json.loads((folder / HISTORY_FILE).read_text())
    if start_epoch >= train_cfg.epochs:
        return
    wrapped = ray.train.torch.prepare_model(
        _LossModule(retriever), parallel_strategy_kwargs={"find_unused_parameters": True}
    )
    model = _DistributedRetriever(retriever, wrapped)

    shard_triples = float(sum(g.num_triples for g in train_graphs))

    def on_epoch_end(epoch: int, metrics: dict[str, float], _model: Any, optimizer: torch.optim.Optimizer) -> None:
        row = {**metrics, "start_epoch": float(start_epoch), "world_size": float(context.get_world_size())}
        row["train_questions_per_worker"] = float(len(train_graphs))
        row["train_triples_this_worker"] = shard_triples
        history.append(row)
        # ASYNC: a background thread uploads the checkpoint and waits for the controller to take the
        # report (it polls every few seconds), so training goes on; the folder is deleted once uploaded.
        if rank != 0:
            ray.train.report(with_worker_group(row), checkpoint_upload_mode=ray.train.CheckpointUploadMode.ASYNC)
            return
        folder = Path(tempfile.mkdtemp(prefix="rg_checkpoint_"))
        torch.save(retriever.state_dict(), folder / MODEL_FILE)
        torch.save(optimizer.state_dict(), folder / OPTIMIZER_FILE)
        (folder / EPOCH_FILE).write_text(json.dumps({"epoch": epoch}) + "\n")
        (folder / MODEL_CONFIG_FILE).write_text(retriever.config.model_dump_json(indent=2) + "\n")
        (folder / HISTORY_FILE).write_text(json.dumps(history, indent=2) + "\n")
        ray.train.report(
            with_worker_group(row),
            checkpoint=ray.train.Checkpoint.from_directory(str(folder)),
            checkpoint_upload_mode=ray.train.CheckpointUploadMode.ASYNC,
            delete_local_checkpoint_after_upload=True,
        )

    fit(
        model,  # type: ignore[arg-type]  # duck-typed: loss through DDP, everything else the raw module
        train_graphs,
        val_graphs,
        tables,
        train_cfg,
        on_epoch_end=on_epoch_end,
        start_epoch=start_epoch,
        optimizer_state=optimizer_state,
    )


def _json_ready(value: Any) -> Any:
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return None
    if isinstance(value, dict):
        return {k: _json_ready(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_ready(v) for v in value]
    return value


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
    report = pretrain_walk(
        walk, questions, val_samples, index.relations, relations, encoder, cfg.labels.weak, cfg.walk_pretrain
    )
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
    import ray.train
    from ray.train.torch import TorchTrainer

    started = time.perf_counter()
    for path in [cfg.input] if isinstance(cfg.input, str) else cfg.input:
        require_input(path)  # before Ray starts and before the run's settings are recorded
    storage = resolve_data_path(cfg.storage_path)
    storage_path = cfg.storage_path if "://" in cfg.storage_path else str(storage.resolve())
    check_run_config(storage_path, cfg.run_name, cfg)  # before any work: a changed config must not resume
    init_ray(cfg.ray)
    # questions without their subgraphs: the subgraphs go from the files to Ray Data tasks (rg.training.graph_stream)
    sides = load_split_samples(cfg.input, cfg.split, ("train", "val"), cfg.limit, graph=False)
    train_samples, val_samples = sides["train"], sides["val"]
    if not train_samples or not val_samples:
        raise ValueError(
            f"the split gives {len(train_samples)} training and {len(val_samples)} validation questions from "
            f"{cfg.input}; both need at least one (check `input` and `split`)"
        )

    encoder = TextEncoder(cfg.encoder)
    graphs = stream_training_graphs(
        cfg.input, train_samples, val_samples, cfg.labels, encoder, cfg.train.skip_unlabelled
    )
    tables, index = graphs.tables, graphs.index
    if graphs.train_usable < cfg.num_workers:
        raise ValueError(
            f"only {graphs.train_usable} usable training question(s) for {cfg.num_workers} workers; "
            "use more questions (limit), fewer num_workers, or labels with positives"
        )

    train_graphs = iter_graphs(graphs.train)  # read one block at a time, only by a model that needs statistics (PNA)
    model_config = build_retriever(cfg.retriever.kind, cfg.retriever, train_graphs=train_graphs).config
    walk_state, pretrain_report = None, None
    if cfg.walk_pretrain.questions:
        walk_state, pretrain_report = _pretrained_walk(cfg, model_config, val_samples, index, tables, encoder)
    metric = cfg.train.selection_metric
    trainer = TorchTrainer(
        train_loop_per_worker,
        train_loop_config={
            "tables": ray.put(tables),
            "kind": cfg.retriever.kind,
            "model_config": model_config.model_dump(mode="json"),
            "train": cfg.train.model_dump(mode="json"),
            "walk_state": walk_state,
            "freeze_walk": cfg.walk_pretrain.freeze,
        },
        scaling_config=ray.train.ScalingConfig(
            num_workers=cfg.num_workers, use_gpu=cfg.use_gpu, resources_per_worker=cfg.resources_per_worker
        ),
        run_config=ray.train.RunConfig(
            name=cfg.run_name,
            storage_path=storage_path,
            checkpoint_config=ray.train.CheckpointConfig(
                num_to_keep=cfg.keep_checkpoints,
                checkpoint_score_attribute=metric,
                checkpoint_score_order="max",
            ),
            failure_config=ray.train.FailureConfig(max_failures=cfg.max_failures),
            callbacks=list(callbacks),
        ),
        datasets={"train": graphs.train, "val": graphs.val},
        dataset_config=ray.train.DataConfig(datasets_to_split=["train"]),
    )
    result = trainer.fit()

    kept = [(c, m) for c, m in (result.best_checkpoints or []) if m.get(metric) is not None]
    if not kept:
        raise RuntimeError(f"run {cfg.run_name!r} under {storage_path} produced no checkpoint with {metric!r}")
    best_checkpoint, best_metrics = max(
        kept, key=lambda cm: -math.inf if math.isnan(float(cm[1][metric])) else float(cm[1][metric])
    )
    latest = result.checkpoint or best_checkpoint
    with latest.as_directory() as folder:
        history = json.loads((Path(folder) / HISTORY_FILE).read_text())
    output = Path(cfg.output_dir)
    with best_checkpoint.as_directory() as folder:
        folder = Path(folder)
        best_epoch = int(json.loads((folder / EPOCH_FILE).read_text())["epoch"])
        exported = build_retriever(cfg.retriever.kind, json.loads((folder / MODEL_CONFIG_FILE).read_text()))
        exported.load_state_dict(torch.load(folder / MODEL_FILE, map_location="cpu"))
    meta = CheckpointMeta(
        label_source=cfg.labels.source,
        encoder_model_id=index.encoder_model_id,
        extra={"run_name": cfg.run_name, "epoch": best_epoch, "metric": metric, "value": best_metrics[metric]},
    )
    retriever_dir = exported.save(output / "retriever", meta)
    load_retriever(retriever_dir)  # fail here, not at inference, if the export does not read back

    start_epoch = int(history[-1]["start_epoch"]) if history else 0
    run_epochs = [int(row["epoch"]) for row in history if int(row["start_epoch"]) == start_epoch]
    report = _json_ready(
        {
            "run_name": cfg.run_name,
            "storage_path": storage_path,
            "kind": cfg.retriever.kind,
            "label_source": cfg.labels.source,
            "encoder_model_id": index.encoder_model_id,
            "questions": len(train_samples) + len(val_samples),
            "train_questions": len(train_samples),
            "train_usable": graphs.train_usable,
            "val_questions": len(val_samples),
            "num_workers": cfg.num_workers,
            "metric": metric,
            "best_epoch": best_epoch,
            "best_value": float(best_metrics[metric]),
            "best_metrics": {k: v for k, v in best_metrics.items() if isinstance(v, (int, float))},
            "resumed": start_epoch > 0,
            "start_epoch": start_epoch,
            "epochs_run": run_epochs,
            "history": history,
            "retriever_dir": str(Path(retriever_dir).resolve()),
            "walk_pretrain": pretrain_report,
            "seconds": time.perf_counter() - started,
        }
    )
    output.mkdir(parents=True, exist_ok=True)
    (output / REPORT_FILE).write_text(json.dumps(report, indent=2) + "\n")
    return report


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
