"""PNA entity retriever: question-conditioned message passing, triple score p(h) + p(t).

The entity-level retriever of ReG (Zou et al., 2025, "Weak-to-Strong GraphRAG") scores
entities with a GNN and ranks triples by their ends. The GNN is Principal Neighbourhood
Aggregation (Corso et al., 2020, "Principal Neighbourhood Aggregation for Graph Nets"), used
as :class:`torch_geometric.nn.PNA`: several aggregators (mean, min, max, std) combined with
degree scalers normalised by the training in-degree histogram ``deg``.

Edge convention (used by the forward pass *and* by :func:`degree_histogram`, so the scalers
see the degrees they were normalised with): PyG passes messages ``edge_index[0] → edge_index[1]``
and aggregates at the target. Every triple ``(h, r, t)`` gives a forward edge ``h → t``; with
``reverse_edges`` it also gives a reverse edge ``t → h``. An edge's features are the relation's
text embedding ⊕ a direction flag (``[1, 0]`` forward, ``[0, 1]`` reverse), projected once to
``hidden``. Node inputs are [entity text ⊕ topic one-hot ⊕ the embedding of the node's question],
projected to ``hidden``, so the entity scores depend on the question; with ``walk_steps`` they
also carry the values of a question-gated walk from the topic (:mod:`rg.retrievers.walk`).

Parallel relations between one pair get equal scores (``p(h) + p(t)``); merge them for prompts
with :func:`rg.retrievers.pna.merge.merge_parallel`.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn
from torch_geometric.nn import PNA
from torch_geometric.utils import degree, scatter

from rg.retrievers.base import Retriever, RetrieverConfig, triple_bce
from rg.retrievers.features import TOPIC_COLUMNS, EntityText, topic_one_hot
from rg.retrievers.graphs import EmbeddingTables, GraphBatch, QuestionGraph
from rg.retrievers.pna.config import PNAConfig
from rg.retrievers.walk import GatedWalk

DIRECTION_COLUMNS = 2
"""Width of the edge direction flag: column 0 = forward (h → t), column 1 = reverse (t → h)."""


def message_edges(
    head: torch.Tensor, rel: torch.Tensor, tail: torch.Tensor, reverse_edges: bool
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The message-passing edges of a set of triples (see the module docstring).

    Args:
        head, rel, tail: The triples.
        reverse_edges: Add a ``t → h`` edge per triple after the ``h → t`` ones.

    Returns:
        ``(edge_index, edge_rel, reverse)``: source/target rows, each edge's relation row, and
        True on reverse edges.

    Shapes:
        head, rel, tail: (T,) -> (2, M), (M,), (M,) with M = T or 2T
    """
    forward = torch.stack([head, tail])  # (2, T)
    flags = torch.zeros_like(rel, dtype=torch.bool)  # (T,)
    if not reverse_edges:
        return forward, rel, flags
    edge_index = torch.cat([forward, forward.flip(0)], dim=1)  # (2, 2T)
    return edge_index, torch.cat([rel, rel]), torch.cat([flags, ~flags])


def degree_histogram(graphs: Iterable[QuestionGraph], reverse_edges: bool = True) -> tuple[int, ...]:
    """PNA's ``deg``: how many entities of ``graphs`` have each in-degree.

    In-degrees are counted with :func:`torch_geometric.utils.degree` on the targets of
    :func:`message_edges`, the edges the forward pass uses, one graph at a time (a batch is a
    disjoint union, so this equals the histogram of any batching of the same graphs).

    Args:
        graphs: The training graphs.
        reverse_edges: As in :class:`PNAConfig`.

    Returns:
        ``deg[i]`` = number of entities with in-degree ``i``.

    Raises:
        ValueError: if the graphs have no entity.
    """
    total = torch.zeros(1, dtype=torch.long)
    for g in graphs:
        edge_index, _, _ = message_edges(g.head, g.rel, g.tail, reverse_edges)
        in_degree = degree(edge_index[1], num_nodes=g.num_entities, dtype=torch.long)  # (E,)
        counts = torch.bincount(in_degree, minlength=1)
        if counts.numel() > total.numel():
            total = torch.cat([total, total.new_zeros(counts.numel() - total.numel())])
        total[: counts.numel()] += counts
    if int(total.sum()) == 0:
        raise ValueError("degree_histogram needs at least one entity in the training graphs")
    return tuple(int(c) for c in total.tolist())


