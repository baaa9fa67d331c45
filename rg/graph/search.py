"""Graph search over a :class:`~rg.graph.kg.KnowledgeGraph`: k-hop subgraphs, all shortest
paths (bidirectional BFS), relation-path grounding, relation steps out of an entity set, and
multi-entity connection.

Every search expands whole frontiers with vectorised CSR gathers; only path *enumeration*
(which is output-sized) runs in Python.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import permutations, product
from typing import TYPE_CHECKING, Iterator, Literal, Sequence

import numpy as np

from rg.graph.arrays import unique_ids
from rg.graph.path import INVERSE_SUFFIX, Path, split_relation

if TYPE_CHECKING:
    from rg.graph.kg import KnowledgeGraph


Direction = Literal["out", "in", "both"]
CutOrder = Literal["scramble", "walk"]


@dataclass(frozen=True, eq=False)
class Subgraph:
    """A set of triples of a :class:`KnowledgeGraph` found around seed entities.

    Attributes:
        seeds: Entity ids the search started from.
        triple_ids: Triple ids in discovery order (hop by hop).
        entity_ids: Entities touched by the kept triples, plus the seeds (sorted).
        hops: The requested radius.
        truncated: True when the size cap cut the last layer short.
    """

    seeds: np.ndarray
    triple_ids: np.ndarray
    entity_ids: np.ndarray
    hops: int
    truncated: bool

    def __len__(self) -> int:
        return int(self.triple_ids.size)
OPPOSITE: dict[str, Direction] = {"out": "in", "in": "out", "both": "both"}
_SCRAMBLE = np.uint64(0x9E3779B97F4A7C15)


def k_hop(
    kg: "KnowledgeGraph",
    seeds: np.ndarray,
    hops: int,
    max_triples: int | None = None,
    direction: Direction = "both",
    cut: CutOrder = "walk",
    tie_key: np.ndarray | None = None,
) -> "Subgraph":
    """Triples met by a breadth-first search of ``hops`` rounds from the seeds.

    Round ``d`` (``0 ≤ d < hops``) takes every triple incident to an entity at distance ``d``
    from the seed set, so the result holds all walks of length ≤ ``hops`` that start at a seed.

    Args:
        kg: The graph.
        seeds: ``(S,)`` entity ids.
        hops: Number of rounds (≥ 0).
        max_triples: Optional cap. Whole rounds are kept while they fit; the round that would
            overflow is cut to the remaining budget (in the order ``cut`` names), and the
            search stops.
        direction: Which triples an entity expands through (``both`` for undirected reach).
        cut: Which triples of the overflowing round are kept. ``scramble``: a fixed
            pseudo-random order of triple ids (deterministic, not biased towards file order).
            ``walk``: the triples a random walk from the seeds is likeliest to take next, i.e.
            by ``m(u) / deg(u)`` of the frontier entity ``u`` they leave from. ``m(u)`` is the
            probability that a walk starting uniformly on the seeds, taking an incident triple
            uniformly at random at each step, stands on ``u`` after ``d`` steps having moved
            one round outwards at every step. Ties keep the scramble order. This keeps a hub's share of the budget to what the walk gives
            it, so the few triples out of a low-degree frontier entity (the films of one
            director) are not crowded out by the thousands behind a genre or a language, as
            personalised-PageRank pruning does (GraftNet; Sun et al., 2018).
        tie_key: Optional ``(T,)`` uint64 key per triple replacing the id scramble as the
            ``scramble`` order and the ``walk`` tie-break; walk priorities are then rounded to
            12 decimals so that equal masses summed in another order still tie. Stores pass a
            key computed from triple *content* (:func:`rg.stores.base.content_keys`), so two
            stores holding one graph under different triple ids cut it identically.

    Returns:
        A :class:`Subgraph` with triple ids in round order (ids ascending within a round).

    Cost: each round is a few vectorised gathers over the incidences of its frontier. The walk
    mass is computed only for a round that overflows the cap, and a one-round search allocates
    no per-entity array, so the many small neighbourhoods a builder extracts stay cheap.
    """
    if hops < 0:
        raise ValueError(f"hops must be >= 0, got {hops}")
    if max_triples is not None and max_triples < 0:
        raise ValueError(f"max_triples must be >= 0 or None, got {max_triples}")
    if cut not in ("scramble", "walk"):
        raise ValueError(f"cut must be 'scramble' or 'walk', got {cut!r}")
    seeds = unique_ids(np.asarray(seeds, dtype=np.int64))
    # 1 + distance from the seeds (0: not reached); only searches of two rounds or more read it
    level = np.zeros(kg.num_entities if hops > 1 else 0, dtype=np.int32)
    if hops > 1:
        level[seeds] = 1
    frontier, rounds, layers, count, truncated = seeds, [], [], 0, False
    for d in range(hops):
        if frontier.size == 0:
            break
        edges, others, source = kg.incident(frontier, direction)
        if direction == "both" and d > 0:
            # An undirected triple is met again from its far end one round after it was taken;
            # that end is on the previous frontier (level d). One-way searches meet each once.
            fresh = level[others] != d
            edges, others, source = edges[fresh], others[fresh], source[fresh]
        layer = unique_ids(edges, kg.num_triples)
        if max_triples is not None and count + layer.size > max_triples:
            share = _walk_shares(kg, rounds, frontier, source, direction) if cut == "walk" else None
            layer, truncated = _cut(layer, edges, share, max_triples - count, tie_key), True
        layers.append(layer)
        count += layer.size
        if truncated or d == hops - 1:
            break
        new = level[others] == 0
        rounds.append(_Round(frontier, others[new], source[new]))
        frontier = unique_ids(rounds[-1].others, kg.num_entities)
        level[frontier] = d + 2
    tids = np.concatenate(layers) if layers else np.zeros(0, dtype=np.int64)
    ents = unique_ids(np.concatenate([seeds, kg.head[tids], kg.tail[tids]]), kg.num_entities)
    return Subgraph(seeds=seeds, triple_ids=tids, entity_ids=ents, hops=hops, truncated=truncated)


@dataclass(frozen=True)
class _Round:
    """A finished round of :func:`k_hop`: its frontier and the incidences that reached new entities.

    Shapes:
        frontier: (F,) sorted entity ids; others, source: (N,) the new entity at the far end of
        each such incidence and the frontier position it was met from
    """

    frontier: np.ndarray
    others: np.ndarray
    source: np.ndarray


def _walk_shares(
    kg: "KnowledgeGraph", rounds: list[_Round], frontier: np.ndarray, source: np.ndarray, direction: Direction
) -> np.ndarray:
    """The random-walk mass each incidence of an overflowing :func:`k_hop` round carries.

    Computed only when the walk cut happens, by replaying the finished rounds: the mass starts
    uniform on the seeds, each frontier entity splits its mass evenly over its incident triples,
    and a new entity gets the sum over the triples that reach it.

    Shapes:
        frontier: (F,) the overflowing round's frontier; source: (M,) its incidences' positions
        in it -> (M,) one share per incidence
    """
    frontiers = [r.frontier for r in rounds] + [frontier]
    mass = np.full(frontiers[0].size, 1.0 / max(frontiers[0].size, 1))
    for done, after in zip(rounds, frontiers[1:]):
        share = (mass / np.maximum(kg.degree(done.frontier, direction), 1))[done.source]
        mass = np.bincount(np.searchsorted(after, done.others), weights=share, minlength=after.size)
    return (mass / np.maximum(kg.degree(frontier, direction), 1))[source]


def _cut(
    layer: np.ndarray, edges: np.ndarray, share: np.ndarray | None, budget: int, tie_key: np.ndarray | None = None
) -> np.ndarray:
    """The ``budget`` triples of an overflowing round that :func:`k_hop` keeps.

    Without ``share`` (``cut="scramble"``), a fixed pseudo-random order of triple ids; with it
    (``cut="walk"``), the triples whose best incidence carries the most walk mass, ties in the
    pseudo-random order (``tie_key[layer]`` instead when given, with priorities rounded).

    Shapes:
        layer: (L,) sorted distinct triple ids; edges, share: (M,) each incidence and its walk
        mass (a triple met from both ends has two) -> (budget,) sorted triple ids
    """
    if tie_key is None:
        key = layer.astype(np.uint64) * _SCRAMBLE  # (L,) the fixed pseudo-random order
    else:
        key = np.asarray(tie_key, dtype=np.uint64)[layer]  # (L,) a content order shared by stores
    if share is None:
        keep = np.argsort(key, kind="stable")[:budget]
    else:
        priority = np.zeros(layer.size)
        np.maximum.at(priority, np.searchsorted(layer, edges), share)  # (L,) best incidence
        if tie_key is not None:
            priority = np.round(priority, 12)
        keep = np.lexsort((key, -priority))[:budget]
    return np.sort(layer[keep])


class _Meeting:
    """Result of a bidirectional BFS: distances from both ends and the middle layer."""

    def __init__(self, length: int, dist_s: np.ndarray, dist_t: np.ndarray, middle: np.ndarray):
        self.length = length
        self.dist_s = dist_s
        self.dist_t = dist_t
        self.middle = middle


def _bibfs(
    kg: "KnowledgeGraph", s: int, t: int, direction: Direction, max_len: int | None
) -> _Meeting | None:
    """Bidirectional BFS meeting in the middle; None when ``t`` is out of reach.

    The side with fewer incident triples expands each round. When a new layer of one side
    touches the other side's visited set, the shortest length ``L`` is final and every
    shortest path crosses the new layer at a node with ``dist_s + dist_t == L``.
    """
    back = OPPOSITE[direction]
    if s != t and (kg.degree(np.array([s]), direction)[0] == 0 or kg.degree(np.array([t]), back)[0] == 0):
        return None  # an end with no edge in the needed direction: nothing to search
    n = kg.num_entities
    ds = np.full(n, -1, dtype=np.int32)
    dt = np.full(n, -1, dtype=np.int32)
    ds[s], dt[t] = 0, 0
    if s == t:
        return _Meeting(0, ds, dt, np.array([s], dtype=np.int64))
    fs, ft = np.array([s], dtype=np.int64), np.array([t], dtype=np.int64)
    ks = kt = 0
    while fs.size and ft.size:
        if max_len is not None and ks + kt >= max_len:
            return None
        if kg.degree(fs, direction).sum() <= kg.degree(ft, back).sum():
            _, nb, _ = kg.incident(fs, direction)
            fs = unique_ids(nb[ds[nb] < 0], n)
            ks += 1
            ds[fs] = ks
            hit = fs[dt[fs] >= 0]
            if hit.size:
                length = ks + int(dt[hit].min())
                return _Meeting(length, ds, dt, hit[dt[hit] == length - ks])
        else:
            _, nb, _ = kg.incident(ft, back)
            ft = unique_ids(nb[dt[nb] < 0], n)
            kt += 1
            dt[ft] = kt
            hit = ft[ds[ft] >= 0]
            if hit.size:
                length = kt + int(ds[hit].min())
                return _Meeting(length, ds, dt, hit[ds[hit] == length - kt])
    return None


def shortest_distance(
    kg: "KnowledgeGraph", s: int, t: int, direction: Direction = "out", max_len: int | None = None
) -> int | None:
    """Length of a shortest path ``s`` → ``t`` (None when unreachable within ``max_len``)."""
    meet = _bibfs(kg, s, t, direction, max_len)
    if meet is None or (max_len is not None and meet.length > max_len):
        return None
    return meet.length


def all_shortest_paths(
    kg: "KnowledgeGraph",
    s: int,
    t: int,
    direction: Direction = "out",
    max_len: int | None = None,
    max_paths: int | None = None,
) -> list[Path]:
    """Every shortest path from ``s`` to ``t``, parallel relations as distinct paths.

    Args:
        kg: The graph.
        s, t: Entity ids.
        direction: ``out`` follows triples head → tail (the q→a orientation when ``s`` is a
            topic entity), ``in`` follows them tail → head (the a→q orientation, walked from
            ``s``), ``both`` lets each step go either way (relation paths then mix ``r`` and
            ``r^-1``, as MetaQA's "co-star" questions need).
        max_len: Ignore paths longer than this.
        max_paths: Stop after this many paths (enumeration order is deterministic).

    Returns:
        Paths sorted by their triple ids; ``[Path of length 0]`` when ``s == t``.
    """
    meet = _bibfs(kg, s, t, direction, max_len)
    if meet is None or (max_len is not None and meet.length > max_len):
        return []
    back = OPPOSITE[direction]
    pred_cache: dict[int, list[tuple[int, int]]] = {}
    succ_cache: dict[int, list[tuple[int, int]]] = {}

    def links(v: int, dist: np.ndarray, way: Direction, cache: dict) -> list[tuple[int, int]]:
        if v not in cache:
            e, other, _ = kg.incident(np.array([v]), way)
            keep = dist[other] == dist[v] - 1
            cache[v] = sorted(zip(e[keep].tolist(), other[keep].tolist()))
        return cache[v]

    def prefixes(v: int) -> Iterator[tuple[tuple[int, int, int], ...]]:
        if v == s:
            yield ()
            return
        for e, u in links(v, meet.dist_s, back, pred_cache):
            for p in prefixes(u):
                yield p + ((e, u, v),)

    def suffixes(v: int) -> Iterator[tuple[tuple[int, int, int], ...]]:
        if v == t:
            yield ()
            return
        for e, w in links(v, meet.dist_t, direction, succ_cache):
            for p in suffixes(w):
                yield ((e, v, w),) + p

    steps_list: list[tuple[tuple[int, int, int], ...]] = []
    for m in sorted(meet.middle.tolist()):
        for pre in prefixes(m):
            for suf in suffixes(m):
                steps_list.append(pre + suf)
                if max_paths is not None and len(steps_list) >= max_paths:
                    break
            else:
                continue
            break
        if max_paths is not None and len(steps_list) >= max_paths:
            break
    if not steps_list:
        steps_list = [()]  # s == t
    paths = [_to_path(kg, s, steps) for steps in steps_list]
    paths.sort(key=lambda p: p.triple_ids)
    return paths


def _to_path(kg: "KnowledgeGraph", start: int, steps: Sequence[tuple[int, int, int]]) -> Path:
    """Build a :class:`Path` from ``(triple id, from node, to node)`` steps."""
    names, rels = kg.entity_names, kg.relation_names
    nodes = [start] + [b for _, _, b in steps]
    return Path(
        entities=tuple(names[v] for v in nodes),
        relations=tuple(rels[kg.rel[e]] for e, _, _ in steps),
        forward=tuple(bool(kg.head[e] == a and kg.tail[e] == b) for e, a, b in steps),
        triple_ids=tuple(int(e) for e, _, _ in steps),
    )


def ground(
    kg: "KnowledgeGraph", start: int, relation_path: Sequence[str], max_paths: int | None = None
) -> list[Path]:
    """Every walk from ``start`` that follows ``relation_path`` step by step.

    A label ``r`` follows triples ``(x, r, y)`` from ``x`` to ``y``; ``r^-1`` follows them from
    ``y`` to ``x``. Walks may revisit entities (a co-star walk can return to the start).

    Args:
        kg: The graph.
        start: Entity id.
        relation_path: Relation labels, ``rel^-1`` for a backward step.
        max_paths: Keep at most this many partial walks after each step.

    Returns:
        Walks in the order of their triple ids; empty when a relation is unknown or the walk
        dies out.
    """
    cur = np.array([start], dtype=np.int64)
    chosen: list[np.ndarray] = []
    parents: list[np.ndarray] = []
    fwd_flags: list[bool] = []
    for label in relation_path:
        rel, fwd = split_relation(label)
        if not kg.has_relation(rel):
            return []
        rid = kg.relation_id(rel)
        edges, others, src = kg.incident(cur, "out" if fwd else "in")
        keep = kg.rel[edges] == rid
        edges, others, src = edges[keep], others[keep], src[keep]
        if max_paths is not None:
            edges, others, src = edges[:max_paths], others[:max_paths], src[:max_paths]
        if edges.size == 0:
            return []
        chosen.append(edges)
        parents.append(src)
        fwd_flags.append(fwd)
        cur = others
    paths = []
    names, rels = kg.entity_names, kg.relation_names
    for leaf in range(cur.size):
        tids, i = [], leaf
        for step in range(len(chosen) - 1, -1, -1):
            tids.append(int(chosen[step][i]))
            i = int(parents[step][i])
        tids.reverse()
        nodes = [start] + [
            int(kg.tail[e] if f else kg.head[e]) for e, f in zip(tids, fwd_flags)
        ]
        paths.append(
            Path(
                entities=tuple(names[v] for v in nodes),
                relations=tuple(rels[kg.rel[e]] for e in tids),
                forward=tuple(fwd_flags),
                triple_ids=tuple(tids),
            )
        )
    paths.sort(key=lambda p: p.triple_ids)
    return paths


def connect_all(
    kg: "KnowledgeGraph", topics: np.ndarray, max_len: int, max_paths: int | None = None
) -> list[Path]:
    """Shortest walks of length ≤ ``max_len`` that pass through every topic entity.

    Two topics: all shortest paths between them (bidirectional BFS meeting in the middle,
    edges in either direction). More topics: the visiting orders with the smallest total
    length, each walk a concatenation of shortest segments between consecutive topics. This is
    the exploration seed for multi-entity questions (PrivGemo).

    Returns:
        Walks sorted by triple ids; empty when fewer than two distinct topics or no walk fits.
    """
    order_kept = list(dict.fromkeys(int(x) for x in np.asarray(topics).tolist()))
    if len(order_kept) < 2:
        return []
    segments: dict[tuple[int, int], list[Path]] = {}

    def segment(a: int, b: int) -> list[Path]:
        if (a, b) not in segments:
            if (b, a) in segments:
                segments[(a, b)] = [p.reversed() for p in segments[(b, a)]]
            else:
                segments[(a, b)] = all_shortest_paths(kg, a, b, "both", max_len, max_paths)
        return segments[(a, b)]

    best: list[tuple[int, ...]] = []
    best_len = max_len + 1
    for order in permutations(order_kept):
        if order[0] > order[-1]:
            continue  # a walk and its reverse are the same connection
        parts = [segment(a, b) for a, b in zip(order, order[1:])]
        if any(not p for p in parts):
            continue
        total = sum(len(p[0]) for p in parts)
        if total > max_len:
            continue
        if total < best_len:
            best, best_len = [order], total
        elif total == best_len:
            best.append(order)
    walks: list[Path] = []
    for order in best:
        parts = [segment(a, b) for a, b in zip(order, order[1:])]
        for combo in product(*parts):
            walk = combo[0]
            for nxt in combo[1:]:
                walk = walk.then(nxt)
            walks.append(walk)
            if max_paths is not None and len(walks) >= max_paths:
                break
        if max_paths is not None and len(walks) >= max_paths:
            break
    walks.sort(key=lambda p: p.triple_ids)
    return walks


def relation_steps(kg: "KnowledgeGraph", frontier: np.ndarray) -> list[tuple[str, np.ndarray]]:
    """Every relation label leaving an entity set, with the set it reaches.

    A triple followed from its head gives the label ``r``, one followed from its tail
    ``r^-1``; each label appears once, with the sorted unique entity ids its triples reach from
    ``frontier``. Labels come forward first, then inverse, each in relation-id order. Expanding
    these sets label by label enumerates the relation paths from a set of start entities with
    the walk semantics of :func:`ground` (walks may revisit entities).

    Shapes:
        frontier: (N,) entity ids -> [(label, (M_label,) entity ids)]
    """
    out = []
    for direction, suffix in (("out", ""), ("in", INVERSE_SUFFIX)):
        edges, others, _ = kg.incident(frontier, direction)
        if edges.size == 0:
            continue
        rels = kg.rel[edges]
        order = np.argsort(rels, kind="stable")
        rels, others = rels[order], others[order]
        cuts = np.flatnonzero(rels[1:] != rels[:-1]) + 1
        firsts = np.concatenate(([0], cuts))
        for rel, group in zip(rels[firsts].tolist(), np.split(others, cuts)):
            out.append((str(kg.relation_names[rel]) + suffix, np.unique(group)))
    return out


def path_step_triples(
    kg: "KnowledgeGraph", starts: np.ndarray, relation_path: Sequence[str], through_starts: bool = True
) -> list[np.ndarray]:
    """Per step of ``relation_path``, the triples that step uses on a complete walk from ``starts``.

    A forward pass keeps, per step, the triples that follow the step's label from the set
    reached so far; a backward pass then keeps only those whose far end continues to the end
    of the path. Step ``i`` of the result equals the union of ``triple_ids[i]`` over the walks
    :func:`ground` finds from every start with no walk cap, at the cost of one frontier
    expansion per step (walk enumeration can grow as the product of the fan-outs).

    Args:
        kg: The graph.
        starts: Start entity ids.
        relation_path: Relation labels, ``rel^-1`` for a backward step.
        through_starts: False drops walks that come back to a start entity before their last
            step (X → director ← X → X's writer is not a walk of "the films that share X's
            director"); the last step may still end at one.

    Shapes:
        starts: (S,) entity ids -> [len(relation_path) × (M_i,) sorted unique triple ids]
        (all empty if the path dies out)
    """
    empty = [np.zeros(0, dtype=np.int64) for _ in relation_path]
    starts = np.unique(np.asarray(starts, dtype=np.int64))
    frontier = starts
    steps: list[tuple[np.ndarray, np.ndarray, bool]] = []  # per step: triple ids, their far ends, forward?
    for label in relation_path:
        rel, fwd = split_relation(label)
        if not kg.has_relation(rel) or frontier.size == 0:
            return empty
        edges, others, _ = kg.incident(frontier, "out" if fwd else "in")
        keep = kg.rel[edges] == kg.relation_id(rel)
        steps.append((edges[keep], others[keep], fwd))
        frontier = np.unique(others[keep])
        if not through_starts and len(steps) < len(relation_path):
            frontier = np.setdiff1d(frontier, starts, assume_unique=True)
    if not steps or frontier.size == 0:
        return empty
    kept: list[np.ndarray] = []
    alive = frontier  # entities from which the rest of the path completes
    for edges, ends, fwd in reversed(steps):
        on_walk = edges[np.isin(ends, alive)]
        kept.append(unique_ids(on_walk))
        alive = np.unique(kg.head[on_walk] if fwd else kg.tail[on_walk])
    return kept[::-1]


def path_end_walks(
    kg: "KnowledgeGraph", start: int, relation_path: Sequence[str], through_starts: bool = False
) -> list[Path]:
    """One walk of ``relation_path`` from ``start`` per entity it ends at (``start`` excluded).

    The ends are those of :func:`path_step_triples` (all complete walks, none enumerated); each
    end's walk is picked backwards from it, taking at every step the lowest-id triple on a
    complete walk that continues to the part already picked. With ``through_starts`` False
    (the default) no walk comes back to ``start`` before its last step.

    Returns:
        Walks ordered by the id of their last triple (so ends follow graph order).
    """
    steps = path_step_triples(kg, np.array([start]), relation_path, through_starts)
    if not steps or steps[-1].size == 0:
        return []
    forward = [split_relation(label)[1] for label in relation_path]

    def near(tids: np.ndarray, fwd: bool) -> np.ndarray:
        return kg.head[tids] if fwd else kg.tail[tids]

    def far(tids: np.ndarray, fwd: bool) -> np.ndarray:
        return kg.tail[tids] if fwd else kg.head[tids]

    last = steps[-1]  # sorted ids: the first triple reaching an end is its lowest-id one
    ends, first = np.unique(far(last, forward[-1]), return_index=True)
    keep = ends != start
    chosen = [last[first[keep]]]  # per walk, backwards: the triple of each step
    for i in range(len(steps) - 2, -1, -1):
        wanted = near(chosen[-1], forward[i + 1])  # the entity each walk stands on before step i + 1
        options = steps[i]
        reach, lowest = np.unique(far(options, forward[i]), return_index=True)
        chosen.append(options[lowest[np.searchsorted(reach, wanted)]])
    chosen.reverse()
    names, rels = kg.entity_names, kg.relation_names
    walks = []
    for w in np.argsort(chosen[-1], kind="stable"):
        tids = [int(step[w]) for step in chosen]
        entities = [str(names[near(np.array([tids[0]]), forward[0])[0]])]
        entities += [str(names[far(np.array([t]), f)[0]]) for t, f in zip(tids, forward)]
        walks.append(Path(tuple(entities), tuple(str(rels[kg.rel[t]]) for t in tids), tuple(forward), tuple(tids)))
    return walks


def path_triples(kg: "KnowledgeGraph", starts: np.ndarray, relation_path: Sequence[str]) -> np.ndarray:
    """The triples on any complete walk of ``relation_path`` from ``starts`` (all steps of
    :func:`path_step_triples`), without enumerating walks.

    Shapes:
        starts: (S,) entity ids -> (M,) sorted unique triple ids (empty if the path dies out)
    """
    steps = path_step_triples(kg, starts, relation_path)
    return unique_ids(np.concatenate(steps)) if steps else np.zeros(0, dtype=np.int64)
