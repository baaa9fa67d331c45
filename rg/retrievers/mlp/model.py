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
from torch import nn
from torch_geometric.utils import scatter

from rg.retrievers.base import Retriever
from rg.retrievers.features import EntityText, topic_one_hot
from rg.retrievers.graphs import EmbeddingTables, GraphBatch
from rg.retrievers.mlp.config import MLPConfig
from rg.retrievers.walk import GatedWalk

SCORE_BLOCK = 2048
"""Triples per block when scoring without gradients (2048 × 256 floats = 2 MiB, cache-sized)."""


def distinct(ids: torch.Tensor, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The distinct values of ``ids`` in ``[0, size)``, ascending, and every value's row among them.

    Same values as ``torch.unique(ids)``, found with a presence mask instead of a sort (linear in
    ``len(ids) + size``). ``rank[v]`` is the row of ``v`` in ``values`` for each ``v`` in ``ids``
    (meaningless for values absent from ``ids``).

    Shapes:
        ids: (N,) -> values: (U,), rank: (size,)
    """
    present = torch.zeros(size, dtype=torch.bool, device=ids.device)
    present[ids] = True
    values = present.nonzero().squeeze(1)  # (U,)
    rank = torch.cumsum(present, 0) - 1  # (size,)
    return values, rank


def mean_neighbours(x: torch.Tensor, src: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
    """Mean of ``x`` over each node's in-neighbours along the edges ``src → dst``.

    Every edge counts once (parallel triples count as many times as they occur); a node with
    no incoming edge gets zeros.

    Shapes:
        x: (E, C); src, dst: (T,) -> (E, C)
    """
    return scatter(x[src], dst, dim=0, dim_size=x.shape[0], reduce="mean")  # (E, C)


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
        ``[fwd_1, ..., fwd_rounds, bwd_1, ..., bwd_rounds, und_1, ...]`` concatenated.

    Shapes:
        topic: (E,); head, tail: (T,) -> (E, 2 * (2 * rounds + undirected_rounds))
    """
    one_hot = topic_one_hot(topic)  # (E, 2)
    both = (torch.cat([head, tail]), torch.cat([tail, head]))  # (2T,), (2T,)
    encodings = []
    for (src, dst), count in (((head, tail), rounds), ((tail, head), rounds), (both, undirected_rounds)):
        x = one_hot
        for _ in range(count):
            x = mean_neighbours(x, src, dst)  # (E, 2)
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
    many triples is projected once and the projections are gathered per triple (an entity's text
    row once per batch and side, however many questions' subgraphs hold the entity, and only on
    the side, head or tail, where some triple of the batch uses it: on MetaQA, films are heads
    and people, genres and years tails, which halves the text projection). This is the
    same function as ``self.head(self.input(self.triple_inputs(batch, tables)))`` (a test
    checks it) at a fraction of the cost, since a batch has far fewer distinct entities,
    relations and questions than triples.

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
        return self._scores(self._projections(batch, tables), batch)

    def loss(self, batch: GraphBatch, tables: EmbeddingTables) -> torch.Tensor:
        """The triple BCE, plus ``walk_loss`` × the walk's gate supervision (:meth:`GatedWalk.supervision_loss`).

        Raises:
            ValueError: if the batch has no labels.
        """
        loss = super().loss(batch, tables)
        if self.walk is None or self.config.walk_loss == 0:
            return loss
        return loss + self.config.walk_loss * self.walk.supervision_loss(batch, tables, self.config.pos_weight)

    def _scores(self, parts: "_Projections", batch: GraphBatch) -> torch.Tensor:
        """Triple logits from the shared projections (training: one pass; inference: blocks).

        Shapes:
            batch: T triples -> (T,)
        """
        total = int(batch.head.numel())
        if torch.is_grad_enabled() or self.training:
            return self.head(self._hidden(parts, batch, 0, total)).squeeze(1)  # (T,)
        # inference: the per-triple half is memory-bound, so it runs over cache-sized blocks with
        # the sums built in place in one buffer and the output layer applied in the same pass
        out_layer = self.head[-1]
        weight, bias = out_layer.weight[0], out_layer.bias  # (H,), (1,)
        scores = parts.questions.new_empty(total)  # (T,)
        buffer = parts.questions.new_empty(min(SCORE_BLOCK, total), self.config.hidden)  # (S, H)
        for begin in range(0, total, SCORE_BLOCK):
            end = min(begin + SCORE_BLOCK, total)
            rows = self._hidden(parts, batch, begin, end, out=buffer[: end - begin])  # (S, H)
            torch.addmv(bias, rows.relu_(), weight, out=scores[begin:end])
        return scores

    def _projections(self, batch: GraphBatch, tables: EmbeddingTables) -> "_Projections":
        """The first layer applied to every row that triples share (see the class docstring)."""
        dim, width = self.config.text_dim, self.config.entity_dim
        w_q, w_h, w_r, w_t, w_f = self.input.weight.split([dim, width, dim, width, self.config.flow_dim], dim=1)
        # text ids shifted by one so that unnamed entities (-1) get a row of their own
        text = batch.entity_text + 1  # (E,)
        size = int(tables.entities.shape[0]) + 1
        sides = []
        for ends, weight in ((batch.head, w_h), (batch.tail, w_t)):
            used = torch.zeros_like(batch.topic, dtype=torch.bool)  # (E,)
            used[ends] = True
            texts, rank = distinct(text[used], size)  # (U_side,), (size,)
            sides.append((self.entity_text(tables, texts - 1) @ weight[:, :dim].T, rank[text]))  # (U_side, H), (E,)
        relations, rank = distinct(batch.rel, int(tables.relations.shape[0]))  # (R_b,), (R,)
        (text_head, head_row), (text_tail, tail_row) = sides
        structure, flows = self.structure(batch, tables)  # (E, C), (T, 2S)
        return _Projections(
            questions=tables.questions[batch.question] @ w_q.T + self.input.bias,  # (B, H)
            text_head=text_head,  # (U_h, H)
            text_tail=text_tail,  # (U_t, H)
            head_row=head_row,
            tail_row=tail_row,
            relations=tables.relations[relations] @ w_r.T,  # (R_b, H)
            rel_of_triple=rank[batch.rel],
            structure=structure,
            flows=flows,
            w_structure=torch.cat([w_h[:, dim:], w_t[:, dim:], w_f], dim=1),  # (H, 2C + 2S)
        )

    @staticmethod
    def _hidden(
        parts: "_Projections", batch: GraphBatch, begin: int, end: int, out: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Pre-activation hidden rows of triples ``begin:end``, in place into ``out`` when given.

        Shapes:
            -> (end - begin, H)
        """
        heads, tails = batch.head[begin:end], batch.tail[begin:end]  # (S,), (S,)
        structure = torch.cat(
            [parts.structure[heads], parts.structure[tails], parts.flows[begin:end]], dim=1
        )  # (end - begin, 2C + 2S)
        gathered = (
            (parts.questions, batch.triple_graph[begin:end]),
            (parts.text_head, parts.head_row[heads]),
            (parts.relations, parts.rel_of_triple[begin:end]),
            (parts.text_tail, parts.tail_row[tails]),
        )
        if out is None:
            total = structure @ parts.w_structure.T  # (S, H)
            for table, rows in gathered:
                total = total + table[rows]
            return total
        torch.mm(structure, parts.w_structure.T, out=out)
        for table, rows in gathered:
            out.add_(table.index_select(0, rows))
        return out


@dataclass(frozen=True)
class _Projections:
    """First-layer projections of one batch's shared rows (:meth:`MLPRetriever._projections`)."""

    questions: torch.Tensor  # (B, H), bias included
    text_head: torch.Tensor  # (U_h, H): distinct texts of the entities that are heads
    text_tail: torch.Tensor  # (U_t, H): ... that are tails
    head_row: torch.Tensor  # (E,): each entity's row of text_head (where it is a head)
    tail_row: torch.Tensor  # (E,): each entity's row of text_tail (where it is a tail)
    relations: torch.Tensor  # (R_b, H)
    rel_of_triple: torch.Tensor  # (T,)
    structure: torch.Tensor  # (E, C): topic one-hot, DDE, walk
    flows: torch.Tensor  # (T, 2S): walk flows (no columns without a walk)
    w_structure: torch.Tensor  # (H, 2C + 2S)
