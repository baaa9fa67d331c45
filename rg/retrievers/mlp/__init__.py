"""MLP-DDE triple retriever (SubgraphRAG): config and model."""

from rg.retrievers.mlp.config import MLPConfig
from rg.retrievers.mlp.model import MLPRetriever, dde, mean_neighbours

__all__ = ["MLPConfig", "MLPRetriever", "dde", "mean_neighbours"]
