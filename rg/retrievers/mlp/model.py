"""MLP-DDE triple retriever from SubgraphRAG.

Li et al., 2024, "Simple is Effective: The Roles of Graphs and LLMs in Knowledge-Graph-Based
Retrieval-Augmented Generation" (SubgraphRAG). Each triple ``(h, r, t)`` of a question's
subgraph is scored independently by a two-layer MLP over ``[q, h, r, t]``: the question
embedding, the two entity features and the relation embedding. Structure enters through the
entity features, which carry *directional distance encodings* (DDE): the topic one-hot diffused
along the triples for a few rounds, once in their direction and once against it, so a
triple's score can depend on how far (and which way) its ends lie from the topic entities.

Unlike the reference code, which scores one question per forward pass, this scores a whole
:class:`GraphBatch` at once; the DDE respects question boundaries because a batch is a
disjoint union of the questions' graphs.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from rg.retrievers.base import Retriever
from rg.retrievers.features import EntityText, topic_one_hot
from rg.retrievers.graphs import EmbeddingTables, GraphBatch
from rg.retrievers.mlp import kernels
from rg.retrievers.mlp.config import MLPConfig
from rg.retrievers.walk import GatedWalk

SCORE_BLOCK = 2048
"""Triples per block when scoring without gradients (2048 × 256 floats = 2 MiB, cache-sized)."""


def distinct(ids: torch.Tensor, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The distinct values of ``ids`` in ``[0, size)``, ascending, and each id's row among them.

    Same as ``torch.unique(ids, return_inverse=True)``, found with a presence mask instead of a
    sort (linear in ``len(ids) + size``); on the CPU one compiled pass (:func:`kernels.distinct`).

    Shapes:
        ids: (N,) -> values: (U,), inverse: (N,)
    """
    if kernels.supported(ids):
        return kernels.distinct(ids, size)
    present = torch.zeros(size, dtype=torch.bool, device=ids.device)
    present[ids] = True
    values = present.nonzero().squeeze(1)  # (U,)
    rank = torch.cumsum(present, 0) - 1  # (size,)
    return values, rank.index_select(0, ids)


def linear(
    inputs: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, out: torch.Tensor | None = None
) -> torch.Tensor:
    """``inputs @ weight.T (+ bias)``, written into ``out`` when given.

    Shapes:
        inputs: (N, D); weight: (H, D); bias: (H,) -> (N, H)
    """
    if bias is None:
        return torch.mm(inputs, weight.T, out=out)
    return torch.addmm(bias, inputs, weight.T, out=out)


def inverse_in_degree(dst: torch.Tensor, size: int) -> torch.Tensor:
    """One over each node's number of incoming edges (1 for nodes without any).

    Shapes:
        dst: (T,) -> (size,)
    """
    return torch.bincount(dst, minlength=size).clamp_(min=1).reciprocal()


def mean_neighbours(
    x: torch.Tensor, src: torch.Tensor, dst: torch.Tensor, inverse_degree: torch.Tensor | None = None
) -> torch.Tensor:
    """Mean of ``x`` over each node's in-neighbours along the edges ``src → dst``.

    Every edge counts once (parallel triples count as many times as they occur); a node with
    no incoming edge gets zeros. ``inverse_degree`` (one over each node's in-degree, 1 where it
    is 0) can be passed when several rounds share the edges.

    Shapes:
        x: (E, C); src, dst: (T,); inverse_degree: (E,) -> (E, C)
    """
    if inverse_degree is None:
        inverse_degree = inverse_in_degree(dst, x.shape[0])  # (E,)
    total = x.new_zeros(x.shape).index_add_(0, dst, x.index_select(0, src))  # (E, C)
    return total.mul_(inverse_degree[:, None].to(x.dtype))


