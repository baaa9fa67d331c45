"""Graph retrievers: question subgraph tensors, the Retriever base, MLP-DDE, PNA and a registry.

The names below are imported on first use (PEP 562), so that importing a sibling package such as
:mod:`rg.retrievers.planner` (the Serve Hand, the dual tower's local Brain) does not pay for
PyTorch Geometric, which only the MLP and PNA retrievers need.
"""

from __future__ import annotations

import importlib
from typing import Any

_HOMES = {
    "rg.retrievers.base": ("CheckpointMeta", "Ranked", "Retriever", "RetrieverConfig", "rank_triples", "read_meta",
                           "triple_bce"),
    "rg.retrievers.graphs": ("EmbeddingTables", "GraphBatch", "QuestionGraph", "collate"),
    "rg.retrievers.mlp": ("MLPConfig", "MLPRetriever"),
    "rg.retrievers.pna": ("MergedEdge", "PNAConfig", "PNARetriever", "degree_histogram", "merge_parallel"),
    "rg.retrievers.registry": ("REGISTRY", "LoadedRetriever", "RetrieverSpec", "UnknownRetrieverError",
                               "build_retriever", "load_retriever", "retriever_config", "retriever_spec"),
}
_HOME_OF = {name: module for module, names in _HOMES.items() for name in names}

__all__ = sorted(_HOME_OF)


def __getattr__(name: str) -> Any:
    module = _HOME_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'rg.retrievers' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
