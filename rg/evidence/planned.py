"""Evidence from a path planner's decoded relation paths instead of a BFS over top triples.

A relation-path planner (ReG@Path, RoG's planning step) says *which walks* answer a question,
not only which triples matter. :func:`build_evidence` rebuilds walks from triple scores by a
BFS that keeps the shortest walk per (topic, end) and may take a triple against the direction
the planner decoded it in; then an answer can be credited through the wrong end of a triple,
and the topic's own neighbours, one step away, shadow the same entities reached by the decoded
three-step walks. Here the walks are the decoded paths' own groundings, so every chain reads
exactly as a decoded path: for each path with share ``p`` of the planner's belief (a softmax
over the beams) and each topic entity, one walk per entity the path ends at
(:meth:`KnowledgeGraph.path_end_walks`: walks do not return to the topic before their last
step, and an end that is the topic itself is no answer), carrying ``log p`` at every step.

Read with the retriever-score reader's ``walk_score: last``, an entity scores the log share of
the best decoded path that ends at it with ``aggregate: max`` (what the MetaQA config uses), or
``log Σ p`` over those paths with ``aggregate: logsumexp`` at τ = 1: the ends of the grounded
paths are the candidates, as in RoG, ranked by the planner's belief instead of an LLM. The
evidence triples are those on the chosen walks, with their retriever scores for display.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from rg.data.sample import Triple
from rg.evidence.build import Evidence, assemble_evidence
from rg.evidence.chains import Walk
from rg.evidence.config import EvidenceConfig
from rg.evidence.expand import check_scores
from rg.graph import KnowledgeGraph, Path

PlannedPaths = Sequence[tuple[tuple[str, ...], float]]
"""Decoded relation paths with their share of the planner's belief (shares sum to at most 1)."""


def planned_evidence(
    triples: Sequence[Triple],
    scores: Sequence[float] | None,
    topics: Sequence[str],
    paths: PlannedPaths,
    config: EvidenceConfig | None = None,
) -> Evidence:
    """Evidence chains from the groundings of decoded relation paths.

    Args:
        triples: All triples of the question's graph.
        scores: Their retriever scores (kept for display; None: all 0).
        topics: The question's topic entities (those absent from ``triples`` are ignored).
        paths: Decoded relation paths and their shares; paths with no share, or longer than
            ``config.max_length``, are left out.
        config: Merging switches (``keep_unanchored`` has nothing to keep here).

    Returns:
        Evidence over the triples of the chosen walks (re-indexed), one walk per (path, topic,
        end), each step scored ``log share``.
    """
    config = config if config is not None else EvidenceConfig()
    triples = tuple(tuple(t) for t in triples)  # type: ignore[misc]
    values = check_scores(triples, scores)
    kg = KnowledgeGraph.from_triples(triples)
    found = tuple(t for t in dict.fromkeys(topics) if kg.has_entity(t))
    grounded: list[tuple[Path, float]] = []
    for relation_path, share in paths:
        if share <= 0 or not relation_path or len(relation_path) > config.max_length:
            continue
        for topic in found:
            grounded += [(walk, math.log(share)) for walk in kg.path_end_walks(topic, relation_path)]
    used = sorted({t for walk, _ in grounded for t in walk.triple_ids})
    index = {t: i for i, t in enumerate(used)}
    walks = [
        Walk(Path(w.entities, w.relations, w.forward, tuple(index[t] for t in w.triple_ids)), (value,) * len(w))
        for w, value in grounded
    ]
    kept = tuple(triples[t] for t in used)
    entities = {e for h, _r, t in kept for e in (h, t)}
    topics_kept = tuple(t for t in found if t in entities)
    return assemble_evidence(kept, tuple(values[t] for t in used), topics_kept, walks, config, walk_source="planned")
