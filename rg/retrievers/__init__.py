"""Graph retrievers: question subgraph tensors, the Retriever base, MLP-DDE, PNA and a registry."""

from rg.retrievers.base import (
    CheckpointMeta,
    Ranked,
    Retriever,
    RetrieverConfig,
    rank_triples,
    read_meta,
    triple_bce,
)
from rg.retrievers.graphs import EmbeddingTables, GraphBatch, QuestionGraph, collate
from rg.retrievers.mlp import MLPConfig, MLPRetriever
from rg.retrievers.pna import MergedEdge, PNAConfig, PNARetriever, degree_histogram, merge_parallel
from rg.retrievers.registry import (
    REGISTRY,
    LoadedRetriever,
    RetrieverSpec,
    UnknownRetrieverError,
    build_retriever,
    load_retriever,
    retriever_config,
    retriever_spec,
)

__all__ = [
    "REGISTRY",
    "CheckpointMeta",
    "EmbeddingTables",
    "GraphBatch",
    "LoadedRetriever",
    "MLPConfig",
    "MLPRetriever",
    "MergedEdge",
    "PNAConfig",
    "PNARetriever",
    "QuestionGraph",
    "Ranked",
    "Retriever",
    "RetrieverConfig",
    "RetrieverSpec",
    "UnknownRetrieverError",
    "build_retriever",
    "collate",
    "degree_histogram",
    "load_retriever",
    "merge_parallel",
    "rank_triples",
    "read_meta",
    "retriever_config",
    "retriever_spec",
    "triple_bce",
]