def dde(
    topic: torch.Tensor, head: torch.Tensor, tail: torch.Tensor, rounds: int = 2, undirected_rounds: int = 0
) -> torch.Tensor:
    """Directional distance encoding of every entity (SubgraphRAG, DESIGN §5).

    Starting from the two-column topic one-hot, ``rounds`` rounds of mean aggregation along
    head → tail (each round's output kept), then ``rounds`` rounds along tail → head starting
    again from the one-hot. Round ``i`` along h→t says whether the node is reached by a
    directed walk of length ``i`` from a topic entity (column 0) or from a non-topic one
    (column 1), averaged over in-neighbours; t→h does the same against the edges.

    Args:
        topic: Bool topic flags.
        head, tail: Entity ids of each triple (batch-global ids work: a batch is a disjoint union).
        rounds: Rounds per direction.
        undirected_rounds: Further rounds, again from the one-hot, along every triple both ways
            (rg's addition for mixed-direction walks; 0 gives SubgraphRAG's encoding).

    Returns:
        ``[fwd_1, ..., fwd_rounds, bwd_1, ..., bwd_rounds, und_1, ...]`` concatenated. On the CPU
        (no gradient flows here) one compiled call computes them all (:func:`kernels.dde`).

    Shapes:
        topic: (E,); head, tail: (T,) -> (E, 2 * (2 * rounds + undirected_rounds))
    """
    if kernels.supported(topic, head, tail):
        return kernels.dde(topic, head, tail, rounds, undirected_rounds)
    return dde_torch(topic, head, tail, rounds, undirected_rounds)


def dde_torch(
    topic: torch.Tensor, head: torch.Tensor, tail: torch.Tensor, rounds: int = 2, undirected_rounds: int = 0
) -> torch.Tensor:
    """:func:`dde` with torch ops (any device).

    Shapes:
        topic: (E,); head, tail: (T,) -> (E, 2 * (2 * rounds + undirected_rounds))
    """
    one_hot = topic_one_hot(topic)  # (E, 2)
    encodings = []
    for direction, count in (("forward", rounds), ("backward", rounds), ("both", undirected_rounds)):
        if count == 0:
            continue
        if direction == "both":
            src, dst = torch.cat([head, tail]), torch.cat([tail, head])  # (2T,), (2T,)
        else:
            src, dst = (head, tail) if direction == "forward" else (tail, head)
        x = one_hot
        inverse_degree = inverse_in_degree(dst, x.shape[0])  # (E,)
        for _ in range(count):
            x = mean_neighbours(x, src, dst, inverse_degree)  # (E, 2)
            encodings.append(x)
    if not encodings:
        return one_hot.new_zeros(one_hot.shape[0], 0)  # (E, 0)
    return torch.cat(encodings, dim=1)  # (E, 2 * (2 * rounds + undirected_rounds))


