"""Chain merging (ReG stage S(II)): multi-answer, unanchored and multi-entity.

* :func:`merge_answers`: walks with the same source and relation path (directions included)
  but different ends become one :class:`EvidenceChain` with several ends.
* :func:`unanchored_chains`: retrieved triples that no topic walk uses become one-step chains;
  with merging, triples sharing an entity and a relation in one orientation are merged
  greedily (largest group first), so ``(m1, genre, Drama), (m2, genre, Drama)`` reads
  ``Drama ← [genre] ← {m1 | m2}``. Every triple lands in exactly one chain.
* :func:`merge_entities`: chains from different topic entities whose ends overlap are placed
  together in an :class:`EvidenceGroup`, each restricted to the shared ends (the candidates
  both topics support) where their walks first meet; the walks of a member that end elsewhere
  stay as a separate chain, so no walk is lost or shown twice.
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from typing import Sequence

from rg.data.sample import Triple
from rg.evidence.chains import EvidenceChain, EvidenceGroup, EvidenceItem, Walk, item_sort_key
from rg.graph import Path


def merge_answers(walks: Sequence[Walk], *, anchored: bool, merge: bool = True) -> list[EvidenceChain]:
    """Group walks by ``(source, relation path)`` into chains (first-seen order of the keys).

    Args:
        walks: The walks to merge.
        anchored: Whether the walks start at topic entities (stored on each chain).
        merge: False makes one chain per walk (no merging).

    Returns:
        The chains; within a chain the walks are sorted by :meth:`Walk.sort_key`.
    """
    if not merge:
        return [EvidenceChain((w,), anchored) for w in walks]
    groups: dict[tuple[str, tuple[str, ...]], list[Walk]] = defaultdict(list)
    for walk in walks:
        groups[(walk.source, walk.path.relation_path)].append(walk)
    return [EvidenceChain(tuple(sorted(ws, key=Walk.sort_key)), anchored) for ws in groups.values()]


def triple_walk(triples: Sequence[Triple], scores: Sequence[float], tid: int, forward: bool = True) -> Walk:
    """The one-step walk over triple ``tid``: ``h → [r] → t``, or ``t ← [r] ← h`` backwards."""
    head, relation, tail = triples[tid]
    ends = (head, tail) if forward else (tail, head)
    return Walk(Path(ends, (relation,), (forward,), (tid,)), (scores[tid],))


def unanchored_chains(
    triples: Sequence[Triple], scores: Sequence[float], tids: Sequence[int], *, merge: bool = True
) -> list[EvidenceChain]:
    """One-step chains over the triples ``tids`` that no topic walk used.

    With ``merge``, each triple can join the group of its head (``h → [r] → {t1 | t2}``) or of
    its tail (``t ← [r] ← {h1 | h2}``); groups are taken largest first (ties: first seen, heads
    before tails), each taking its triples not yet taken. A group left with one triple renders
    it forward, as stored.

    Returns:
        Chains with ``anchored=False``; together they hold every triple of ``tids`` once.
    """
    if not merge:
        return [EvidenceChain((triple_walk(triples, scores, t),), anchored=False) for t in tids]
    members: dict[tuple[str, str, bool], list[int]] = {}
    for tid in tids:
        head, relation, tail = triples[tid]
        members.setdefault((head, relation, True), []).append(tid)
        if tail != head:
            members.setdefault((tail, relation, False), []).append(tid)
    order = {key: i for i, key in enumerate(members)}
    heap = [(-len(ts), order[key], key) for key, ts in members.items()]
    heapq.heapify(heap)
    taken: set[int] = set()
    chains: list[EvidenceChain] = []
    while heap:
        neg_size, rank, key = heapq.heappop(heap)
        remaining = [t for t in members[key] if t not in taken]
        if not remaining:
            continue
        if len(remaining) < -neg_size:  # lost triples to a larger group: queue at its new size
            heapq.heappush(heap, (-len(remaining), rank, key))
            continue
        taken.update(remaining)
        forward = key[2] or len(remaining) == 1
        walks = sorted((triple_walk(triples, scores, t, forward) for t in remaining), key=Walk.sort_key)
        chains.append(EvidenceChain(tuple(walks), anchored=False))
    return chains


def _passed_on_the_way(chain: EvidenceChain) -> dict[str, frozenset[str]]:
    """End → the entities strictly between the source and that end, over the chain's walks."""
    passed: dict[str, set[str]] = defaultdict(set)
    for walk in chain.walks:
        passed[walk.end].update(walk.path.entities[1:-1])
    return {end: frozenset(entities) for end, entities in passed.items()}


def merge_entities(chains: Sequence[EvidenceChain]) -> list[EvidenceItem]:
    """Place chains from different topic entities with overlapping ends together.

    Greedy, in :func:`item_sort_key` order: each chain not yet grouped seeds a group and takes,
    in the same order, every chain from a source not yet in the group whose ends overlap the
    group's shared ends (which shrink to the intersection). Each chain joins at most one group.
    An end counts as shared only where the walks first *meet* there: walks that already passed
    a common entity (both topics reach person P, then P's spouse) meet at P, and the group on
    the spouse would only repeat that meeting one step further.

    Args:
        chains: Anchored chains (after :func:`merge_answers`).

    Returns:
        Groups (members restricted to the shared ends), then each member's walks ending outside
        the shared ends as a chain, then the chains no group took. Unsorted; the caller orders.
    """
    if len({c.source for c in chains}) < 2:
        return list(chains)
    order = sorted(range(len(chains)), key=lambda i: item_sort_key(chains[i]))
    ends = [set(c.ends) for c in chains]
    passed = [_passed_on_the_way(c) for c in chains]
    used: set[int] = set()
    items: list[EvidenceItem] = []
    for seed in order:
        if seed in used:
            continue
        members, shared, sources = [seed], ends[seed], {chains[seed].source}
        for other in order:
            if other in used or chains[other].source in sources:
                continue
            common = {e for e in shared & ends[other]
                      if all(passed[m][e].isdisjoint(passed[other][e]) for m in members)}
            if common:
                members.append(other)
                shared = common
                sources.add(chains[other].source)
        if len(members) == 1:
            continue
        used.update(members)
        restricted = [c for c in (chains[m].restrict(shared) for m in members) if c is not None]
        order_of_ends = restricted[0].ends
        items.append(EvidenceGroup(tuple(c.ordered_by_ends(order_of_ends) for c in restricted)))
        for m in members:
            rest = chains[m].restrict(ends[m] - shared)
            if rest is not None:
                items.append(rest)
    items.extend(chains[i] for i in order if i not in used)
    return items
