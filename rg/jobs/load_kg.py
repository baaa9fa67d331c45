"""Export a KG (synthetic, a KB file, or the union of RoG subgraphs) to N-Triples and load it
into a local Virtuoso: the library side of ``python -m jobs.load_kg``.

Writes into ``output_dir``: ``kg.nt`` (Freebase layout, :mod:`rg.stores.ntriples`),
``entity_ids.tsv`` (``m.0<hex>`` id, tab, the entity's string: the map from the in-memory
graph to the store's ids), ``privacy_schema.json`` (the KG's coarse types and relation clusters
over the store's ids: the ``kg.schema_dir`` of an endpoint that reads the store) and
``load_report.json``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, ClassVar

from pydantic import Field, model_validator

from rg.config import Config
from rg.run.integrity import write_json_atomic
from rg.data.sources import KBSource, load_kb
from rg.data.synthetic import SyntheticConfig, generate
from rg.graph import KnowledgeGraph
from rg.privacy.schema import KGSchema
from rg.stores.config import FREEBASE_NS, SparqlStoreConfig
from rg.stores.ntriples import entity_ids, write_ntriples

NT_FILE = "kg.nt"
IDS_FILE = "entity_ids.tsv"
REPORT_FILE = "load_report.json"


class VirtuosoConfig(Config):
    """The local Virtuoso to load into (:mod:`rg.stores.virtuoso`)."""

    data_dir: str = Field(description="Folder of its ini, database and log (created when missing).")
    http_port: int = Field(8890, ge=1, le=65535, description="HTTP/SPARQL port on 127.0.0.1.")
    isql_port: int = Field(1111, ge=1, le=65535, description="SQL port on 127.0.0.1 (isql-vt).")
    start: bool = Field(True, description="Start the server when it is not running.")
    timeout_s: float = Field(120.0, gt=0, description="Seconds to wait for the server to answer.")


class LoadKGConfig(Config):
    """``python -m jobs.load_kg``: one KG → N-Triples → a named graph in Virtuoso."""

    KIND: ClassVar[str] = "load_kg"

    output_dir: str = Field(description="Where kg.nt, entity_ids.tsv and load_report.json go.")
    synthetic: SyntheticConfig | None = Field(None, description="Generate the synthetic KG.")
    kb: KBSource | None = Field(None, description="A KB file (MetaQA `head|rel|tail` or tsv).")
    rog: list[str] = Field(default_factory=list, description="RoG-schema files or shard folders; the "
                                                              "union of their subgraphs is loaded.")
    graph: str = Field("http://rg.local/kg", description="Named graph IRI to load into (replaced).")
    namespace: str = Field(FREEBASE_NS, description="IRI prefix of entities and relations.")
    virtuoso: VirtuosoConfig

    @model_validator(mode="after")
    def _one_source(self) -> "LoadKGConfig":
        given = [k for k, v in (("synthetic", self.synthetic), ("kb", self.kb), ("rog", self.rog)) if v]
        if len(given) != 1:
            raise ValueError(f"set exactly one of `synthetic`, `kb`, `rog` (got {given or 'none'}). "
                             "Fix: keep the one KG source to load")
        return self

    def store_config(self) -> SparqlStoreConfig:
        """The ``kg: {kind: sparql, ...}`` config that reads the loaded graph."""
        return SparqlStoreConfig(endpoint=f"http://127.0.0.1:{self.virtuoso.http_port}/sparql", graph=self.graph,
                                 namespace=self.namespace)


def source_graph(cfg: LoadKGConfig) -> tuple[KnowledgeGraph, dict[str, str] | None]:
    """The KG the config names, exact repeats dropped (RDF graphs are sets), and its entity types when the
    source asserts them (the synthetic KG; else None: the schema derives them)."""
    if cfg.synthetic is not None:
        data = generate(cfg.synthetic)
        return KnowledgeGraph.from_triples(data.triples, dedup=True), dict(data.entity_types)
    if cfg.kb is not None:
        kg, _ = load_kb(cfg.kb)
        return KnowledgeGraph.from_triples(kg.triples(), dedup=True), None
    from rg.run.paths import resolve_data_path
    from rg.data.rog import read_rog

    triples = [t for path in cfg.rog for sample in read_rog(resolve_data_path(path)) for t in sample.triples]
    return KnowledgeGraph.from_triples(triples, dedup=True), None


def load_kg(cfg: LoadKGConfig) -> dict[str, Any]:
    """Export the KG, start Virtuoso when asked, bulk-load and verify the triple count.

    Returns:
        The report also written to ``output_dir/load_report.json``.

    Raises:
        VirtuosoError: the server is missing, down (with ``start: false``) or the load failed.
    """
    from rg.stores.virtuoso import VirtuosoError, VirtuosoServer

    out = Path(cfg.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    kg, types = source_graph(cfg)
    lines, name_edges = write_ntriples(kg, out / NT_FILE, cfg.namespace)
    ids = dict(zip(kg.entity_names.tolist(), entity_ids(kg).tolist()))
    with open(out / IDS_FILE, "w", encoding="utf-8") as f:
        for name, eid in ids.items():
            f.write(f"{eid}\t{json.dumps(str(name), ensure_ascii=False)}\n")
    KGSchema.build(kg.triples(), types).relabel(ids).save(out)
    export_s = time.perf_counter() - t0
    v = cfg.virtuoso
    server = VirtuosoServer(Path(v.data_dir), v.http_port, v.isql_port)
    if server.pid() is None:
        if not v.start:
            raise VirtuosoError(f"no Virtuoso runs from {v.data_dir}. Fix: set virtuoso.start: true or run "
                                f"python -m rg.stores.virtuoso start --data-dir {v.data_dir} ...")
        server.start(timeout=v.timeout_s)
    t1 = time.perf_counter()
    count = server.load([out / NT_FILE], cfg.graph)
    report = {"graph": cfg.graph, "endpoint": server.endpoint, "entities": kg.num_entities,
              "relations": kg.num_relations, "edges": kg.num_triples, "lines_written": lines, "name_edges_left_out": name_edges,
              "triples_in_store": count, "export_s": round(export_s, 2), "load_s": round(time.perf_counter() - t1, 2),
              "pid": server.pid(), "store_config": cfg.store_config().model_dump()}
    if count != lines:
        raise VirtuosoError(f"graph {cfg.graph} holds {count} triples after loading {lines} lines; see {server.log_path}")
    write_json_atomic(report, out / REPORT_FILE)
    return report