class MLPRetriever(Retriever):
    """SubgraphRAG's triple scorer: a two-layer MLP over ``[q, h, r, t]`` with DDE features.

    Entity feature = text embedding (a learned shared vector for unnamed nodes) ⊕ topic
    one-hot ⊕ DDE (⊕ the gated walk's values with ``walk_steps``, when each triple also gets its
    walk flows; :mod:`rg.retrievers.walk`); the question embedding is broadcast to its triples.

    The first layer is one ``nn.Linear`` over the concatenation, as in SubgraphRAG, but
    :meth:`forward` applies it block by block: a question, entity text or relation row shared by
    many triples is projected once into one stacked table, and each triple sums its four rows
    there in one ``embedding_bag`` pass and adds its structural columns' projection (an entity's text
    row once per batch and side, however many questions' subgraphs hold the entity, and only on
    the side, head or tail, where some triple of the batch uses it: on MetaQA, films are heads
    and people, genres and years tails, which halves the text projection). This is the
    same function as ``self.head(self.input(self.triple_inputs(batch, tables)))`` (a test
    checks it) at a fraction of the cost, since a batch has far fewer distinct entities,
    relations and questions than triples. For inference on the CPU, the per-triple half (row
    sums, structural projection, ReLU, output layer) runs as one compiled loop
    (:func:`kernels.score_triples`); elsewhere as torch ops over cache-sized blocks.

    Args:
        config: Widths, DDE rounds, dropout and the loss's ``pos_weight``.

    Shapes:
        forward: batch with E entities and T triples, tables of width D -> (T,)
    """

    kind = "mlp"
    config_class = MLPConfig
    config: MLPConfig

    def __init__(self, config: MLPConfig) -> None:
        super().__init__(config)
        self.entity_text = EntityText(config.text_dim)
        self.walk = GatedWalk(config.text_dim, config.walk_steps, config.walk_width) if config.walk_steps else None
        self.input = nn.Linear(config.triple_dim, config.hidden)
        self.head = nn.Sequential(nn.ReLU(), nn.Dropout(config.dropout), nn.Linear(config.hidden, 1))

    def entity_features(self, batch: GraphBatch, tables: EmbeddingTables) -> torch.Tensor:
        """Text ⊕ topic one-hot ⊕ DDE ⊕ walk of every entity of the batch.

        Shapes:
            batch: E entities -> (E, F) with F = config.entity_dim
        """
        text = self.entity_text(tables, batch.entity_text)  # (E, D)
        structure, _ = self.structure(batch, tables)  # (E, F - D)
        return torch.cat([text, structure], dim=1)  # (E, F)

    def structure(self, batch: GraphBatch, tables: EmbeddingTables) -> tuple[torch.Tensor, torch.Tensor]:
        """The non-text part of every entity's feature, and every triple's walk flows.

        Entity columns: topic one-hot ⊕ DDE ⊕ the gated walk's values (when ``walk_steps``).

        Shapes:
            batch: E entities, T triples -> (E, F - D), (T, config.flow_dim)
        """
        config = self.config
        encoding = dde(batch.topic, batch.head, batch.tail, config.dde_rounds, config.undirected_rounds)  # (E, C)
        columns = [topic_one_hot(batch.topic), encoding]
        if self.walk is None:
            return torch.cat(columns, dim=1), encoding.new_zeros(batch.head.shape[0], 0)  # (E, F - D), (T, 0)
        reached, flows = self.walk(batch, tables)  # (E, S), (T, 2S)
        return torch.cat([*columns, reached], dim=1), flows  # (E, F - D), (T, 2S)

    def triple_inputs(self, batch: GraphBatch, tables: EmbeddingTables) -> torch.Tensor:
        """The explicit MLP input ``[q, h, r, t, flows]`` of every triple (reference for :meth:`forward`).

        Shapes:
            batch: T triples -> (T, config.triple_dim) = (T, 2D + 2F + 2S)
        """
        structure, flows = self.structure(batch, tables)  # (E, F - D), (T, 2S)
        entities = torch.cat([self.entity_text(tables, batch.entity_text), structure], dim=1)  # (E, F)
        question = tables.questions[batch.question][batch.triple_graph]  # (T, D)
        relation = tables.relations[batch.rel]  # (T, D)
        return torch.cat([question, entities[batch.head], relation, entities[batch.tail], flows], dim=1)

    def forward(self, batch: GraphBatch, tables: EmbeddingTables) -> torch.Tensor:
        parts = self._projections(batch, tables)
        total = int(batch.head.numel())
        if torch.is_grad_enabled() or self.training:  # training: autograd through the torch ops
            return self.head(parts.hidden(0, total)).squeeze(1)  # (T,)
        out_layer = self.head[-1]
        weight, bias = out_layer.weight[0], out_layer.bias  # (H,), (1,)
        if kernels.supported(parts.shared, parts.node, parts.flows, weight):
            return parts.scores_fused(weight, bias)
        return parts.scores_in_blocks(weight, bias)

    def loss(self, batch: GraphBatch, tables: EmbeddingTables) -> torch.Tensor:
        """The triple BCE, plus ``walk_loss`` × the walk's gate supervision (:meth:`GatedWalk.supervision_loss`).

        Raises:
            ValueError: if the batch has no labels.
        """
        loss = super().loss(batch, tables)
        if self.walk is None or self.config.walk_loss == 0:
            return loss
        return loss + self.config.walk_loss * self.walk.supervision_loss(batch, tables, self.config.pos_weight)

    def _projections(self, batch: GraphBatch, tables: EmbeddingTables) -> "_Projections":
        """The first layer applied to every row that triples share (see the class docstring).

        The question (with the bias), relation, head-text and tail-text projections are stacked
        in one table; each triple keeps its four rows there and its structural columns.
        """
        dim, width = self.config.text_dim, self.config.entity_dim
        w_q, w_h, w_r, w_t, w_f = self.input.weight.split([dim, width, dim, width, self.config.flow_dim], dim=1)
        # text ids shifted by one so that unnamed entities (-1) get a row of their own
        text = batch.entity_text + 1  # (E,)
        size = int(tables.entities.shape[0]) + 1
        relations, relation_rows = distinct(batch.rel, int(tables.relations.shape[0]))  # (R_b,), (T,)
        blocks = [
            (tables.questions.index_select(0, batch.question), w_q, batch.triple_graph),  # (B, D)
            (tables.relations.index_select(0, relations), w_r, relation_rows),  # (R_b, D)
        ]
        for ends, weight in ((batch.head, w_h), (batch.tail, w_t)):
            texts, text_rows = distinct(text.index_select(0, ends), size)  # (U_side,), (T,)
            blocks.append((self.entity_text(tables, texts - 1), weight[:, :dim], text_rows))
        sizes = [len(inputs) for inputs, _, _ in blocks]
        biases = [self.input.bias, None, None, None]  # the bias joins the question rows
        if torch.is_grad_enabled():
            shared = torch.cat([linear(inputs, weight, bias) for (inputs, weight, _), bias in zip(blocks, biases)])
        else:  # projected straight into the stacked table
            shared = blocks[0][0].new_empty(sum(sizes), self.config.hidden)  # (N, H)
            for (inputs, weight, _), bias, part in zip(blocks, biases, shared.split(sizes)):
                linear(inputs, weight, bias, out=part)
        offsets = torch.tensor([0, *sizes[:-1]], device=shared.device).cumsum(0)  # (4,)
        structure, flows = self.structure(batch, tables)  # (E, C), (T, 2S)
        return _Projections(
            shared=shared,
            rows=torch.stack([rows for _, _, rows in blocks], dim=1) + offsets,  # (T, 4)
            node=structure,
            head=batch.head,
            tail=batch.tail,
            flows=flows,
            w_structure=torch.cat([w_h[:, dim:], w_t[:, dim:], w_f], dim=1),  # (H, 2C + 2S)
        )


