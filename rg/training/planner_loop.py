"""The in-process planner training loop, shared by Ray Train workers and the tests.

Nothing here imports Ray. :func:`fit_planner` runs epochs of AdamW steps on the trainable
tensors of a :class:`~rg.retrievers.planner.PlannerModel` (LoRA matrices and modules_to_save),
with the causal-LM loss on the path tokens only, evaluates on held-out examples after each
epoch and keeps the best epoch's trained tensors::

    result = fit_planner(planner, train_examples, val_examples, PlannerFitConfig(epochs=5))
    planner.load_trainable_state(result.best_state)

Validation needs no graph: ``val_path_exact_match`` is the share of questions for which
greedy decoding would write one of its target paths exactly, i.e. every target token is the
arg-max given the target prefix (one teacher-forced forward pass per batch). Epochs are ranked by
it, ties broken by the lower validation loss.

Determinism: batch order comes from a generator seeded with ``(seed, epoch)`` and the global
torch RNG (LoRA dropout) is reseeded at each epoch start, so a run resumed at ``start_epoch``
with the saved tensors and optimizer state repeats the uninterrupted run.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

import torch
from pydantic import Field
from torch import nn

from rg.config import Config
from rg.retrievers.planner.model import IGNORE_INDEX, Example, PlannerModel
from rg.training.strategy import DeepSpeedSettings, Strategy

SELECTION_METRIC = "val_path_exact_match"

EpochCallback = Callable[[int, dict[str, float], torch.optim.Optimizer], None]
"""``on_epoch_end(epoch, metrics, optimizer)``, called after each epoch's evaluation."""


class PlannerFitConfig(Config):
    """Settings of :func:`fit_planner`."""

    epochs: int = Field(10, ge=1, description="Epochs to train (counting from 0; resumed runs start later).")
    lr: float = Field(2e-3, gt=0, description="AdamW learning rate of the adapter.")
    lr_schedule: Literal["constant", "cosine"] = Field(
        "constant",
        description="'cosine': epoch e trains at lr · (1 + cos(π e / epochs)) / 2 (set per epoch, so a resumed run "
        "follows the same schedule); 'constant': lr throughout.",
    )
    weight_decay: float = Field(0.0, ge=0, description="AdamW weight decay.")
    batch_size: int = Field(32, ge=1, description="(question, path) examples per optimisation step and worker.")
    grad_clip: float | None = Field(1.0, gt=0, description="Clip the gradient norm to this; None disables.")
    eval_batch_size: int = Field(128, ge=1, description="Examples per validation forward pass.")
    seed: int = Field(0, description="Seed of the batch order and of dropout.")
    strategy: Strategy = Field(
        "ddp", description="'ddp': DDP workers and torch AdamW; 'deepspeed': a DeepSpeed engine per worker (GPU "
        "nodes with the deepspeed extra; see rg.training.strategy)."
    )
    deepspeed: DeepSpeedSettings = Field(default_factory=DeepSpeedSettings,
                                         description="The engine's JSON, accumulation and precision (strategy: deepspeed).")


@dataclass(frozen=True)
class PlannerFitResult:
    """What :func:`fit_planner` returns.

    Attributes:
        history: One metrics dict per epoch run.
        best_epoch: The epoch kept (by ``val_path_exact_match``, then lower ``val_loss``; the
            last epoch without validation examples).
        best_metric: Its ``val_path_exact_match`` (NaN without validation).
        best_state: CPU copies of the trained tensors at ``best_epoch``.
    """

    history: list[dict[str, float]]
    best_epoch: int
    best_metric: float
    best_state: dict[str, torch.Tensor]


def collate(examples: Sequence[Example], pad: int, side: Literal["right", "left"] = "right") -> dict[str, torch.Tensor]:
    """Padded ``input_ids``, ``attention_mask`` and ``labels`` (padding labelled -100).

    ``side="left"`` puts every row's end at the last column (the tuned reader computes logits
    only over the final positions).

    Shapes:
        N examples -> each (N, T_max)
    """
    width = max(len(e.input_ids) for e in examples)
    ids = torch.full((len(examples), width), pad, dtype=torch.long)
    labels = torch.full((len(examples), width), IGNORE_INDEX, dtype=torch.long)
    mask = torch.zeros((len(examples), width), dtype=torch.long)
    for row, example in enumerate(examples):
        n = len(example.input_ids)
        cols = slice(0, n) if side == "right" else slice(width - n, width)
        ids[row, cols] = torch.tensor(example.input_ids)
        labels[row, cols] = torch.tensor(example.labels)
        mask[row, cols] = 1
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def batch_indices(lengths: Sequence[int], batch_size: int, generator: torch.Generator | None = None,
                  length_window: int = 1) -> list[list[int]]:
    """Example indices per batch: a seeded shuffle cut into batches of ``batch_size``.

    With ``length_window`` > 1, each run of ``length_window`` batches of the shuffle is re-cut after sorting its
    examples by length, and the batches are then shuffled again: a batch holds examples of similar length (little
    padding to compute) while the examples a window mixes, and the batch order, stay random. ``1`` is the plain
    shuffle, the order every trainer drew before the option existed.
    """
    n = len(lengths)
    order = torch.randperm(n, generator=generator).tolist() if generator is not None else list(range(n))
    if length_window <= 1:
        return [order[i : i + batch_size] for i in range(0, n, batch_size)]
    span = batch_size * length_window
    batches = []
    for start in range(0, n, span):
        window = sorted(order[start : start + span], key=lengths.__getitem__)
        batches += [window[i : i + batch_size] for i in range(0, len(window), batch_size)]
    if generator is None:
        return batches
    return [batches[i] for i in torch.randperm(len(batches), generator=generator).tolist()]


