"""The in-process train / evaluate loop shared by Ray Train, Ray Tune and the tests.

Nothing here imports Ray. :func:`fit` runs epochs of :func:`train_epoch` and :func:`evaluate`,
keeps the weights of the best epoch by a validation recall, and calls ``on_epoch_end`` after
every epoch so that the Ray Train glue can ``ray.train.report`` metrics and a checkpoint::

    result = fit(model, train_graphs, val_graphs, tables, TrainConfig(epochs=5))
    model.load_state_dict(result.best_state)

Metrics follow SubgraphRAG (Li et al., 2024): **triple recall@K** is the share of a question's
positive triples ranked in its top K, averaged over questions with at least one positive;
**answer recall@K** is the share of a question's answers that are the head or tail of a top-K
triple, averaged over questions with at least one answer (answers missing from the subgraph
count as not recalled). SubgraphRAG selects its checkpoint by validation triple recall@100.

Determinism: batches are shuffled with a generator seeded from ``(seed, epoch)`` and the global
torch RNG (dropout) is reseeded at each epoch start, so a run resumed at ``start_epoch`` with
the saved model and optimizer states repeats the uninterrupted run. Seed the model's
initialisation yourself (``torch.manual_seed(config.seed)`` before building it).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch
from pydantic import Field, model_validator

from rg.config import Config
from rg.metrics import mean_triple_recall_at_ks
from rg.retrievers.base import Ranked, Retriever
from rg.retrievers.graphs import EmbeddingTables, GraphBatch, QuestionGraph, collate
from rg.training.balance import balanced_groups

DEFAULT_KS = (10, 20, 50, 100, 200)

Batching = Literal["shuffle", "by_size", "balanced"]

EpochCallback = Callable[[int, dict[str, float], Retriever, torch.optim.Optimizer], None]
"""``on_epoch_end(epoch, metrics, model, optimizer)``, called after each epoch's evaluation."""


class TrainConfig(Config):
    """Settings of :func:`fit`."""

    epochs: int = Field(10, ge=1, description="Epochs to train (counting from 0; resumed runs start later).")
    lr: float = Field(1e-3, gt=0, description="AdamW learning rate.")
    weight_decay: float = Field(0.0, ge=0, description="AdamW weight decay.")
    questions_per_batch: int = Field(8, ge=1, description="Questions (whole subgraphs) per optimisation step.")
    seed: int = Field(0, description="Seed of the batch order and of dropout.")
    recall_k: int = Field(100, ge=1, description="K of the recall that selects the best epoch.")
    select_by: Literal["val_triple_recall", "val_answer_recall"] = Field(
        "val_triple_recall",
        description="Validation metric (at recall_k) whose best epoch is kept; SubgraphRAG uses triple recall@100.",
    )
    eval_ks: tuple[int, ...] = Field(DEFAULT_KS, min_length=1, description="Cut-offs K reported by evaluation.")
    batching: Batching = Field(
        "balanced",
        description=(
            "How questions form batches each epoch. 'shuffle': questions_per_batch random questions. 'by_size': "
            "random questions sorted by triple count, then cut (each batch holds similar sizes; batch order "
            "shuffled). 'balanced': as many random batches as 'shuffle' makes, with a few questions swapped "
            "between them so that every batch holds about the same number of triples (rg.training.balance). "
            "Under Ray Train the workers' shards are evened out too, so with 'balanced' every worker's step "
            "costs about the same. MetaQA's sizes are skewed (2-hop: mean 552 triples, sd 1,310): with "
            "shuffled batches of 16 on two workers "
            "the slower worker's step holds ~1.34x the mean triples, sorted ones ~1.10x, balanced ones ~1.02x."
        ),
    )
    skip_unlabelled: bool = Field(
        True,
        description=(
            "Leave out training questions without a positive triple (they teach only negatives; "
            "SubgraphRAG drops them too). Validation always keeps every question."
        ),
    )

    @model_validator(mode="before")
    @classmethod
    def _renamed(cls, data: Any) -> Any:
        if isinstance(data, dict) and "batch_by_size" in data:
            raise ValueError("train.batch_by_size was replaced by train.batching: use batching: by_size (or balanced)")
        return data

    @model_validator(mode="after")
    def _check_ks(self) -> "TrainConfig":
        if any(k < 1 for k in self.eval_ks):
            raise ValueError(f"eval_ks must be positive integers, got {list(self.eval_ks)}")
        return self

    @property
    def selection_metric(self) -> str:
        """Name of the metric that selects the best epoch, e.g. ``val_triple_recall@100``."""
        return f"{self.select_by}@{self.recall_k}"

    @property
    def ks(self) -> tuple[int, ...]:
        """``eval_ks`` with ``recall_k`` added, sorted."""
        return tuple(sorted({*self.eval_ks, self.recall_k}))