@dataclass(frozen=True)
class _Projections:
    """First-layer projections of one batch (:meth:`MLPRetriever._projections`)."""

    shared: torch.Tensor  # (N, H): question (bias included), relation, head-text and tail-text rows
    rows: torch.Tensor  # (T, 4): each triple's question, relation, head-text and tail-text row of `shared`
    node: torch.Tensor  # (E, C): each entity's structural columns (topic one-hot, DDE, walk values)
    head: torch.Tensor  # (T,)
    tail: torch.Tensor  # (T,)
    flows: torch.Tensor  # (T, 2S): each triple's walk flows
    w_structure: torch.Tensor  # (H, 2C + 2S): the first layer's columns for [node[head], node[tail], flows]

    def structure(self, begin: int, end: int) -> torch.Tensor:
        """The structural columns ``[node[head], node[tail], flows]`` of triples ``begin:end``.

        Shapes:
            -> (end - begin, 2C + 2S)
        """
        ends = [self.node.index_select(0, ids[begin:end]) for ids in (self.head, self.tail)]
        return torch.cat([*ends, self.flows[begin:end]], dim=1)

    def hidden(self, begin: int, end: int) -> torch.Tensor:
        """Pre-activation hidden rows of triples ``begin:end``.

        One ``embedding_bag`` pass sums each triple's four shared rows; the structural columns'
        projection is added inside the matmul (in place without gradients).

        Shapes:
            -> (end - begin, H)
        """
        hidden = F.embedding_bag(self.rows[begin:end], self.shared, mode="sum")  # (S, H)
        if torch.is_grad_enabled():
            return torch.addmm(hidden, self.structure(begin, end), self.w_structure.T)
        return hidden.addmm_(self.structure(begin, end), self.w_structure.T)

    def scores_in_blocks(self, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        """Scores without gradients, with torch ops over cache-sized blocks (any device).

        The per-triple half is memory-bound, so each block is summed, activated and scored
        before the next one.

        Shapes:
            weight: (H,); bias: (1,) -> (T,)
        """
        total = int(self.rows.shape[0])
        scores = self.shared.new_empty(total)  # (T,)
        for begin in range(0, total, SCORE_BLOCK):
            end = min(begin + SCORE_BLOCK, total)
            torch.addmv(bias, self.hidden(begin, end).relu_(), weight, out=scores[begin:end])
        return scores

    def scores_fused(self, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        """The same scores from one compiled CPU loop (:func:`kernels.score_triples`).

        Shapes:
            weight: (H,); bias: (1,) -> (T,)
        """
        return kernels.score_triples(
            self.shared, self.rows, self.node, self.head, self.tail, self.flows, self.w_structure, weight, bias
        )
