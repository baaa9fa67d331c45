"""Compiled loops (numba) for the structure sanitiser: PageRank's power iterations and the pruning growth.

A working subgraph of a few thousand triples makes each of PageRank's 40 iterations five numpy
passes (gather, multiply, ``bincount``, scale, add), and the calls cost more than the arithmetic.
:func:`spread_rounds` does every iteration in one call, adding each edge's share in edge order
and rounding each step as the numpy form does, so its scores equal
:func:`rg.privacy.structure.personalised_pagerank`'s numpy form bit for bit (a test compares them).
:func:`grow_tree` is :func:`rg.privacy.structure.prune`'s best-first growth, a heap loop that costs
Python a microsecond per edge it offers (a test compares it with the loop written in Python).

The entry points are compiled for one signature each (C-contiguous int64 / float64 arrays) when
this module is imported, and numba caches the machine code on disk: a process pays the
compilation, or the cache load, at import rather than inside its first question.
"""

from __future__ import annotations

import heapq

import numba
import numpy as np

_I1, _F1 = numba.int64[::1], numba.float64[::1]


def _ints(values: object) -> np.ndarray:
    return np.ascontiguousarray(values, dtype=np.int64)


def _floats(values: object) -> np.ndarray:
    return np.ascontiguousarray(values, dtype=np.float64)


@numba.njit(numba.float64[::1](_I1, _I1, _F1, _F1, _F1, numba.float64, numba.int64), cache=True, nogil=True)
def _rounds(src, dst, share, back, score, restart, iterations):  # pragma: no cover - compiled
    n = score.shape[0]
    spread = np.empty(n)
    for _ in range(iterations):
        spread[:] = 0.0
        for e in range(src.shape[0]):
            spread[dst[e]] += score[src[e]] * share[e]
        for v in range(n):
            score[v] = back[v] + (1.0 - restart) * spread[v]
    return score


def spread_rounds(src: np.ndarray, dst: np.ndarray, share: np.ndarray, back: np.ndarray, start: np.ndarray,
                  restart: float, iterations: int) -> np.ndarray:
    """``iterations`` rounds of ``score = back + (1 - restart) * spread(score)`` from ``start``.

    ``spread`` sends ``score[src[e]] * share[e]`` along every edge ``e`` to ``dst[e]``.

    Shapes:
        src, dst, share: ``[edges]`` (int64, int64, float64).
        back, start: ``[nodes]`` float64.
        returns: ``[nodes]`` float64 (a new array).
    """
    return _rounds(_ints(src), _ints(dst), _floats(share), _floats(back), np.array(start, dtype=np.float64),
                   float(restart), int(iterations))


@numba.njit(numba.int64[::1](_I1, _I1, _I1, _F1, _I1, numba.int64), cache=True, nogil=True)
def _grow(starts, neighbours, vias, negative_score, seeds, limit):  # pragma: no cover - compiled
    kept = np.zeros(starts.shape[0] - 1, dtype=np.bool_)
    for seed in seeds:
        kept[seed] = True
    frontier = [(0.0, np.int64(0), np.int64(0))]  # typed by its first item, emptied at once
    frontier.pop()
    for seed in seeds:
        for i in range(starts[seed], starts[seed + 1]):
            if not kept[neighbours[i]]:
                heapq.heappush(frontier, (negative_score[neighbours[i]], neighbours[i], vias[i]))
    tree = np.empty(min(limit, vias.shape[0]), dtype=np.int64)
    size = 0
    while len(frontier) > 0 and size < limit:
        _, node, via = heapq.heappop(frontier)
        if kept[node]:
            continue
        kept[node] = True
        tree[size] = via
        size += 1
        for i in range(starts[node], starts[node + 1]):
            if not kept[neighbours[i]]:
                heapq.heappush(frontier, (negative_score[neighbours[i]], neighbours[i], vias[i]))
    return tree[:size].copy()


def grow_tree(starts: np.ndarray, neighbours: np.ndarray, vias: np.ndarray, negative_score: np.ndarray,
              seeds: list[int], limit: int) -> np.ndarray:
    """The edges by which nodes join, in order, growing best-first from ``seeds`` until ``limit`` joined.

    Each step takes the frontier's best (lowest ``negative_score``, then lowest node, then lowest edge)
    node not kept yet, keeps it with the edge that offered it, and offers its own edges.

    Shapes:
        starts: ``[nodes + 1]``: node ``v``'s edges are ``neighbours[starts[v]:starts[v + 1]]``.
        neighbours, vias: ``[directed edges]``: the other end, and the edge's number.
        negative_score: ``[nodes]``.
        returns: ``[joined]`` edge numbers, at most ``limit``.
    """
    return _grow(_ints(starts), _ints(neighbours), _ints(vias), _floats(negative_score), _ints(seeds), int(limit))