@dataclass(frozen=True)
class FitResult:
    """What :func:`fit` returns.

    Attributes:
        history: One metrics dict per epoch run (``epoch``, ``train_loss``, ``train_seconds``, ``epoch_seconds``,
            ``val_*`` recalls and loss, ``best_epoch``).
        best_epoch: The epoch with the best selection metric (the last one without validation).
        best_metric: Its value (NaN without validation).
        metric: The selection metric's name.
        best_state: A CPU copy of the model's state dict at ``best_epoch``.
    """

    history: list[dict[str, float]]
    best_epoch: int
    best_metric: float
    metric: str
    best_state: dict[str, torch.Tensor]


def make_batches(
    graphs: Sequence[QuestionGraph],
    questions_per_batch: int,
    generator: torch.Generator | None = None,
    batching: Batching = "shuffle",
) -> list[GraphBatch]:
    """Collate ``graphs`` into ``ceil(len(graphs) / questions_per_batch)`` batches (see ``TrainConfig.batching``).

    ``shuffle`` cuts the questions in the generator's order (in the given order without one)
    into batches of ``questions_per_batch``. ``by_size`` sorts the shuffled questions by triple
    count before cutting them and then shuffles the order of the batches; under DDP every
    worker draws the same batch permutation (same seed, same batch count), so the workers'
    batches at one step come from the same size quantile of their shards. ``balanced`` makes
    the same number of batches with about equal triple totals
    (:func:`rg.training.balance.balanced_groups`; without a generator, a fixed seed).
    """
    if questions_per_batch < 1:
        raise ValueError(f"questions_per_batch must be >= 1, got {questions_per_batch}")
    if not graphs:
        return []
    count = math.ceil(len(graphs) / questions_per_batch)
    if batching == "balanced":
        groups = balanced_groups(
            [g.num_triples for g in graphs], count, generator or torch.Generator().manual_seed(0)
        )
        return [collate([graphs[i] for i in group]) for group in groups]
    if batching not in ("shuffle", "by_size"):
        raise ValueError(f"batching must be 'shuffle', 'by_size' or 'balanced', got {batching!r}")
    order = torch.randperm(len(graphs), generator=generator).tolist() if generator is not None else list(range(len(graphs)))
    if batching == "by_size":
        order.sort(key=lambda i: graphs[i].num_triples)  # stable: equal sizes keep the shuffled order
    ordered = [graphs[i] for i in order]
    batches = [ordered[i : i + questions_per_batch] for i in range(0, len(ordered), questions_per_batch)]
    if batching == "by_size" and generator is not None:
        batches = [batches[i] for i in torch.randperm(len(batches), generator=generator).tolist()]
    return [collate(b) for b in batches]


def train_epoch(
    model: Retriever, batches: Sequence[GraphBatch], tables: EmbeddingTables, optimizer: torch.optim.Optimizer
) -> float:
    """One pass over ``batches`` with one optimiser step each.

    Batches without triples are skipped.

    Returns:
        The mean of the batch losses (NaN when no batch had triples).
    """
    model.train()
    losses = []
    for batch in batches:
        if batch.num_triples == 0:
            continue
        batch = batch.to(tables.device)
        optimizer.zero_grad(set_to_none=True)
        loss = model.loss(batch, tables)
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    return math.fsum(losses) / len(losses) if losses else math.nan


