"""The store a typed config describes: :func:`build_store`. Kept apart from the configs so the SPARQL store,
which reads its config, and the configs import each other in one direction."""

from __future__ import annotations

from rg.stores.base import KGStore
from rg.stores.config import MemoryStoreConfig, SparqlStoreConfig


def build_store(config: MemoryStoreConfig | SparqlStoreConfig) -> KGStore:
    """The store a config describes (a memory store loads its KB file here)."""
    if isinstance(config, SparqlStoreConfig):
        from rg.stores.sparql import SparqlStore

        return SparqlStore(config)
    from rg.data.sources import load_kb
    from rg.stores.memory import MemoryStore

    kg, _ = load_kb(config.kb)
    return MemoryStore(kg)
