"""BFS expansion of evidence walks from the topic entities (ReG stage S(II)).

ReG (Zou et al. 2025, "Weak-to-Strong GraphRAG") reorganises a question's retrieved triples
into chains before reading: starting from the triples that touch a topic entity, a chain grows
by appending a retrieved triple whose head equals the chain's current end. Here a chain may
also take a triple backwards (its tail equals the current end; the step renders with ``←``),
because questions such as "which films did X direct" walk stored triples from tail to head.

Per source (topic entity) the search is a breadth-first search over the retrieved triples,
level by level up to ``max_length`` steps:

* no entity is visited twice within a walk;
* each ``(source, end)`` pair is kept once: the shortest walk, and among the shortest the one
  with the highest summed retriever score (then the lower, i.e. better-ranked, triple ids).
  Because scores add up along a walk, extending only the kept walk of each end is exact: the
  kept walk of every entity is the best of all its shortest walks.

The walks therefore form one BFS tree per topic entity, and every entity reached is the end of
exactly one walk per source (a walk from topic B back to topic A over the very triples of a
kept walk from A to B is dropped as a mirror). Retrieved triples outside these trees (parallel
relations, cross edges, triples out of reach) are returned by :func:`unused_triples` so the
caller can keep them.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Collection, Sequence

from rg.data.sample import Triple
from rg.evidence.chains import Walk
from rg.graph import Path

Adjacency = dict[str, list[tuple[int, bool, str]]]
"""entity → ``(triple id, forward, other entity)`` for every retrieved triple touching it."""


def adjacency(triples: Sequence[Triple]) -> Adjacency:
    """Both-direction adjacency of the retrieved triples, in triple order.

    A triple ``(h, r, t)`` is an outgoing forward step of ``h`` and a backward step of ``t``;
    a self-loop is listed once (it can never extend a walk: its other end is visited).
    """
    adj: Adjacency = defaultdict(list)
    for tid, (head, _relation, tail) in enumerate(triples):
        adj[head].append((tid, True, tail))
        if tail != head:
            adj[tail].append((tid, False, head))
    return dict(adj)


def check_scores(triples: Sequence[Triple], scores: Sequence[float] | None) -> tuple[float, ...]:
    """Scores as floats aligned with ``triples`` (all 0.0 when None).

    Raises:
        ValueError: On a length mismatch, a NaN score or ``+inf`` (``-inf`` is allowed: it
            marks a triple a scorer ranks last, e.g. one no topic entity reaches).
    """
    if scores is None:
        return (0.0,) * len(triples)
    values = tuple(float(s) for s in scores)
    if len(values) != len(triples):
        raise ValueError(f"got {len(values)} scores for {len(triples)} triples; give one score per triple")
    if any(math.isnan(s) or s == math.inf for s in values):
        raise ValueError("scores contain NaN or +inf; a retriever must give every triple a finite number or -inf")
    return values


# A walk under construction: (entities, relations, forward, triple ids, summed score).
_Partial = tuple[tuple[str, ...], tuple[str, ...], tuple[bool, ...], tuple[int, ...], float]


def _better(a: _Partial, b: _Partial) -> bool:
    """Higher summed score wins; equal scores go to the lower triple-id sequence."""
    return a[4] > b[4] or (a[4] == b[4] and a[3] < b[3])


def expand_walks(
    triples: Sequence[Triple],
    scores: Sequence[float],
    topics: Sequence[str],
    max_length: int,
    adj: Adjacency | None = None,
) -> list[Walk]:
    """All kept walks from the topic entities, shortest first per source.

    Args:
        triples: The retrieved ``(head, relation, tail)`` triples; walk triple ids index them.
        scores: One retriever score per triple (checked by :func:`check_scores`).
        topics: Source entities; those not in any triple are skipped, repeats are ignored.
        max_length: Longest walk, in steps (>= 1).
        adj: A precomputed :func:`adjacency` of ``triples`` (built when None).

    Returns:
        Per source in ``topics`` order, its walks by length, then by end discovery order:
        one walk per ``(source, reached entity)`` pair, except that a walk between two topic
        entities that merely retraces an earlier walk backwards is dropped
        (:func:`drop_mirrored`).
    """
    if max_length < 1:
        raise ValueError(f"max_length must be >= 1, got {max_length}")
    adj = adjacency(triples) if adj is None else adj
    walks: list[Walk] = []
    for source in dict.fromkeys(topics):
        if source not in adj:
            continue
        reached = {source}
        frontier: list[_Partial] = [((source,), (), (), (), 0.0)]
        for _depth in range(max_length):
            best: dict[str, _Partial] = {}
            for entities, relations, forward, tids, score in frontier:
                for tid, fwd, other in adj[entities[-1]]:
                    if other in reached:  # visited on this walk, or reached sooner from source
                        continue
                    candidate = (
                        entities + (other,),
                        relations + (triples[tid][1],),
                        forward + (fwd,),
                        tids + (tid,),
                        score + scores[tid],
                    )
                    current = best.get(other)
                    if current is None or _better(candidate, current):
                        best[other] = candidate
            if not best:
                break
            reached.update(best)
            frontier = list(best.values())
            walks.extend(
                Walk(Path(e, r, f, t), tuple(scores[i] for i in t)) for e, r, f, t, _s in frontier
            )
    return drop_mirrored(walks)


def drop_mirrored(walks: Sequence[Walk]) -> list[Walk]:
    """Drop a walk whose exact reverse (same triples, from its end) was found earlier.

    Between two topic entities A and B the BFS from A may find ``A → … → B`` and the BFS from
    B the same triples backwards; the second adds no evidence and is dropped.
    """
    seen: set[tuple[str, str, tuple[int, ...]]] = set()
    kept = []
    for walk in walks:
        ids = walk.path.triple_ids
        if (walk.end, walk.source, ids[::-1]) in seen:
            continue
        seen.add((walk.source, walk.end, ids))
        kept.append(walk)
    return kept


def drop_detours(walks: Sequence[Walk], topics: Collection[str]) -> list[Walk]:
    """Drop a walk that passes through another topic entity on its way.

    With topics A and B, the BFS from A also reaches everything behind B, as ``A … B → … X``;
    B's own walk ``B → … X`` carries the same steps without the detour, and the walk that ends
    at B keeps the A–B connection. Only walks that *pass* a topic go: one that ends at a topic
    stays, since the entities on it are what joins the two topics.
    """
    topic_set = set(topics)
    return [w for w in walks if topic_set.isdisjoint(w.path.entities[1:-1])]


def unused_triples(n_triples: int, walks: Sequence[Walk]) -> tuple[int, ...]:
    """Ids of the triples no walk steps on, ascending."""
    used = {t for w in walks for t in w.path.triple_ids}
    return tuple(t for t in range(n_triples) if t not in used)
