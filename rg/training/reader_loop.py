"""Training the tuned reader: examples from evidence and gold answers, and the in-process loop.

Nothing here imports Ray; the Ray Train job (:mod:`rg.jobs.train_reader`) and the tests call
the same functions::

    model, tokenizer = lora_reader_model(settings, LoraSettings())
    items = [ReaderItem(q.id, q.question, evidence, q.answers) for q, evidence in ...]
    examples, skipped = reader_examples(items, tokenizer, settings, eos_id(tokenizer, model))
    history = fit_reader(model, tokenizer, examples, val_items, settings, ReaderFitConfig(epochs=2))

The target of a question is its gold answers that end a chain on the prompt's evidence lines, written as the reader
writes them (names joined by the separator, then end-of-sequence), in evidence order and at most
``max_answers``; a question whose shown evidence reaches no gold answer teaches nothing and is
skipped (counted). The loss is the causal-LM loss on the target tokens only. Validation reads
held-out questions with the constrained decoder and reports Hits@1 and Hit, the metrics the QA
evaluation reports.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import torch
from pydantic import Field
from torch import nn

from rg.config import Config
from rg.evidence import Evidence
from rg.metrics import normalize_answer
from rg.models.precision import resolve_dtype
from rg.reasoning.answer_grammar import AnswerGrammar
from rg.reasoning.tuned_reader import (
    ReaderPrompt,
    TunedReader,
    TunedReaderSettings,
    build_prompt,
    shown_items,
)
from rg.retrievers.planner.model import IGNORE_INDEX, Example
from rg.training.frozen_prefix import FrozenPrefix, decoder_slice, first_adapted_layer, positions_of
from rg.training.planner_loop import Progress, batch_indices, example_batches, train_epoch
from rg.training.strategy import DeepSpeedSettings, Strategy

SELECTION_METRIC = "val_hits_at_1"
WEIGHT_DECAY = 0.01
"""AdamW weight decay of the adapter (torch's default, which the reader has always trained with)."""


class ReaderLora(Config):
    """The reader's LoRA adapter."""

    rank: int = Field(8, ge=1, description="LoRA rank r.")
    alpha: int = Field(16, ge=1, description="LoRA alpha (scale alpha / r).")
    dropout: float = Field(0.05, ge=0, lt=1, description="Dropout on the LoRA input.")
    targets: tuple[str, ...] = Field(("q_proj", "v_proj"), min_length=1, description="Projection modules adapted.")
    top_layers: int | None = Field(
        None, ge=1, description="Adapt only the last N decoder layers (None: all). Backpropagation then stops at "
        "the lowest adapted layer, which saves most of the backward pass on a CPU."
    )


class ReaderFitConfig(Config):
    """Settings of :func:`fit_reader`."""

    epochs: int = Field(2, ge=1, description="Epochs over the training examples.")
    lr: float = Field(1e-3, gt=0, description="AdamW learning rate of the adapter.")
    batch_size: int = Field(8, ge=1, description="Examples per optimisation step and worker.")
    grad_clip: float | None = Field(1.0, gt=0, description="Gradient-norm clip; None disables.")
    seed: int = Field(0, description="Seed of the batch order, of dropout and of the line order (shuffle_lines).")
    frozen_cache_mb: float = Field(
        2048, ge=0, description="Memory for the hidden states that enter the lowest adapted layer (lora.top_layers): "
        "the frozen layers below it then run once per example instead of once per step (rg.training.frozen_prefix). "
        "A worker whose examples need more, or 0, runs every layer at each step."
    )
    length_window: int = Field(
        1, ge=1, description="Batches of similar prompt length: each run of this many batches of the seeded shuffle "
        "is re-cut after sorting its examples by length (then the batches are shuffled), so a step computes little "
        "padding; 1 is the plain shuffle (rg.training.planner_loop.batch_indices)."
    )
    shuffle_lines: float = Field(
        0.0, ge=0, le=1, description="Share of the training questions whose prompt shows its evidence lines in a "
        "seeded random order (the same lines; reading keeps the evidence order). The evidence order puts the gold "
        "line first for most questions, so a reader trained on it alone learns to answer the first line; 0 keeps "
        "the order (docs/models.md)."
    )
    strategy: Strategy = Field(
        "ddp", description="'ddp': DDP workers and torch AdamW; 'deepspeed': a DeepSpeed engine per worker (GPU "
        "nodes with the deepspeed extra; see rg.training.strategy)."
    )
    deepspeed: DeepSpeedSettings = Field(default_factory=DeepSpeedSettings,
                                         description="The engine's JSON, accumulation and precision (strategy: deepspeed).")


@dataclass(frozen=True)
class ReaderItem:
    """One question with its evidence; ``answers`` are gold answers (training and metrics only)."""

    id: str
    question: str
    evidence: Evidence
    answers: tuple[str, ...]


class ReaderLoss(nn.Module):
    """Wraps a causal LM so that ``forward(**batch)`` returns the loss on the target tokens.

    The decoder runs over the whole (left-padded) batch, but the LM head only over the positions
    that predict a target token, gathered into one ``(K, hidden)`` matrix: with a 49k-token
    vocabulary, logits over whole prompts would cost gigabytes for nothing, and a head applied to
    a slice of the ``(N, T, hidden)`` states makes autograd expand its weight per row in the
    backward pass (a copy of the whole ``(N, hidden, vocab)`` weight per step, a fifth of a step on a CPU).

    A batch may give ``hidden`` (the states entering the lowest adapted layer, from
    :class:`~rg.training.frozen_prefix.FrozenPrefix`) in place of ``input_ids``: only the adapted
    layers then run.
    """

    def __init__(self, lm: nn.Module) -> None:
        super().__init__()
        self.decoder = lm.get_decoder()  # the layers, with the adapter's modules inside them
        self.head = lm.get_output_embeddings()
        self.start_layer = first_adapted_layer(lm)

    def forward(self, attention_mask: torch.Tensor, labels: torch.Tensor, input_ids: torch.Tensor | None = None,
                hidden: torch.Tensor | None = None) -> torch.Tensor:
        positions = positions_of(attention_mask)
        if hidden is None:
            states = self.decoder(input_ids=input_ids, attention_mask=attention_mask, position_ids=positions,
                                  use_cache=False).last_hidden_state  # (N, T, H)
        else:
            with decoder_slice(self.decoder, self.start_layer, None) as top:
                states = top(inputs_embeds=hidden, attention_mask=attention_mask, position_ids=positions,
                             use_cache=False).last_hidden_state
        targets = labels[:, 1:]
        scored = targets != IGNORE_INDEX  # position t predicts token t + 1
        logits = self.head(states[:, :-1][scored])  # (K, V)
        return nn.functional.cross_entropy(logits.float(), targets[scored])


def lora_reader_model(settings: TunedReaderSettings, lora: ReaderLora, cache_dir: str | None = None):
    """The base model from the registry, in ``settings.precision``, with a fresh fp32 LoRA adapter; returns
    ``(peft model, tokenizer)``."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rg.models.registry import resolve_model

    folder = resolve_model(settings.base, cache_dir)
    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    base = AutoModelForCausalLM.from_pretrained(folder, local_files_only=True, dtype=resolve_dtype(settings.precision))
    layers = base.config.num_hidden_layers
    if lora.top_layers is not None and lora.top_layers > layers:
        raise ValueError(f"lora.top_layers ({lora.top_layers}) exceeds the base model's {layers} layers")
    config = LoraConfig(r=lora.rank, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
                        target_modules=list(lora.targets), task_type="CAUSAL_LM",
                        layers_to_transform=None if lora.top_layers is None else list(range(layers - lora.top_layers, layers)))
    return get_peft_model(base, config), tokenizer


def gold_names(candidates: Sequence[str], answers: Sequence[str], limit: int) -> list[str]:
    """The candidates that a gold answer names (normalised match), in candidate order, at most ``limit``."""
    wanted = {normalize_answer(a) for a in answers} - {""}
    return [name for name in candidates if normalize_answer(name) in wanted][:limit]


def reader_examples(items: Sequence[ReaderItem], tokenizer, settings: TunedReaderSettings,
                    eos: int, shuffle_lines: float = 0.0, seed: int = 0) -> tuple[list[Example], int]:
    """Tokenised training examples, and how many questions were skipped (no gold answer on the lines shown).

    With ``shuffle_lines`` > 0 that share of the questions (a seeded draw per question id) shows its lines in a
    seeded random order: the same lines and candidates, the target names in the new line order.
    """
    examples, skipped = [], 0
    for item in items:
        prompt = build_prompt(tokenizer, settings, item.question, item.evidence)
        names = _target_names(prompt, item, tokenizer, settings, eos)
        if names and shuffle_lines > 0 and prompt.lines > 1:
            draw = random.Random(f"rg-reader-lines:{seed}:{item.id}")
            if draw.random() < shuffle_lines:
                shown = shown_items(settings, item.evidence)[: prompt.lines]
                draw.shuffle(shown)
                permuted = build_prompt(tokenizer, settings, item.question, replace(item.evidence, items=tuple(shown)))
                permuted_names = _target_names(permuted, item, tokenizer, settings, eos)
                if permuted_names:  # the reordered prompt can lose a line to the token budget
                    prompt, names = permuted, permuted_names
        if not names:
            skipped += 1
            continue
        target = AnswerGrammar(prompt.candidates, tokenizer, eos, settings.max_answers,
                               settings.max_name_tokens).encode(names)
        examples.append(Example(id=item.id, input_ids=tuple(prompt.ids + target),
                                labels=tuple([IGNORE_INDEX] * len(prompt.ids) + target)))
    return examples, skipped


def _target_names(prompt: ReaderPrompt, item: ReaderItem, tokenizer, settings: TunedReaderSettings,
                  eos: int) -> list[str]:
    """The gold answers among the prompt's candidates that the constrained decoder could write."""
    grammar = AnswerGrammar(prompt.candidates, tokenizer, eos, settings.max_answers, settings.max_name_tokens)
    return [n for n in gold_names(prompt.candidates, item.answers, settings.max_answers)
            if grammar.parse(grammar.encode([n])) == [n]]


def read_hits(reader: TunedReader, items: Sequence[ReaderItem]) -> dict[str, float]:
    """Hits@1 and Hit of the constrained reader on ``items`` (exact match after normalisation)."""
    if not items:
        return {}
    hits1 = hit = 0
    for item in items:
        written = [normalize_answer(name) for name, _ in reader.answer(item.question, item.evidence)]
        gold = {normalize_answer(a) for a in item.answers}
        hits1 += bool(written) and written[0] in gold
        hit += any(w in gold for w in written)
    return {"hits_at_1": hits1 / len(items), "hit": hit / len(items), "questions": float(len(items))}


EpochCallback = Callable[[int, dict[str, float], torch.optim.Optimizer], None]


def fit_reader(
    model: nn.Module,
    tokenizer,
    train: Sequence[Example],
    val: Sequence[ReaderItem],
    settings: TunedReaderSettings,
    config: ReaderFitConfig,
    wrapped: nn.Module | None = None,
    on_epoch_end: EpochCallback | None = None,
    start_epoch: int = 0,
    optimizer_state: dict | None = None,
    evaluate: Callable[[TunedReader, Sequence[ReaderItem]], dict[str, float]] = read_hits,
    engine=None,
    progress: Progress | None = None,
) -> list[dict[str, float]]:
    """Train the adapter of ``model`` (a peft model) for epochs ``start_epoch .. epochs - 1``.

    Args:
        model: The peft model (its LoRA tensors are trained in place).
        tokenizer: Its tokenizer.
        train: From :func:`reader_examples`.
        val: Held-out questions read after each epoch (may be empty).
        settings: Prompt and decoding settings.
        config: Epochs, optimiser, batching.
        wrapped: What the loss goes through (e.g. DDP over :class:`ReaderLoss`); default ``ReaderLoss(model)``.
        on_epoch_end: Called with each epoch's metrics (Ray Train reports and checkpoints there).
        start_epoch: First epoch to run (resuming).
        optimizer_state: AdamW state to resume from.
        evaluate: Validation function (Ray workers pass one that reads their shard and sums across workers).
        engine: A DeepSpeed engine over ``ReaderLoss(model)`` (``strategy: deepspeed``) in place of
            ``wrapped`` and the AdamW built here.
        progress: Wraps each epoch's batches to show its steps (in Ray workers
            :func:`rg.train_progress.posting_progress`).

    Returns:
        One metrics dict per epoch run.

    Raises:
        ValueError: without training examples.
    """
    if not train:
        raise ValueError("no training examples: no training question has a gold answer among its evidence's chain "
                         "ends; raise top_k or check the retriever checkpoint")
    wrapped = wrapped if wrapped is not None else ReaderLoss(model)
    if engine is not None:
        optimizer = engine.optimizer
    else:
        params = [p for p in model.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(params, lr=config.lr, weight_decay=WEIGHT_DECAY)
        if optimizer_state is not None:
            optimizer.load_state_dict(optimizer_state)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    prefix = FrozenPrefix.build(model, train, config.frozen_cache_mb) if start_epoch < config.epochs else None
    history = []
    for epoch in range(start_epoch, config.epochs):
        started = time.perf_counter()
        torch.manual_seed(config.seed * 100_003 + epoch)
        generator = torch.Generator().manual_seed(config.seed * 100_003 + epoch)
        if prefix is None:
            batches = example_batches(train, config.batch_size, pad, generator, "left", config.length_window)
        else:  # the same batches as example_batches draws
            batches = prefix.batches(batch_indices([len(e.input_ids) for e in train], config.batch_size, generator,
                                                   config.length_window))
        steps = progress(batches, f"reader epoch {epoch + 1}/{config.epochs}") if progress is not None else batches
        loss = train_epoch(wrapped, steps, optimizer, config.grad_clip, engine)
        metrics = {"epoch": float(epoch), "train_loss": loss, "train_examples": float(len(train)),
                   "train_seconds": time.perf_counter() - started,
                   "frozen_layers": float(prefix.start if prefix is not None else 0),
                   "frozen_prefix_seconds": prefix.seconds if prefix is not None and epoch == start_epoch else 0.0}
        model.eval()
        reader = TunedReader(model, tokenizer, settings)
        metrics.update({f"val_{k}": v for k, v in evaluate(reader, val).items()})
        metrics["epoch_seconds"] = time.perf_counter() - started
        history.append(metrics)
        if on_epoch_end is not None:
            on_epoch_end(epoch, dict(metrics), optimizer)
    return history

