"""Evidence chains (ReG stage S(II)): retrieved triples → BFS chains → merging → prompt lines.

ReG (Zou et al. 2025, "Weak-to-Strong GraphRAG") reorganises the triples a retriever returns
for a question into chains that start at the question's topic entities, merges chains that
differ only in their answers or that reach the same answers from different topic entities, and
gives the reader those lines instead of a bag of triples.
"""

from rg.evidence.build import Evidence, EvidenceStats, build_evidence, top_k_triples, triple_evidence
from rg.evidence.chains import (
    EvidenceChain,
    EvidenceGroup,
    EvidenceItem,
    Walk,
    item_chains,
    item_sort_key,
    render_entity_set,
)
from rg.evidence.config import EvidenceConfig
from rg.evidence.expand import adjacency, drop_detours, drop_mirrored, expand_walks, unused_triples
from rg.evidence.merge import merge_answers, merge_entities, unanchored_chains

__all__ = [
    "Evidence",
    "EvidenceChain",
    "EvidenceConfig",
    "EvidenceGroup",
    "EvidenceItem",
    "EvidenceStats",
    "Walk",
    "adjacency",
    "build_evidence",
    "drop_detours",
    "drop_mirrored",
    "expand_walks",
    "item_chains",
    "item_sort_key",
    "merge_answers",
    "merge_entities",
    "render_entity_set",
    "top_k_triples",
    "triple_evidence",
    "unanchored_chains",
    "unused_triples",
]
