"""Where the endpoint's raw KG comes from (``ServeConfig.kg``): the Hand and the KG edit owner load it alike.

Kept apart from :mod:`serve.hand` so the edit owner's replica does not import the Hand's models.
"""

from __future__ import annotations

from rg.graph import KnowledgeGraph
from rg.privacy.schema import KGSchema
from rg.stores.base import KGStore
from rg.stores.config import build_store
from rg.stores.memory import MemoryStore
from serve.config import ServeConfig


def load_kg(config: ServeConfig) -> tuple[KGStore, KGSchema]:
    """The Hand's store and the KG's schema."""
    source = config.kg
    if source.synthetic is not None:
        from rg.data.synthetic import generate

        kg = generate(source.synthetic)
        store: KGStore = MemoryStore(KnowledgeGraph.from_triples(kg.triples, dedup=True))
        schema = KGSchema.build(kg.triples, kg.entity_types)
    else:
        assert source.store is not None  # checked by KGSource
        store = build_store(source.store)
        schema = None
    if source.schema_dir is not None:
        schema = KGSchema.load(source.schema_dir)
    elif schema is None:
        assert isinstance(store, MemoryStore)  # a SPARQL store needs schema_dir (checked by KGSource)
        schema = KGSchema.build(store.kg.triples())
    return store, schema
