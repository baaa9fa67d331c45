"""Typed configs of the KG stores: ``kg: {kind: memory, ...}`` or ``kg: {kind: sparql, ...}``.

Stores live in ``rg/stores`` rather than inside ``rg/graph`` because the graph engine imports
nothing else from rg, while a store needs the typed configs (:mod:`rg.config`), the KB readers
(:mod:`rg.data.sources`) and an HTTP client; the stores depend on the engine, never the reverse.
"""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import Field, field_validator

from rg.config import Config
from rg.data.sources import KBSource

FREEBASE_NS = "http://rdf.freebase.com/ns/"


class MemoryStoreConfig(Config):
    """The whole KG read into this process (:class:`~rg.stores.memory.MemoryStore`)."""

    kind: Literal["memory"] = "memory"
    kb: KBSource = Field(description="The KB file to load.")


class SparqlStoreConfig(Config):
    """A SPARQL 1.1 endpoint holding a Freebase-layout KG (:class:`~rg.stores.sparql.SparqlStore`)."""

    kind: Literal["sparql"] = "sparql"
    endpoint: str = Field(description="SPARQL endpoint URL, e.g. http://127.0.0.1:8890/sparql (Virtuoso).")
    graph: str | None = Field(None, description="Named graph IRI to query; None queries the default graph.")
    namespace: str = Field(FREEBASE_NS, description="IRI prefix of entities and relations (Freebase `ns:`).")
    name_relation: str = Field("type.object.name", description="Relation (under `namespace`) holding names.")
    alias_relation: str | None = Field(
        "common.topic.alias", description="Relation (under `namespace`) holding aliases, which the linker indexes "
                                          "and the privacy guard masks; None: the KG has none.")
    name_lang: str | None = Field(None, description="Also match names tagged with this language (Freebase: en).")
    batch_size: int = Field(256, ge=1, le=5000, description="Entity ids per VALUES block (1: one query per entity).")
    timeout_s: float = Field(30.0, gt=0, description="Timeout of one HTTP attempt, in seconds.")
    max_retries: int = Field(3, ge=0, le=10, description="Retries after a failed attempt (bounded).")
    backoff_s: float = Field(0.2, ge=0, description="First retry delay; doubles each retry.")
    cache_size: int = Field(200_000, ge=0, description="Per-entity incidence lists, and names with aliases, kept (LRU each); 0 disables.")
    max_rows: int = Field(1_000_000, ge=1, description="The server's ResultSetMaxRows: a result this long is "
                                                       "treated as truncated and fails instead of being used.")

    @field_validator("endpoint")
    @classmethod
    def _http(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError(f"endpoint {value!r} is not an http(s) URL. Fix: e.g. http://127.0.0.1:8890/sparql")
        return value

    @field_validator("namespace")
    @classmethod
    def _namespace(cls, value: str) -> str:
        if not value.endswith(("/", "#")):
            raise ValueError(f"namespace {value!r} should end with '/' or '#'. Fix: e.g. {FREEBASE_NS}")
        return value


StoreConfig = Annotated[Union[MemoryStoreConfig, SparqlStoreConfig], Field(discriminator="kind")]
"""Either store config, chosen by ``kind``."""