def _answer_first_ranks(
    answers: torch.Tensor, num_answers: int, heads: torch.Tensor, tails: torch.Tensor
) -> list[float]:
    """First rank at which each answer is the head or tail of a ranked triple (``inf`` if never).

    Answers absent from the subgraph (``num_answers`` minus the present ones) get ``inf``.

    Args:
        answers: Entity ids of the answers present in the subgraph.
        num_answers: All distinct answers of the question.
        heads, tails: Entity ids of the ranked triples, best first.

    Shapes:
        answers: (A,); heads, tails: (K,) -> num_answers floats
    """
    ranks = [math.inf] * num_answers
    if answers.numel() and heads.numel():
        ends = torch.stack([heads, tails])  # (2, K)
        hits = (ends.unsqueeze(0) == answers.view(-1, 1, 1)).any(dim=1)  # (A, K)
        first = hits.to(torch.int8).argmax(dim=1)  # (A,) position of the first hit (0 when none)
        for i, (rank, found) in enumerate(zip(first.tolist(), hits.any(dim=1).tolist())):
            if found:
                ranks[i] = float(rank)
    return ranks


def _mean(values: list[float]) -> float:
    return math.fsum(values) / len(values) if values else math.nan


@torch.no_grad()
def evaluate(
    model: Retriever,
    batches: Sequence[GraphBatch],
    tables: EmbeddingTables,
    ks: Sequence[int] = DEFAULT_KS,
) -> dict[str, float]:
    """Triple and answer recall@K (and the loss, when labelled) over the questions of ``batches``.

    Args:
        model: The retriever (put in eval mode here and restored afterwards).
        batches: Questions to evaluate; labels are needed for triple recall and loss, answers
            for answer recall.
        tables: The embedding tables.
        ks: Cut-offs.

    Returns:
        ``triple_recall@K`` and ``answer_recall@K`` for each K (NaN when no question counts),
        ``loss`` (mean over labelled batches with triples), ``questions``,
        ``questions_with_positives`` and ``questions_with_answers``.
    """
    if not ks or any(k < 1 for k in ks):
        raise ValueError(f"ks must be positive integers, got {list(ks)}")
    was_training = model.training
    model.eval()
    k_max = max(ks)
    ranked_ids: list[list[int]] = []
    positives: list[list[int]] = []
    answer_ranks: list[list[float]] = []
    losses = []
    questions = 0
    for batch in batches:
        batch = batch.to(tables.device)
        questions += batch.num_graphs
        if batch.num_triples == 0:
            empty = torch.zeros(0, dtype=torch.long, device=tables.device)
            rankings = [Ranked(indices=empty, scores=empty.float())] * batch.num_graphs
        else:
            rankings = model.retrieve(batch, tables, k_max)
            if batch.labels is not None:
                losses.append(float(model.loss(batch, tables)))
        ptr = batch.triple_ptr.tolist()
        for b, ranked in enumerate(rankings):
            if batch.labels is not None:
                ranked_ids.append(ranked.indices.tolist())
                positives.append(torch.nonzero(batch.labels[ptr[b] : ptr[b + 1]]).flatten().tolist())
            if batch.answers is not None and batch.answer_ptr is not None and batch.num_answers is not None:
                count = int(batch.num_answers[b])
                if count:
                    answers = batch.answers[batch.answer_ptr[b] : batch.answer_ptr[b + 1]]  # (A,)
                    top = ranked.indices + ptr[b]  # (K,) batch-global triple ids
                    answer_ranks.append(_answer_first_ranks(answers, count, batch.head[top], batch.tail[top]))
    model.train(was_training)
    metrics: dict[str, float] = {"questions": float(questions)}
    triple = mean_triple_recall_at_ks(ranked_ids, positives, ks) if ranked_ids else None
    for k in ks:
        value = None if triple is None else triple[k]
        metrics[f"triple_recall@{k}"] = math.nan if value is None else float(value)
        metrics[f"answer_recall@{k}"] = _mean([sum(r < k for r in ranks) / len(ranks) for ranks in answer_ranks])
    metrics["questions_with_positives"] = float(0 if triple is None else triple.n)
    metrics["questions_with_answers"] = float(len(answer_ranks))
    metrics["loss"] = _mean(losses)
    return metrics


