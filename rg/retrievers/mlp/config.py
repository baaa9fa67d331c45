"""Configuration of the MLP-DDE triple retriever (SubgraphRAG)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from rg.retrievers.features import TOPIC_COLUMNS
from rg.retrievers.walk import WalkConfig


class MLPConfig(WalkConfig):
    """Settings of :class:`~rg.retrievers.mlp.model.MLPRetriever`.

    Defaults follow SubgraphRAG (Li et al., 2024): two DDE rounds per direction, a two-layer
    MLP. SubgraphRAG's hidden width equals its text width (1024 for gte-large); 256 is plenty
    for the 384-d MiniLM default and keeps CPU training fast.
    """

    kind: Literal["mlp"] = Field("mlp", description="Registry name; always 'mlp'.")
    hidden: int = Field(256, gt=0, description="Width of the MLP's hidden layer.")
    dde_rounds: int = Field(
        2,
        ge=0,
        description=(
            "Rounds of mean aggregation of the topic one-hot along head→tail, and again along "
            "tail→head (DDE width = 2 columns × 2 directions × rounds); 0 disables DDE."
        ),
    )
    undirected_rounds: int = Field(
        0,
        ge=0,
        description=(
            "Extra DDE rounds along triples in either direction (an rg addition, 0 = SubgraphRAG's DDE). "
            "Directional rounds cannot see entities reached by mixed-direction walks (MetaQA's "
            "X -starred_actors-> A <-starred_actors- film); 3 covers MetaQA's 3-hop questions."
        ),
    )
    dropout: float = Field(0.0, ge=0.0, lt=1.0, description="Dropout after the hidden layer.")

    @property
    def entity_dim(self) -> int:
        """Width of an entity feature: text ⊕ topic one-hot ⊕ DDE ⊕ walk."""
        return self.text_dim + TOPIC_COLUMNS * (1 + 2 * self.dde_rounds + self.undirected_rounds) + self.walk_steps

    @property
    def flow_dim(self) -> int:
        """Width of a triple's walk flows (forward and backward per step)."""
        return 2 * self.walk_steps

    @property
    def triple_dim(self) -> int:
        """Width of a triple input ``[q, h, r, t, flows]``."""
        return 2 * self.text_dim + 2 * self.entity_dim + self.flow_dim
