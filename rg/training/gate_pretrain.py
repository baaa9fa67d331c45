"""Pretraining the gated walk's gates on relation paths of many training questions.

The gates of :class:`~rg.retrievers.walk.GatedWalk` map a question to the relation it walks at
each step. Inside retriever training they learn that from the few thousand questions whose
subgraphs fit an epoch; but the mapping needs only the question text and its relation path,
not the subgraph, and the training side usually holds far more questions than are trained on.
On MetaQA 3-hop an offline check (the gate module alone, MetaQA's own question types as
paths) got all three steps right on 80% of test questions from 700 training questions, 92%
from 2,800 and 96% from 7,000.

So before training, the train job reads up to ``walk_pretrain.questions`` training-side
questions *without* their subgraphs and finds each one's relation paths the way
``labels.template_vote`` does (best answer-F1 paths on the whole KB, then the vote of the
training questions worded alike: :func:`rg.jobs.weak_labels.voted_paths`), and
:func:`pretrain_walk` fits the walk's gates alone to them: a BCE per question,
step, direction and relation, against 1 where a path takes that relation in that direction at
that step. Retriever training then starts from these gates, frozen by default
(``walk_pretrain.freeze``): trained on, they drifted from the relation paths towards whatever
lowered the triple loss. Held-out accuracy is measured on the job's
validation questions: the share whose argmax gate is on one of their paths at every step
(overall and per hop count).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from pydantic import Field
from tqdm import tqdm

from rg.config import Config
from rg.console import user_stream
from rg.data.sample import Sample
from rg.graph.path import split_relation
from rg.retrievers.walk import GatedWalk
from rg.text.encoder import TextEncoder


class GatePretrainConfig(Config):
    """``walk_pretrain``: fit the walk's gates on many questions' relation paths before training."""

    questions: int = Field(
        0,
        ge=0,
        description=(
            "Training-side questions (a sample stratified by hop with split.seed, read without their subgraphs) whose "
            "voted answer-F1 relation paths pretrain the gates; 0 = off. Needs retriever.walk_steps > 0 and "
            "labels.weak.kb (the paths are searched on the whole KB)."
        ),
    )
    steps: int = Field(3000, gt=0, description="Optimiser steps of the pretraining.")
    batch_size: int = Field(64, gt=0, description="Questions per pretraining step.")
    lr: float = Field(1e-3, gt=0, description="Adam learning rate of the pretraining.")
    seed: int = Field(0, description="Seed of the pretraining batches (the question sample follows split.seed).")
    freeze: bool = Field(
        True,
        description=(
            "Keep the pretrained gates fixed while the retriever trains. Trained on with the retriever they "
            "drifted on MetaQA (3-hop test questions with every step right: 0.96 after pretraining, 0.83 "
            "after 16 epochs); false trains them further (retriever.walk_loss then still applies)."
        ),
    )


def gate_target_tensor(
    paths: Sequence[tuple[tuple[str, ...], ...]], relations: Mapping[str, int], steps: int
) -> torch.Tensor:
    """Per question, step and direction (even columns forward), which relations its paths take.

    Steps past ``steps`` and relations outside ``relations`` (no subgraph has them, so no gate
    of theirs is ever used) are left out.

    Shapes:
        -> (N, 2S, R)
    """
    targets = torch.zeros(len(paths), 2 * steps, len(relations))
    for row, question_paths in enumerate(paths):
        for path in question_paths:
            for step, label in enumerate(path[:steps]):
                name, forward = split_relation(label)
                if name in relations:
                    targets[row, 2 * step + int(not forward), relations[name]] = 1.0
    return targets


def step_accuracy(logits: torch.Tensor, targets: torch.Tensor) -> float:
    """Share of questions whose argmax (relation, direction) is a target at every step with one.

    Shapes:
        logits, targets: (N, 2S, R) -> scalar
    """
    n, columns, r = logits.shape
    per_step = logits.view(n, columns // 2, 2 * r)  # forward then backward relations of each step
    wanted = targets.view(n, columns // 2, 2 * r)
    has = wanted.sum(2) > 0  # (N, S)
    hit = wanted.gather(2, per_step.argmax(2, keepdim=True)).squeeze(2) > 0  # (N, S)
    return float((hit | ~has).all(1).float().mean()) if n else float("nan")


def fit_gates(
    walk: GatedWalk,
    questions: torch.Tensor,
    relations: torch.Tensor,
    targets: torch.Tensor,
    config: GatePretrainConfig,
) -> list[float]:
    """Fit ``walk``'s gates to ``targets`` by BCE over every question, step, direction and relation.

    Returns:
        The loss of every 100th step (and of the last).

    Shapes:
        questions: (N, D); relations: (R, D); targets: (N, 2S, R)
    """
    generator = torch.Generator().manual_seed(config.seed)
    optimizer = torch.optim.Adam(walk.parameters(), lr=config.lr)
    losses = []
    walk.train()
    for step in tqdm(range(config.steps), desc="gate pretraining", unit="step", mininterval=5, file=user_stream()):
        rows = torch.randint(0, questions.shape[0], (config.batch_size,), generator=generator)
        loss = F.binary_cross_entropy_with_logits(walk.relation_logits(questions[rows], relations), targets[rows])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 100 == 0 or step == config.steps - 1:
            losses.append(loss.item())
    return losses


def pretrain_walk(
    walk: GatedWalk,
    samples: Sequence[Sample],
    val_samples: Sequence[Sample],
    relations: Mapping[str, int],
    relation_vectors: torch.Tensor,
    encoder: TextEncoder,
    paths: Mapping[str, Sequence[Sequence[str]]],
    config: GatePretrainConfig,
) -> dict[str, Any]:
    """Fit ``walk``'s gates (in place) on the relation paths of ``samples``; report what happened.

    Args:
        walk: The retriever's walk module.
        samples: The pretraining questions (subgraphs not needed).
        val_samples: Held-out questions to measure gate accuracy on (their answers give their
            paths; nothing of them is trained on).
        relations: Relation name → row of ``relation_vectors`` (the retriever's tables).
        relation_vectors: Relation text embeddings.
        encoder: Embeds the question texts.
        paths: The relation paths of each question of ``samples`` and ``val_samples`` that has any
            (computed by the job: :func:`rg.jobs.weak_labels.voted_paths`).
        config: The pretraining settings.

    Raises:
        ValueError: if no pretraining question has a relation path.
    """
    started = time.perf_counter()
    fitted = [s for s in samples if s.id in paths]
    held_out = [s for s in val_samples if s.id in paths]
    if not fitted:
        raise ValueError(
            f"none of the {len(samples)} walk_pretrain questions has an answer-F1 relation path on labels.weak.kb; "
            "check that the KB holds their topics and answers"
        )

    def tensors(chosen: Sequence[Sample]) -> tuple[torch.Tensor, torch.Tensor]:
        vectors = torch.as_tensor(encoder.encode([s.question for s in chosen]), dtype=torch.float32)
        return vectors, gate_target_tensor([paths[s.id] for s in chosen], relations, walk.steps)

    questions, targets = tensors(fitted)
    losses = fit_gates(walk, questions, relation_vectors, targets, config)
    walk.eval()
    with torch.no_grad():
        train_accuracy = step_accuracy(walk.relation_logits(questions, relation_vectors), targets)
        val_accuracy, by_hops = float("nan"), {}
        if held_out:
            val_questions, val_targets = tensors(held_out)
            val_logits = walk.relation_logits(val_questions, relation_vectors)
            val_accuracy = step_accuracy(val_logits, val_targets)
            for hops in sorted({s.hops for s in held_out if s.hops is not None}):
                rows = torch.tensor([s.hops == hops for s in held_out])
                by_hops[str(hops)] = step_accuracy(val_logits[rows], val_targets[rows])
    return {
        "questions": len(samples),
        "with_paths": len(fitted),
        "val_questions_with_paths": len(held_out),
        "steps": config.steps,
        "losses": losses,
        "train_step_accuracy": train_accuracy,
        "val_step_accuracy": val_accuracy,
        "val_step_accuracy_by_hops": by_hops,
        "seconds": time.perf_counter() - started,
    }
