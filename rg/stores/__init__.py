"""KG stores: the :class:`KGStore` protocol, the in-memory store and the SPARQL (Virtuoso) store.

See ``docs/stores.md``. Importing this package does not import ``requests``; the SPARQL store
and the Virtuoso control module are imported from their own modules.
"""

from rg.stores.base import KGStore, StoreError, StoreSubgraph, content_keys, path_key
from rg.stores.build import build_store
from rg.stores.config import MemoryStoreConfig, SparqlStoreConfig, StoreConfig
from rg.stores.memory import MemoryStore

__all__ = ["KGStore", "MemoryStore", "MemoryStoreConfig", "SparqlStoreConfig", "StoreConfig", "StoreError",
           "StoreSubgraph", "build_store", "content_keys", "path_key"]