def example_batches(
    examples: Sequence[Example], batch_size: int, pad: int, generator: torch.Generator | None = None,
    side: Literal["right", "left"] = "right", length_window: int = 1,
) -> list[dict[str, torch.Tensor]]:
    """Collated batches of ``batch_size`` examples, shuffled when a generator is given (see :func:`batch_indices`)."""
    lengths = [len(e.input_ids) for e in examples]
    return [collate([examples[i] for i in chunk], pad, side)
            for chunk in batch_indices(lengths, batch_size, generator, length_window)]


def to_device(batch: dict[str, torch.Tensor], module: nn.Module) -> dict[str, torch.Tensor]:
    """``batch`` on the device of ``module``'s parameters (a GPU worker's model, a CPU batch)."""
    device = next(module.parameters()).device
    return {k: v.to(device) for k, v in batch.items()}


Batch = dict[str, torch.Tensor]
Progress = Callable[[Sequence[Batch], str], Iterable[Batch]]
"""Shows an epoch's steps as they run: gets the epoch's batches and a label (``"epoch 2/5"``) and yields
the same batches in the same order (e.g. wrapped in a progress bar)."""


def train_epoch(
    model: nn.Module,
    batches: Iterable[Batch],
    optimizer: torch.optim.Optimizer | None,
    grad_clip: float | None = None,
    engine=None,
) -> float:
    """One optimiser step per batch (per micro-batch with an engine); returns the mean training loss.

    Args:
        model: The planner, or a wrapper of it (DDP) whose ``forward(**batch)`` returns the loss.
        batches: From :func:`example_batches` (or a :data:`Progress` wrapping them).
        optimizer: Over the trainable tensors (unused with ``engine``).
        grad_clip: Max gradient norm, None for no clipping (an engine clips by its own config).
        engine: A DeepSpeed engine (:func:`rg.training.strategy.deepspeed_engine`) in place of
            ``model`` and ``optimizer``: ``engine.backward`` / ``engine.step`` per micro-batch.
    """
    if engine is not None:
        engine.train()
        total, steps = 0.0, 0
        for batch in batches:
            loss = engine(**to_device(batch, engine.module))
            engine.backward(loss)
            engine.step()
            total += float(loss.detach().float())
            steps += 1
        return total / max(steps, 1)
    if optimizer is None:
        raise ValueError("train_epoch needs an optimizer, or an engine in its place")
    model.train()
    params = [p for group in optimizer.param_groups for p in group["params"]]
    total, steps = 0.0, 0
    for batch in batches:
        optimizer.zero_grad(set_to_none=True)
        loss = model(**to_device(batch, model))
        loss.backward()
        if grad_clip is not None:
            torch.nn.utils.clip_grad_norm_(params, grad_clip)
        optimizer.step()
        total += float(loss.detach())
        steps += 1
    return total / max(steps, 1)


@torch.no_grad()
def evaluate_examples(planner: PlannerModel, examples: Sequence[Example], batch_size: int = 128) -> dict[str, float]:
    """Teacher-forced validation: token-weighted loss, token accuracy and greedy path exact match.

    ``path_exact_match`` is per question: a question counts when any of its examples has every
    path token as the arg-max of the model's distribution given the preceding target tokens.
    Returns an empty dict for no examples.
    """
    if not examples:
        return {}
    planner.eval()
    loss_sum, tokens, correct = 0.0, 0, 0
    exact: dict[str, bool] = {}
    for start in range(0, len(examples), batch_size):
        chunk = examples[start : start + batch_size]
        batch = to_device(collate(chunk, planner.vocab.pad), planner)
        logits = planner.logits(batch["input_ids"], batch["attention_mask"])[:, :-1].float()  # (N, T-1, V)
        target = batch["labels"][:, 1:].to(logits.device)  # (N, T-1)
        scored = target != IGNORE_INDEX  # (N, T-1)
        loss_sum += float(torch.nn.functional.cross_entropy(logits[scored], target[scored], reduction="sum"))
        hits = logits.argmax(-1) == target  # (N, T-1)
        correct += int((hits & scored).sum())
        tokens += int(scored.sum())
        for example, ok in zip(chunk, (hits | ~scored).all(dim=1).tolist()):
            exact[example.id] = exact.get(example.id, False) or ok
    return {
        "loss": loss_sum / max(tokens, 1),
        "token_accuracy": correct / max(tokens, 1),
        "path_exact_match": sum(exact.values()) / len(exact),
    }


