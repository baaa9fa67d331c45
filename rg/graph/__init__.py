"""Knowledge-graph engine: vocabularies, CSR adjacency, paths and graph search."""

from rg.graph.kg import Direction, KnowledgeGraph, Subgraph
from rg.graph.path import INVERSE_SUFFIX, Path, inverse, split_relation

__all__ = ["Direction", "INVERSE_SUFFIX", "KnowledgeGraph", "Path", "Subgraph", "inverse", "split_relation"]
