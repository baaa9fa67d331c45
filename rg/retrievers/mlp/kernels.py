"""Fused CPU loops (numba) for the MLP retriever: triple scoring and the DDE.

Without gradients on the CPU, the per-triple half of the MLP forward moves memory for little
arithmetic: each triple sums four rows of the batch's projection table, adds the projection of
its structural columns, applies ReLU and the output layer. As torch ops, every step is its own
pass over a (block, H) buffer, and the structural columns are first gathered into a (T, K)
copy. :func:`score_triples` does all of it in one loop, four triples at a time (so each weight
row of the structural projection is loaded once per four triples), reading the structural
columns straight from the entity table through each triple's ends. :func:`dde` computes every
DDE round, one pass over the edges each, in one call, and :func:`distinct` finds a batch's
distinct ids without the torch version's several passes. All three compute what the torch code in
:mod:`rg.retrievers.mlp.model` computes (tests compare them); only the order of the float
additions differs.

Each entry point is compiled for one signature (C-contiguous float32 / int64 / bool arrays, which
the wrappers guarantee) when this module is imported, and numba caches the machine code on disk.
So a process pays the compilation, or the cache load (about half a second, most of it numba's
code generator starting up), at import rather than inside its first forward pass or training
epoch. A cold cache takes numba several seconds per function.
"""

from __future__ import annotations

import numba
import numpy as np
import torch

GROUP = 4
"""Triples whose hidden rows are updated together by each structural weight row."""

CHUNK = 256
"""Triples per parallel task."""

_FLAGS = {"reassoc", "contract", "nsz"}  # vectorised sums, fused multiply-adds, ReLU of -0; NaN and inf kept

_F1, _F2 = numba.float32[::1], numba.float32[:, ::1]
_I1, _I2 = numba.int64[::1], numba.int64[:, ::1]
_SCORE = numba.void(_F2, _I2, _F2, _I1, _I1, _F2, _F2, _F1, numba.float32, _F1)


@numba.njit(fastmath=_FLAGS, cache=True, nogil=True)
def _score_range(shared, rows, node, head, tail, flows, weight, out_weight, bias, out, start, stop):  # pragma: no cover
    hidden, columns, extra = shared.shape[1], node.shape[1], flows.shape[1]
    acc = np.empty((GROUP, hidden), np.float32)
    for first in range(start, stop, GROUP):
        size = min(GROUP, stop - first)
        for i in range(size):  # the sum of the triple's four table rows
            t = first + i
            a, b, c, d = shared[rows[t, 0]], shared[rows[t, 1]], shared[rows[t, 2]], shared[rows[t, 3]]
            row = acc[i]
            for h in range(hidden):
                row[h] = a[h] + b[h] + c[h] + d[h]
        if size == GROUP:  # head and tail columns: each weight row pair loaded once for four triples
            h0, h1, h2, h3 = head[first], head[first + 1], head[first + 2], head[first + 3]
            t0, t1, t2, t3 = tail[first], tail[first + 1], tail[first + 2], tail[first + 3]
            r0, r1, r2, r3 = acc[0], acc[1], acc[2], acc[3]
            for k in range(columns):
                w, v = weight[k], weight[columns + k]
                x0, x1, x2, x3 = node[h0, k], node[h1, k], node[h2, k], node[h3, k]
                y0, y1, y2, y3 = node[t0, k], node[t1, k], node[t2, k], node[t3, k]
                for h in range(hidden):
                    p, q = w[h], v[h]  # loaded once: the stores below could alias them
                    r0[h] += x0 * p + y0 * q
                    r1[h] += x1 * p + y1 * q
                    r2[h] += x2 * p + y2 * q
                    r3[h] += x3 * p + y3 * q
        else:
            for i in range(size):
                t, row = first + i, acc[i]
                for k in range(columns):
                    w, v = weight[k], weight[columns + k]
                    x, y = node[head[t], k], node[tail[t], k]
                    for h in range(hidden):
                        row[h] += x * w[h] + y * v[h]
        for i in range(size):  # the walk's flows (none without walk_steps), then ReLU and the output layer
            t, row = first + i, acc[i]
            for k in range(extra):
                x, w = flows[t, k], weight[2 * columns + k]
                for h in range(hidden):
                    row[h] += x * w[h]
            total = np.float32(0)
            for h in range(hidden):
                total += max(row[h], np.float32(0)) * out_weight[h]
            out[t] = total + bias


