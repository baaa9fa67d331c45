"""Question-gated walks: which relation path from the topic reaches each entity (an rg addition).

DDE (:func:`rg.retrievers.mlp.model.dde`) says how far an entity lies from the topic, but not
along which relations. On a 3-hop MetaQA question ("who directed the films written by the writer
of X") every film two steps from X looks the same to it, whether it shares X's writer or one of
its hundreds of actors, so the directors of all of them tie.

After TransferNet (Shi et al., 2021, "TransferNet: An Effective and Transparent Framework for
Multi-hop Question Answering over Relation Graph"), each step ``s`` of a walk from the topic
entities gets a gate per relation and direction, computed from the question:
``g_s(q, r, dir) = sigmoid(<A_{s,dir}(q), B r>)`` with ``A`` a one-hidden-layer MLP of the
question (a plain linear ``A`` scaled by ``1/sqrt(k)`` learned the per-step relations of MetaQA
questions far more slowly: 26% against 68% of steps right after 500 supervised steps). The
walk keeps, for each entity, the best product of gates over the walks of exactly ``s`` triples
that reach it (max-product, so values stay in [0, 1] and high-degree nodes are not diluted as
in a mean):
``x_0 = topic``, ``x_s(v) = max over triples u→v of g_s(r, fwd) x_{s-1}(u)`` and over triples
v→u of ``g_s(r, bwd) x_{s-1}(u)``. Each triple also carries the mass it moves at each step
(its *flow*), forward and backward. With untrained gates (all 1/2) ``x_s`` is ``2^-s`` on the
entities reached in ``s`` steps, an undirected distance encoding; training makes it relational.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import nn

from rg.retrievers.base import RetrieverConfig
from rg.retrievers.graphs import EmbeddingTables, GraphBatch


class WalkConfig(RetrieverConfig):
    """Settings of the gated walk, shared by the retrievers that can use it (MLP-DDE, PNA)."""

    walk_steps: int = Field(
        0,
        ge=0,
        description=(
            "Steps of the question-gated max-product walk from the topic (an rg addition, "
            "rg.retrievers.walk; 0 = off). Its values join each entity's features (the MLP also "
            "gets each triple's flow per step and direction); set it to the longest question (3 on MetaQA)."
        ),
    )
    walk_width: int = Field(32, gt=0, description="Rank of the question-relation gate of the walk.")
    walk_loss: float = Field(
        0.0,
        ge=0.0,
        description=(
            "Weight of the walk's gate supervision (each step's gates against the relations the "
            "labelled triples are walked along then; GatedWalk.supervision_loss) added to the loss; "
            "0 trains the gates only through the scores."
        ),
    )


class GatedWalk(nn.Module):
    """Relation gates from the question and the max-product walk they define.

    Args:
        dim: Width D of the question and relation text embeddings.
        steps: Walk length S.
        width: Rank k of the question-relation bilinear gate.
        hidden: Hidden width of the question side's MLP.

    Shapes:
        forward: batch with B questions, E entities, T triples -> entity (E, S), flows (T, 2S)
    """

    def __init__(self, dim: int, steps: int, width: int, hidden: int = 256) -> None:
        super().__init__()
        self.steps, self.width = steps, width
        self.question = nn.Sequential(nn.Linear(dim, hidden), nn.ReLU(), nn.Linear(hidden, steps * 2 * width))
        self.relation = nn.Linear(dim, width)

    def logits(self, batch: GraphBatch, tables: EmbeddingTables) -> tuple[torch.Tensor, torch.Tensor]:
        """Gate logits per question, step and direction (even columns forward), and distinct relation.

        Returns:
            The logits and each triple's column among the batch's distinct relations.

        Shapes:
            batch: B questions, T triples -> (B, 2S, R_b), (T,)
        """
        relations, inverse = torch.unique(batch.rel, return_inverse=True)  # (R_b,), (T,)
        logits = self.relation_logits(tables.questions[batch.question], tables.relations[relations])
        return logits, inverse  # (B, 2S, R_b), (T,)

    def relation_logits(self, questions: torch.Tensor, relations: torch.Tensor) -> torch.Tensor:
        """Gate logits of question and relation embeddings, per step and direction (even columns forward).

        Shapes:
            questions: (B, D); relations: (R, D) -> (B, 2S, R)
        """
        per_question = self.question(questions).view(-1, 2 * self.steps, self.width)  # (B, 2S, k)
        return torch.einsum("bsk,rk->bsr", per_question, self.relation(relations))  # (B, 2S, R)

    def gates(self, batch: GraphBatch, tables: EmbeddingTables) -> torch.Tensor:
        """Gate of every triple at every step, forward (even columns) and backward (odd columns).

        Shapes:
            batch: B questions, T triples -> (T, 2S)
        """
        logits, inverse = self.logits(batch, tables)  # (B, 2S, R_b), (T,)
        return torch.sigmoid(logits)[batch.triple_graph, :, inverse]  # (T, 2S)

    def supervision_loss(
        self, batch: GraphBatch, tables: EmbeddingTables, pos_weight: float | None = None
    ) -> torch.Tensor:
        """BCE of the gates against the steps at which the labelled triples are walked.

        A walk from the topic along the positive triples alone (:func:`gate_targets`) says which
        relation each question's path takes at each step and in which direction; every
        (question, step, direction, relation) of a relation in the question's graph is one
        target. This teaches the gates the relation path directly, not only through the scores.

        Raises:
            ValueError: if the batch has no labels.
        """
        logits, inverse = self.logits(batch, tables)  # (B, 2S, R_b), (T,)
        targets, present = gate_targets(batch, inverse, logits.shape[2], self.steps)  # (B, R_b, 2S), (B, R_b)
        weight = None if pos_weight is None else torch.tensor(pos_weight, dtype=logits.dtype, device=logits.device)
        return F.binary_cross_entropy_with_logits(
            logits.permute(0, 2, 1)[present], targets[present], pos_weight=weight
        )

    def forward(self, batch: GraphBatch, tables: EmbeddingTables) -> tuple[torch.Tensor, torch.Tensor]:
        gates = self.gates(batch, tables)  # (T, 2S)
        return walk(batch.topic, batch.head, batch.tail, gates)


def gate_targets(
    batch: GraphBatch, relation_column: torch.Tensor, num_relations: int, steps: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per question and distinct relation: is it walked at each step and direction along the labels?

    Lays the entities of the positive triples out by their distance from the topic along those
    triples (breadth first, either direction). A relation's target at step ``s`` is 1 when some
    positive triple of it leads from distance ``s - 1`` to distance ``s``, forward (head to tail)
    or backward. Stepping back towards the topic is not a target: a walk along the positives
    alone would also bounce back along each step, and teach the gates every relation at every
    later step.

    Args:
        batch: A labelled batch.
        relation_column: Each triple's column among the batch's distinct relations.
        num_relations: Number of distinct relations R_b.
        steps: Walk length S.

    Returns:
        The targets, and which (question, relation) pairs occur in the batch.

    Raises:
        ValueError: if the batch has no labels.

    Shapes:
        relation_column: (T,) -> (B, R_b, 2S), (B, R_b)
    """
    if batch.labels is None:
        raise ValueError("gate targets need a labelled batch; build the QuestionGraphs with labels")
    on_path = batch.labels.to(torch.float32)[:, None].expand(-1, 2 * steps)  # (T, 2S)
    reached, _ = walk(batch.topic, batch.head, batch.tail, on_path)  # (E, S), 0/1: reached in exactly s steps
    first = torch.cat([batch.topic[:, None], reached > 0], dim=1)  # (E, S + 1), column 0 = the topic
    unreached = steps + 1
    distance = torch.where(first.any(1), first.to(torch.int64).argmax(1), unreached)  # (E,)
    to_step = torch.arange(1, steps + 1, device=distance.device)  # (S,)
    forward = (distance[batch.head, None] == to_step - 1) & (distance[batch.tail, None] == to_step)  # (T, S)
    backward = (distance[batch.tail, None] == to_step - 1) & (distance[batch.head, None] == to_step)  # (T, S)
    flows = torch.stack([forward, backward], dim=2).flatten(1) & (batch.labels[:, None] > 0)  # (T, 2S)
    flows = flows.to(torch.float32)
    pair = batch.triple_graph * num_relations + relation_column  # (T,)
    size = batch.num_graphs * num_relations
    targets = scatter_max(flows, pair, size)  # (B * R_b, 2S)
    present = torch.zeros(size, dtype=torch.bool, device=pair.device)
    present[pair] = True
    return targets.view(batch.num_graphs, num_relations, -1), present.view(batch.num_graphs, num_relations)


