"""Entity input features shared by the triple (MLP-DDE) and entity (PNA) retrievers.

Both follow SubgraphRAG (Li et al., 2024, "Simple is Effective: The Roles of Graphs and LLMs in
Knowledge-Graph-Based Retrieval-Augmented Generation"): a named entity is represented by the
text embedding of its name, an unnamed one (a Freebase ``m.``/``g.`` id, e.g. a CVT node) by
one learned vector shared by all such nodes, and every entity carries a two-column topic
one-hot.
"""

from __future__ import annotations

import torch
from torch import nn

from rg.retrievers.graphs import EmbeddingTables

TOPIC_COLUMNS = 2
"""Width of the topic one-hot: column 0 = is a topic entity, column 1 = is not."""


def topic_one_hot(topic: torch.Tensor) -> torch.Tensor:
    """The two-column topic indicator of each entity.

    Args:
        topic: Bool flags, True for topic entities.

    Returns:
        Float rows ``[1, 0]`` for topic entities and ``[0, 1]`` for the others.

    Shapes:
        topic: (E,) -> (E, 2)
    """
    is_topic = topic.to(torch.float32)
    return torch.stack([is_topic, 1.0 - is_topic], dim=1)  # (E, 2)


class EntityText(nn.Module):
    """Text embedding of each entity, with a learned shared vector for unnamed entities.

    Args:
        dim: Width D of the text embeddings.

    Shapes:
        tables.entities: (N_e, D); entity_text: (E,) rows, -1 for unnamed -> (E, D)
    """

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.unnamed = nn.Parameter(torch.randn(dim) * 0.02)

    def forward(self, tables: EmbeddingTables, entity_text: torch.Tensor) -> torch.Tensor:
        if tables.entities.shape[0] == 0:  # every entity of the dataset is unnamed
            return self.unnamed.expand(entity_text.shape[0], -1)  # (E, D)
        rows = tables.entities.index_select(0, entity_text.clamp(min=0))  # (E, D), a fresh tensor
        unnamed = entity_text < 0
        rows[unnamed] = self.unnamed.to(rows.dtype)  # one pass over the unnamed rows only
        return rows  # (E, D)
