"""PNA entity retriever (ReG's entity level): config, model and parallel-relation merging."""

from rg.retrievers.pna.config import PNAConfig
from rg.retrievers.pna.merge import MergedEdge, merge_parallel
from rg.retrievers.pna.model import PNARetriever, degree_histogram, entity_targets, message_edges

__all__ = [
    "MergedEdge",
    "PNAConfig",
    "PNARetriever",
    "degree_histogram",
    "entity_targets",
    "merge_parallel",
    "message_edges",
]