def scatter_max(src: torch.Tensor, index: torch.Tensor, size: int) -> torch.Tensor:
    """Row ``i`` of the result is the maximum of the rows of ``src`` whose ``index`` is ``i``, 0 where there
    are none (PyG's ``scatter(..., reduce="max")``, on torch alone so that the MLP path does not import PyG).

    Shapes:
        src: (N, *F); index: (N,) -> (size, *F)
    """
    spread = index.view(-1, *([1] * (src.dim() - 1))).expand_as(src)
    return src.new_zeros((size, *src.shape[1:])).scatter_reduce_(0, spread, src, reduce="amax", include_self=False)


def walk(
    topic: torch.Tensor, head: torch.Tensor, tail: torch.Tensor, gates: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The max-product walk of :class:`GatedWalk` for given per-triple gates.

    Args:
        topic: Bool topic flags (the walk starts with 1 on them, 0 elsewhere).
        head, tail: Entity ids of each triple.
        gates: Column ``2s`` gates the triple forward (head → tail) at step ``s + 1``, column
            ``2s + 1`` backward (tail → head).

    Returns:
        ``(entity, flow)``: ``entity[:, s]`` is ``x_{s+1}``; ``flow[:, 2s]`` is the mass the
        triple moves forward at step ``s + 1`` (``g x_s(head)``), ``flow[:, 2s + 1]`` backward.

    Shapes:
        topic: (E,); head, tail: (T,); gates: (T, 2S) -> (E, S), (T, 2S)
    """
    x = topic.to(gates.dtype)  # (E,)
    ends = torch.cat([tail, head])  # (2T,): where forward, then backward, flows arrive
    reached, flows = [], []
    for step in range(gates.shape[1] // 2):
        forward = gates[:, 2 * step] * x[head]  # (T,)
        backward = gates[:, 2 * step + 1] * x[tail]  # (T,)
        x = scatter_max(torch.cat([forward, backward]), ends, x.shape[0])  # (E,)
        reached.append(x)
        flows.extend([forward, backward])
    if not reached:
        return gates.new_zeros(x.shape[0], 0), gates.new_zeros(head.shape[0], 0)
    return torch.stack(reached, dim=1), torch.stack(flows, dim=1)  # (E, S), (T, 2S)
