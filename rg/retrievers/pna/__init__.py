"""PNA entity retriever (ReG's entity level): config, model and parallel-relation merging.

The model's names are imported on first use (PEP 562, as in :mod:`rg.retrievers`): the config and the
merging need only pydantic, so the registry can list the kind without importing PyTorch Geometric,
which only the model needs.
"""

from __future__ import annotations

import importlib
from typing import Any

from rg.retrievers.pna.config import PNAConfig
from rg.retrievers.pna.merge import MergedEdge, merge_parallel

_MODEL_NAMES = ("PNARetriever", "degree_histogram", "entity_targets", "message_edges")

__all__ = sorted(["MergedEdge", "PNAConfig", "merge_parallel", *_MODEL_NAMES])


def __getattr__(name: str) -> Any:
    if name not in _MODEL_NAMES:
        raise AttributeError(f"module 'rg.retrievers.pna' has no attribute {name!r}")
    value = getattr(importlib.import_module("rg.retrievers.pna.model"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