class PNARetriever(Retriever):
    """Entity retriever: PNA over the question's subgraph, triple logit = p(h) + p(t).

    Args:
        config: Widths, PNA settings, edge convention, loss and the training ``deg``.

    Raises:
        ValueError: if ``config.deg`` is None (compute it from the training graphs first).

    Shapes:
        node_logits: batch with E entities -> (E,); forward: T triples -> (T,)
    """

    kind = "pna"
    config_class = PNAConfig
    config: PNAConfig

    def __init__(self, config: PNAConfig) -> None:
        super().__init__(config)
        if config.deg is None:
            raise ValueError(
                "PNAConfig.deg is None: PNA normalises its scalers by the training in-degree histogram. "
                "Fix: config = config.with_deg(degree_histogram(train_graphs, config.reverse_edges)), or "
                "build_retriever('pna', config, train_graphs=train_graphs)"
            )
        dim, hidden = config.text_dim, config.hidden
        self.entity_text = EntityText(dim)
        self.walk = GatedWalk(dim, config.walk_steps, config.walk_width) if config.walk_steps else None
        self.node_in = nn.Linear(dim + TOPIC_COLUMNS + dim + config.walk_steps, hidden)
        self.edge_in = nn.Linear(dim + DIRECTION_COLUMNS, hidden)
        self.gnn = PNA(
            in_channels=hidden,
            hidden_channels=hidden,
            num_layers=config.num_layers,
            out_channels=1,
            dropout=config.dropout,
            act="relu",
            jk="last",
            aggregators=list(config.aggregators),
            scalers=list(config.scalers),
            deg=torch.tensor(config.deg, dtype=torch.long),
            edge_dim=hidden,
            towers=config.towers,
        )

    @classmethod
    def prepare_config(cls, config: RetrieverConfig, graphs: Iterable[QuestionGraph]) -> RetrieverConfig:
        """Fill ``deg`` from the training graphs when it is not set yet."""
        if not isinstance(config, PNAConfig):
            raise TypeError(f"PNARetriever needs a PNAConfig, got {type(config).__name__}")
        if config.deg is not None:
            return config
        return config.with_deg(degree_histogram(graphs, config.reverse_edges))

    def node_logits(self, batch: GraphBatch, tables: EmbeddingTables) -> torch.Tensor:
        """The entity logit p(e) of every entity in the batch.

        Shapes:
            batch: E entities, T triples -> (E,)
        """
        question = tables.questions[batch.question][batch.entity_graph]  # (E, D)
        columns = [self.entity_text(tables, batch.entity_text), topic_one_hot(batch.topic), question]
        if self.walk is not None:
            columns.append(self.walk(batch, tables)[0])  # (E, S)
        nodes = torch.cat(columns, dim=1)  # (E, 2D + 2 + S)
        edge_index, edge_rel, reverse = message_edges(batch.head, batch.rel, batch.tail, self.config.reverse_edges)
        direction = torch.stack([~reverse, reverse], dim=1).to(nodes.dtype)  # (M, 2)
        edges = self.edge_in(torch.cat([tables.relations[edge_rel], direction], dim=1))  # (M, hidden)
        return self.gnn(self.node_in(nodes), edge_index, edge_attr=edges).squeeze(1)  # (E,)

    def forward(self, batch: GraphBatch, tables: EmbeddingTables) -> torch.Tensor:
        node = self.node_logits(batch, tables)  # (E,)
        return node[batch.head] + node[batch.tail]  # (T,)

    def loss(self, batch: GraphBatch, tables: EmbeddingTables) -> torch.Tensor:
        """Triple-level BCE on ``p(h) + p(t)`` or entity-level BCE on ``p(e)`` (``config.loss``),
        plus ``walk_loss`` × the walk's gate supervision when the walk is on.

        Entity targets: 1 for an entity that is the head or tail of a positive triple.

        Raises:
            ValueError: if the batch has no labels.
        """
        loss = self._score_loss(batch, tables)
        if self.walk is None or self.config.walk_loss == 0:
            return loss
        return loss + self.config.walk_loss * self.walk.supervision_loss(batch, tables, self.config.pos_weight)

    def _score_loss(self, batch: GraphBatch, tables: EmbeddingTables) -> torch.Tensor:
        if self.config.loss == "triple":
            return super().loss(batch, tables)
        if batch.labels is None:
            raise ValueError("loss() needs a labelled batch; build the QuestionGraphs with labels")
        group = batch.entity_graph if self.config.loss_average == "question" else None
        return triple_bce(
            self.node_logits(batch, tables), entity_targets(batch), self.config.pos_weight, group, batch.num_graphs
        )


def entity_targets(batch: GraphBatch) -> torch.Tensor:
    """1 for every entity at either end of a positive triple, else 0.

    Shapes:
        batch: E entities, T labelled triples -> (E,)
    """
    if batch.labels is None:
        raise ValueError("entity_targets needs a labelled batch")
    labels = batch.labels.to(torch.float32)
    ends = torch.cat([batch.head, batch.tail])  # (2T,)
    return scatter(torch.cat([labels, labels]), ends, dim=0, dim_size=batch.num_entities, reduce="max")  # (E,)