def _better(metrics: dict[str, float], best: dict[str, float] | None) -> bool:
    if best is None or SELECTION_METRIC not in metrics:
        return True
    key = (metrics.get(SELECTION_METRIC, -math.inf), -metrics.get("val_loss", math.inf))
    return key > (best.get(SELECTION_METRIC, -math.inf), -best.get("val_loss", math.inf))


def epoch_lr(config: PlannerFitConfig, epoch: int) -> float:
    """The learning rate of ``epoch`` under ``config.lr_schedule``."""
    if config.lr_schedule == "cosine":
        return config.lr * (1.0 + math.cos(math.pi * epoch / config.epochs)) / 2.0
    return config.lr


def fit_planner(
    planner: PlannerModel,
    train: Sequence[Example],
    val: Sequence[Example],
    config: PlannerFitConfig,
    model: nn.Module | None = None,
    on_epoch_end: EpochCallback | None = None,
    start_epoch: int = 0,
    optimizer_state: dict | None = None,
    engine=None,
    progress: Progress | None = None,
) -> PlannerFitResult:
    """Train the planner's adapter for epochs ``start_epoch .. config.epochs - 1``.

    Args:
        planner: The planner (its trainable tensors are updated in place).
        train: Training examples (:meth:`PlannerModel.examples`).
        val: Validation examples; may be empty (the last epoch is then kept).
        config: Epochs, optimiser and batching.
        model: What the loss is computed through, e.g. the planner wrapped in DDP; None uses
            ``planner`` itself.
        on_epoch_end: Called after each epoch with its metrics (Ray Train reports and checkpoints there).
        start_epoch: First epoch to run (resuming).
        optimizer_state: AdamW state to resume from (not with ``engine``).
        engine: A DeepSpeed engine over ``planner`` (``strategy: deepspeed``); it holds the
            optimizer, whose learning rate is still set per epoch here.
        progress: Wraps each epoch's batches to show its steps (in Ray workers
            :func:`rg.train_progress.posting_progress`).

    Returns:
        The history, the best epoch of this run and its trained tensors.

    Raises:
        ValueError: if there are no training examples.
    """
    if not train:
        raise ValueError("no training examples; check the labels (every question lacked a target path)")
    model = model if model is not None else planner
    if engine is not None:
        optimizer = engine.optimizer
    else:
        params = [p for p in planner.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(params, lr=config.lr, weight_decay=config.weight_decay)
        if optimizer_state is not None:
            optimizer.load_state_dict(optimizer_state)
    history: list[dict[str, float]] = []
    best: dict[str, float] | None = None
    best_state = planner.trainable_state()
    for epoch in range(start_epoch, config.epochs):
        started = time.perf_counter()
        torch.manual_seed(config.seed * 100_003 + epoch)
        generator = torch.Generator().manual_seed(config.seed * 100_003 + epoch)
        batches = example_batches(train, config.batch_size, planner.vocab.pad, generator)
        for group in optimizer.param_groups:
            group["lr"] = epoch_lr(config, epoch)
        steps = progress(batches, f"planner epoch {epoch + 1}/{config.epochs}") if progress is not None else batches
        metrics = {"epoch": float(epoch), "train_loss": train_epoch(model, steps, optimizer, config.grad_clip, engine)}
        metrics["lr"] = epoch_lr(config, epoch)
        metrics["train_examples"] = float(len(train))
        metrics.update({f"val_{k}": v for k, v in evaluate_examples(planner, val, config.eval_batch_size).items()})
        metrics["epoch_seconds"] = time.perf_counter() - started
        if _better(metrics, best):
            best, best_state = metrics, planner.trainable_state()
        metrics["best_epoch"] = best["epoch"] if best is not None else float(epoch)
        history.append(metrics)
        if on_epoch_end is not None:
            on_epoch_end(epoch, dict(metrics), optimizer)
    if best is None:
        return PlannerFitResult(history, start_epoch - 1, math.nan, best_state)
    return PlannerFitResult(
        history, int(best["epoch"]), float(best.get(SELECTION_METRIC, math.nan)), best_state
    )
