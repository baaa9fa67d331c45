"""Helpers for the store tests: loading a graph into a running Virtuoso."""

from __future__ import annotations

from pathlib import Path

from rg.graph import KnowledgeGraph
from rg.stores.config import SparqlStoreConfig
from rg.stores.ntriples import write_ntriples
from rg.stores.sparql import SparqlStore
from rg.stores.virtuoso import VirtuosoServer


def load_graph(server: VirtuosoServer, kg: KnowledgeGraph, graph: str, folder: Path, aliases=None,
               **store_args) -> SparqlStore:
    """Export ``kg`` (with ``aliases``: entity string → aliases) to N-Triples, load it as named graph ``graph``
    and return a store over it."""
    path = folder / (graph.rsplit("/", 1)[-1] + ".nt")
    write_ntriples(kg, path, "http://rdf.freebase.com/ns/", aliases=aliases)
    server.load([path], graph)
    return SparqlStore(SparqlStoreConfig(endpoint=server.endpoint, graph=graph, **store_args))