def build_optimizer(model: Retriever, config: TrainConfig) -> torch.optim.Optimizer:
    """AdamW over the model's parameters with the config's learning rate and weight decay."""
    return torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)


def _epoch_seed(seed: int, epoch: int) -> int:
    return (seed * 1_000_003 + epoch) % (2**63)


def fit(
    model: Retriever,
    train_graphs: Sequence[QuestionGraph],
    val_graphs: Sequence[QuestionGraph],
    tables: EmbeddingTables,
    config: TrainConfig,
    on_epoch_end: EpochCallback | None = None,
    start_epoch: int = 0,
    optimizer_state: Mapping[str, Any] | None = None,
) -> FitResult:
    """Train ``model`` for epochs ``start_epoch .. config.epochs - 1``, keeping the best epoch.

    Args:
        model: The retriever, on the device to train on (tables are moved there).
        train_graphs: Labelled training questions.
        val_graphs: Labelled validation questions (with answers, for answer recall); may be
            empty, then the last epoch is kept.
        tables: Embedding tables covering both sets.
        config: Epochs, optimiser, batching, seed and selection.
        on_epoch_end: Called as ``on_epoch_end(epoch, metrics, model, optimizer)`` after each
            epoch (report and checkpoint here).
        start_epoch: First epoch to run (resuming; load the model state before calling).
        optimizer_state: AdamW state to resume from.

    Returns:
        A :class:`FitResult` over the epochs run in this call (a resumed call does not know the
        metrics of earlier epochs; Ray Train's checkpoint manager keeps the overall best).

    Raises:
        ValueError: if no training question has a label (or a positive, with ``skip_unlabelled``).
    """
    train = [g for g in train_graphs if g.labels is not None and (g.num_positives > 0 or not config.skip_unlabelled)]
    if not train:
        raise ValueError(
            f"none of the {len(train_graphs)} training questions has labels"
            + (" with a positive triple" if config.skip_unlabelled else "")
            + "; check the label source, or set skip_unlabelled: false"
        )
    device = next(model.parameters()).device
    tables = tables.to(device)
    optimizer = build_optimizer(model, config)
    if optimizer_state is not None:
        optimizer.load_state_dict(dict(optimizer_state))
    val_batches = make_batches(val_graphs, config.questions_per_batch) if val_graphs else []
    history: list[dict[str, float]] = []
    best_epoch, best_metric, best_state = -1, -math.inf, None
    for epoch in range(start_epoch, config.epochs):
        seed = _epoch_seed(config.seed, epoch)
        torch.manual_seed(seed)
        generator = torch.Generator().manual_seed(seed)
        started = time.perf_counter()
        metrics: dict[str, float] = {"epoch": float(epoch)}
        batches = make_batches(train, config.questions_per_batch, generator, config.batching)
        metrics["train_loss"] = train_epoch(model, batches, tables, optimizer)
        metrics["train_seconds"] = time.perf_counter() - started
        if val_batches:
            metrics.update({f"val_{k}": v for k, v in evaluate(model, val_batches, tables, config.ks).items()})
        metrics["epoch_seconds"] = time.perf_counter() - started
        value = metrics.get(config.selection_metric, math.nan)
        score = -math.inf if math.isnan(value) else value
        if best_state is None or score > best_metric or not val_batches:
            best_epoch, best_metric = epoch, score
            best_state = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
        metrics["best_epoch"] = float(best_epoch)
        history.append(metrics)
        if on_epoch_end is not None:
            on_epoch_end(epoch, metrics, model, optimizer)
    if best_state is None:
        raise ValueError(f"start_epoch {start_epoch} is not below epochs {config.epochs}; nothing to train")
    return FitResult(
        history=history,
        best_epoch=best_epoch,
        best_metric=math.nan if math.isinf(best_metric) else best_metric,
        metric=config.selection_metric,
        best_state=best_state,
    )

