"""Compiled loops (numba) for the structure sanitiser: personalised PageRank's power iterations.

A working subgraph of a few thousand triples makes each of PageRank's 40 iterations five numpy
passes (gather, multiply, ``bincount``, scale, add), and the calls cost more than the arithmetic.
:func:`spread_rounds` does every iteration in one call, adding each edge's share in edge order
and rounding each step as the numpy form does, so its scores equal
:func:`rg.privacy.structure.personalised_pagerank`'s numpy form bit for bit (a test compares them).

The entry point is compiled for one signature (C-contiguous int64 / float64 arrays) when this
module is imported, and numba caches the machine code on disk: a process pays the compilation,
or the cache load, at import rather than inside its first question.
"""

from __future__ import annotations

import numba
import numpy as np

_I1, _F1 = numba.int64[::1], numba.float64[::1]


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
    as_int = lambda a: np.ascontiguousarray(a, dtype=np.int64)  # noqa: E731
    as_float = lambda a: np.ascontiguousarray(a, dtype=np.float64)  # noqa: E731
    return _rounds(as_int(src), as_int(dst), as_float(share), as_float(back), np.array(start, dtype=np.float64),
                   float(restart), int(iterations))