# Two entry points, each its own function so that numba caches them apart. With one torch thread
# (a Ray worker's usual share) the serial one runs: it starts no thread pool and releases the GIL
# (Ray Train runs the training function in a thread; holding the GIL there made 2-worker epochs
# 2.5x slower). The parallel one keeps the GIL: releasing it made the forward 20% slower here.
@numba.njit(_SCORE, fastmath=_FLAGS, cache=True, nogil=True)
def _score_serial(shared, rows, node, head, tail, flows, weight, out_weight, bias, out):  # pragma: no cover
    _score_range(shared, rows, node, head, tail, flows, weight, out_weight, bias, out, 0, rows.shape[0])


@numba.njit(_SCORE, parallel=True, fastmath=_FLAGS, cache=True)
def _score_parallel(shared, rows, node, head, tail, flows, weight, out_weight, bias, out):  # pragma: no cover
    triples = rows.shape[0]
    for chunk in numba.prange((triples + CHUNK - 1) // CHUNK):
        start = chunk * CHUNK
        stop = min(start + CHUNK, triples)
        _score_range(shared, rows, node, head, tail, flows, weight, out_weight, bias, out, start, stop)


@numba.njit(numba.void(numba.boolean[::1], _I1, _I1, numba.int64, numba.int64, _F2), cache=True, nogil=True)
def _dde(topic, head, tail, rounds, undirected_rounds, out):  # pragma: no cover - compiled
    entities, triples = topic.shape[0], head.shape[0]
    x, y = np.empty((entities, 2), np.float32), np.empty((entities, 2), np.float32)
    inverse = np.empty(entities, np.float32)
    column = 0
    for direction, steps in ((0, rounds), (1, rounds), (2, undirected_rounds)):  # h→t, t→h, both
        if steps == 0:
            continue
        inverse[:] = 0
        for e in range(triples):  # in-degrees along this direction
            if direction != 1:
                inverse[tail[e]] += 1
            if direction != 0:
                inverse[head[e]] += 1
        for n in range(entities):
            inverse[n] = np.float32(1) / max(inverse[n], np.float32(1))
            x[n, 0] = np.float32(1) if topic[n] else np.float32(0)
            x[n, 1] = np.float32(1) - x[n, 0]
        for _ in range(steps):
            y[:] = 0
            if direction != 1:  # every edge h→t, in triple order
                for e in range(triples):
                    y[tail[e], 0] += x[head[e], 0]
                    y[tail[e], 1] += x[head[e], 1]
            if direction != 0:  # then every edge t→h
                for e in range(triples):
                    y[head[e], 0] += x[tail[e], 0]
                    y[head[e], 1] += x[tail[e], 1]
            for n in range(entities):
                x[n, 0] = y[n, 0] * inverse[n]
                x[n, 1] = y[n, 1] * inverse[n]
                out[n, column] = x[n, 0]
                out[n, column + 1] = x[n, 1]
            column += 2


@numba.njit(_I1(_I1, numba.int64, _I1), cache=True, nogil=True)
def _distinct(ids, size, inverse):  # pragma: no cover - compiled
    present = np.zeros(size, np.bool_)
    for i in range(ids.shape[0]):
        present[ids[i]] = True
    rank = np.empty(size, np.int64)
    count = 0
    for v in range(size):  # present values in ascending order get rows 0, 1, ...
        if present[v]:
            rank[v] = count
            count += 1
    values = np.empty(count, np.int64)
    for v in range(size):
        if present[v]:
            values[rank[v]] = v
    for i in range(ids.shape[0]):
        inverse[i] = rank[ids[i]]
    return values


def supported(*tensors: torch.Tensor) -> bool:
    """Whether the kernels can take these tensors: on the CPU, float32 where float, and no
    autograd graph to record (none needs a gradient, or gradients are off)."""
    grad = torch.is_grad_enabled()
    return all(
        t.device.type == "cpu"
        and t.dtype in (torch.float32, torch.int64, torch.bool)
        and not (grad and t.requires_grad)
        for t in tensors
    )


def _threads() -> int:
    """As many threads as torch uses (within numba's pool): set for numba's parallel loops, and returned."""
    threads = max(1, min(torch.get_num_threads(), numba.config.NUMBA_NUM_THREADS))
    if threads > 1:
        numba.set_num_threads(threads)
    return threads


def _array(t: torch.Tensor, dtype: torch.dtype) -> np.ndarray:
    """``t`` as a C-contiguous numpy array of ``dtype``: the one layout the loops are compiled for."""
    return t.detach().to(dtype).contiguous().numpy()


def _check_ids(name: str, ids: torch.Tensor, size: int) -> None:
    """The compiled loops do not check bounds: refuse ids outside ``[0, size)`` here.

    Raises:
        IndexError: naming the argument and the range.
    """
    if ids.numel() == 0:
        return
    low, high = (int(v) for v in torch.aminmax(ids))
    if low < 0 or high >= size:
        raise IndexError(f"{name} holds ids outside [0, {size}): min {low}, max {high}")


def score_triples(
    shared: torch.Tensor,
    rows: torch.Tensor,
    node: torch.Tensor,
    head: torch.Tensor,
    tail: torch.Tensor,
    flows: torch.Tensor,
    weight: torch.Tensor,
    out_weight: torch.Tensor,
    bias: torch.Tensor,
) -> torch.Tensor:
    """``relu(Σ shared[rows] + [node[head], node[tail], flows] @ weight.T) @ out_weight + bias`` per triple.

    Shapes:
        shared: (N, H); rows: (T, 4); node: (E, C); head, tail: (T,); flows: (T, F);
        weight: (H, 2C + F); out_weight: (H,); bias: (1,) -> (T,)

    Raises:
        ValueError: if the shapes disagree; IndexError: if an id is out of range.
    """
    triples = rows.shape[0]
    per_triple = head.shape == tail.shape == (triples,) and flows.shape[0] == triples
    if rows.dim() != 2 or rows.shape[1] != 4 or not per_triple:
        raise ValueError(
            f"score_triples needs rows (T, 4), head and tail (T,), flows (T, F); got rows {tuple(rows.shape)}, "
            f"head {tuple(head.shape)}, tail {tuple(tail.shape)}, flows {tuple(flows.shape)}"
        )
    if weight.shape != (shared.shape[1], 2 * node.shape[1] + flows.shape[1]) or out_weight.shape != (shared.shape[1],):
        raise ValueError(
            f"score_triples needs weight (H, 2C + F) = ({shared.shape[1]}, {2 * node.shape[1] + flows.shape[1]}) "
            f"and out_weight (H,); got {tuple(weight.shape)} and {tuple(out_weight.shape)}"
        )
    _check_ids("rows", rows, shared.shape[0])
    _check_ids("head", head, node.shape[0])
    _check_ids("tail", tail, node.shape[0])
    out = np.empty(rows.shape[0], dtype=np.float32)
    threads = _threads()
    (_score_parallel if threads > 1 else _score_serial)(
        _array(shared, torch.float32), _array(rows, torch.int64), _array(node, torch.float32),
        _array(head, torch.int64), _array(tail, torch.int64), _array(flows, torch.float32),
        _array(weight.T, torch.float32), _array(out_weight, torch.float32), np.float32(bias.item()), out,
    )
    return torch.from_numpy(out)


def dde(
    topic: torch.Tensor, head: torch.Tensor, tail: torch.Tensor, rounds: int, undirected_rounds: int
) -> torch.Tensor:
    """The directional distance encoding of :func:`rg.retrievers.mlp.model.dde`, every round in one call.

    Shapes:
        topic: (E,); head, tail: (T,) -> (E, 2 * (2 * rounds + undirected_rounds))

    Raises:
        IndexError: if an entity id is out of range.
    """
    _check_ids("head", head, topic.shape[0])
    _check_ids("tail", tail, topic.shape[0])
    out = np.empty((topic.shape[0], 2 * (2 * rounds + undirected_rounds)), dtype=np.float32)
    _dde(_array(topic, torch.bool), _array(head, torch.int64), _array(tail, torch.int64), rounds, undirected_rounds, out)
    return torch.from_numpy(out)


def distinct(ids: torch.Tensor, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The distinct values of ``ids`` in ``[0, size)``, ascending, and each id's row among them
    (:func:`rg.retrievers.mlp.model.distinct`).

    Shapes:
        ids: (N,) -> values: (U,), inverse: (N,)

    Raises:
        IndexError: if an id is outside ``[0, size)``.
    """
    _check_ids("ids", ids, size)
    inverse = np.empty(ids.shape[0], dtype=np.int64)
    values = _distinct(_array(ids, torch.int64), size, inverse)
    return torch.from_numpy(values), torch.from_numpy(inverse)
