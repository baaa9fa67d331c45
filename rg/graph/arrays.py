"""Vectorised integer-array helpers shared by the graph structure and the searches."""

from __future__ import annotations

import numpy as np


def unique_ids(values: np.ndarray, universe: int | None = None) -> np.ndarray:
    """Sorted distinct values of a non-negative integer array.

    Small arrays are sorted and compared (about 10× faster than ``np.unique`` on numpy 2.x,
    which takes a hash-table path for these id arrays). When ``universe`` (an upper bound on
    the values) is given and the array is large relative to it, a boolean mask over the
    universe is cheaper than sorting.
    """
    if values.size <= 1:
        return values.copy()
    if universe is not None and values.size * 16 > universe:
        mask = np.zeros(universe, dtype=bool)
        mask[values] = True
        return np.flatnonzero(mask)
    s = np.sort(values)
    keep = np.empty(s.size, dtype=bool)
    keep[0] = True
    np.not_equal(s[1:], s[:-1], out=keep[1:])
    return s[keep]


def gather(
    ptr: np.ndarray, idx: np.ndarray, nodes: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Concatenate ``idx[ptr[v]:ptr[v+1]]`` for every ``v`` in ``nodes`` without a Python loop.

    Returns:
        ``(values, source)``: the gathered triple ids and, per value, the position in
        ``nodes`` it came from.
    """
    if nodes.size == 1:
        v = int(nodes[0])
        vals = idx[ptr[v] : ptr[v + 1]]
        return vals, np.zeros(vals.size, dtype=np.int64)
    starts = ptr[nodes]
    counts = ptr[nodes + 1] - starts
    total = int(counts.sum())
    if total == 0:
        return idx[:0], np.zeros(0, dtype=np.int64)
    source = np.repeat(np.arange(nodes.size, dtype=np.int64), counts)
    offsets = (starts - (np.cumsum(counts) - counts))[source]
    return idx[np.arange(total, dtype=np.int64) + offsets], source
