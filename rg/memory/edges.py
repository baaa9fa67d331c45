"""Edge-embedding memory and memory replay (ReMindRAG §3.2).

Every KG edge may carry a vector ``v`` (dimension of the query embedding), stored sparsely: only
edges ever touched have one, the rest are implicitly zero. After a question is answered, the
edges of the evidence actually used are *enhanced* and the other traversed edges *penalised*
(ReMindRAG Eq. 1, with the query direction ``q̂ = q/‖q‖``)::

    enhance:   v ← v + δ(‖v‖)·q̂                     (fast wake-up from 0, damped when ‖v‖ is large)
    penalise:  s = v·q̂;  if s > 0:  v ← v − δ(s)·s·q̂   (removes part of v's component along q̂)
    δ(x) = 2/π · cos(π/2 · x)

(The public ReMindRAG code subtracts one scalar from every component when penalising; here the
query component is removed, as the paper's equation says.)

*Replay* grows a subgraph from the seed entities by depth-first search: from node ``a`` to an
unvisited neighbour ``b`` over edge ``e`` when ``w = α·sim(a, b) + (1−α)·q̂·v_e > λ`` (α = 0.1,
λ = 0.55). With every vector zero, ``w ≤ α`` and nothing is replayed; one enhancement along
``q̂`` gives ``q̂·v = 2/π`` and the edge is replayed for that query and its near paraphrases.

Persistence: each changed vector is appended to a :class:`~rg.memory.sealed.SealedLog` (the edge
key and the float32 vector, encrypted); on load the last write of an edge wins; :meth:`compact`
keeps one record per edge.

KG edits (issue 59): when a fact is deleted from the KG, :meth:`EdgeMemory.forget` drops its
edge's vector and appends a zero vector as a tombstone, so neither this process nor a reload
replays a memory resting on a fact the KG no longer holds, and a fact added again later starts
from zero instead of resurrecting what was learnt about the old one.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Optional

import numpy as np
from pydantic import Field

from rg.config import Config
from rg.memory.embed import Embedder
from rg.memory.sealed import SealedLog

Edge = tuple[str, str, str]
KEY_LEN = struct.Struct(">H")


class EdgeMemoryConfig(Config):
    """Edge memory and replay (ReMindRAG defaults)."""

    alpha: float = Field(0.1, ge=0.0, le=1.0, description="α of w = α·sim(from, to) + (1−α)·q̂·v.")
    threshold: float = Field(0.55, ge=-1.0, le=2.0, description="λ: an edge is replayed when w > λ.")
    max_depth: int = Field(3, ge=1, le=8, description="Longest replayed path from a seed (hops).")
    max_edges: int = Field(256, ge=1, le=100000, description="Bound on edges one replay adds.")
    node_cache: int = Field(100_000, ge=0, description="Node-name embeddings kept between replays.")
    path: Optional[str] = Field(None, description="Sealed file of the edge vectors; None keeps them in memory only.")


def delta(x: float) -> float:
    """δ(x) = 2/π · cos(π/2 · x)."""
    return 2.0 / math.pi * math.cos(math.pi / 2.0 * x)


def unit(q: np.ndarray) -> np.ndarray:
    norm = float(np.linalg.norm(q))
    if norm == 0.0:
        raise ValueError("the query embedding is zero; it has no direction to memorise")
    return (np.asarray(q, dtype=np.float64) / norm)


def enhance(v: np.ndarray, q: np.ndarray) -> np.ndarray:
    """v + δ(‖v‖)·q̂. Shapes: v (K,), q (K,) -> (K,)."""
    return v + delta(float(np.linalg.norm(v))) * unit(q)


def penalise(v: np.ndarray, q: np.ndarray) -> np.ndarray:
    """v − δ(s)·s·q̂ with s = v·q̂ when s > 0, else v unchanged. Shapes: v (K,), q (K,) -> (K,)."""
    qh = unit(q)
    s = float(v @ qh)
    if s <= 0.0:
        return v
    return v - delta(s) * s * qh


@dataclass(frozen=True)
class Step:
    """One replayed step: the raw triple and whether it was walked head → tail."""

    edge: Edge
    forward: bool

    @property
    def label(self) -> str:
        """The relation as a walk writes it (``r^-1`` against the triple)."""
        return self.edge[1] if self.forward else self.edge[1] + "^-1"


@dataclass(frozen=True)
class Replay:
    """A replayed subgraph: the root-to-leaf paths found from each seed (each a tuple of steps)."""

    paths: tuple[tuple[Step, ...], ...]

    @property
    def edges(self) -> set[Edge]:
        return {s.edge for p in self.paths for s in p}

    def __bool__(self) -> bool:
        return bool(self.paths)


class EdgeMemory:
    """Sparse edge vectors with enhance / penalise / replay (module docstring).

    Args:
        config: Settings.
        embedder: Embeds queries and node names (its ``dim`` is the vector size).
        log: Sealed file to persist to (None: in memory only); its records are loaded.
    """

    def __init__(self, config: EdgeMemoryConfig, embedder: Embedder, log: SealedLog | None = None) -> None:
        self.config = config
        self.embedder = embedder
        self.dim = embedder.dim
        self.vectors: dict[Edge, np.ndarray] = {}
        self.log = log
        self.refused = 0
        self._node_cache: dict[str, np.ndarray] = {}
        if log is not None:
            self.refused = len(log.report.refused)
            for _, data in log.report.records:
                edge, vector = self._decode(data)
                if vector.any():
                    self.vectors[edge] = vector
                else:  # a tombstone: the edge's fact was deleted from the KG (forget)
                    self.vectors.pop(edge, None)

    # ------------------------------------------------------------------ storage
    def _encode(self, edge: Edge) -> bytes:
        key = json.dumps(list(edge), ensure_ascii=False).encode()
        return KEY_LEN.pack(len(key)) + key + self.vectors[edge].astype(np.float32).tobytes()

    def _decode(self, data: bytes) -> tuple[Edge, np.ndarray]:
        (n,) = KEY_LEN.unpack_from(data)
        h, r, t = json.loads(data[KEY_LEN.size: KEY_LEN.size + n])
        vector = np.frombuffer(data[KEY_LEN.size + n:], dtype=np.float32).astype(np.float64)
        if vector.shape != (self.dim,):
            raise ValueError(f"a stored edge vector has {vector.size} dimensions, the embedder {self.dim}. Fix: use "
                             "the embedder the memory was written with, or a new memory path")
        return (h, r, t), vector

    def _persist(self, edges: Iterable[Edge]) -> None:
        if self.log is not None:
            self.log.append_many((SealedLog.new_id(), self._encode(e)) for e in edges)

    def compact(self) -> int:
        """Rewrite the file with one record per stored edge; returns how many."""
        if self.log is None:
            return 0
        return self.log.compact((SealedLog.new_id(), self._encode(e)) for e in sorted(self.vectors))

    def bytes_per_edge(self) -> dict[str, float]:
        """Stored bytes per edge: the float32 vector and key in memory, and on disk (file / edges)."""
        n = max(len(self.vectors), 1)
        key_bytes = sum(len(json.dumps(list(e)).encode()) for e in self.vectors)
        out = {"vector_bytes": float(self.dim * 4), "memory_bytes": (self.dim * 4 * len(self.vectors) + key_bytes) / n}
        if self.log is not None:
            out["file_bytes"] = self.log.size() / n
        return out

    # ------------------------------------------------------------------ updates
    def vector(self, edge: Edge) -> np.ndarray:
        v = self.vectors.get(edge)
        return v if v is not None else np.zeros(self.dim)

    def query(self, text: str) -> np.ndarray:
        """q̂ of a question. Shapes: -> (dim,)."""
        return unit(self.embedder.embed([text])[0])

    def memorise(self, q: np.ndarray, effective: Iterable[Edge], traversed: Iterable[Edge]) -> tuple[int, int]:
        """Enhance ``effective`` edges along ``q``; penalise the other ``traversed`` edges. Returns the counts.

        Penalising an edge with no vector (or none along ``q``) changes nothing and stores nothing.
        """
        good = set(effective)
        changed: list[Edge] = []
        for edge in sorted(good):
            self.vectors[edge] = enhance(self.vector(edge), q)
            changed.append(edge)
        penalised = 0
        for edge in sorted(set(traversed) - good):
            old = self.vectors.get(edge)
            if old is None:
                continue
            new = penalise(old, q)
            if new is not old:
                self.vectors[edge] = new
                changed.append(edge)
                penalised += 1
        self._persist(changed)
        return len(good), penalised

    def forget(self, edges: Iterable[Edge]) -> int:
        """Drop the vectors of ``edges`` (facts deleted from the KG), durably; returns how many were held."""
        gone = sorted(e for e in {tuple(e) for e in edges} if e in self.vectors)  # type: ignore[misc]
        for edge in gone:
            self.vectors[edge] = np.zeros(self.dim)
        self._persist(gone)
        for edge in gone:
            del self.vectors[edge]
        return len(gone)

    # ------------------------------------------------------------------ replay
    def _nodes(self, names: Sequence[str]) -> dict[str, np.ndarray]:
        """Node-name embeddings, cached (bounded by ``node_cache``; cleared when full)."""
        missing = [n for n in names if n not in self._node_cache]
        if missing:
            if len(self._node_cache) + len(missing) > self.config.node_cache:
                self._node_cache.clear()
            self._node_cache.update(zip(missing, self.embedder.embed(missing)))
        return {n: self._node_cache[n] for n in names}

    def replay(self, triples: Sequence[Edge], seeds: Sequence[str], q: np.ndarray) -> Replay:
        """DFS from ``seeds`` along edges with w > λ (module docstring); returns the maximal paths.

        Only edges that hold a vector can pass (w ≤ α otherwise, and α < λ by default), so the
        node similarity is computed for those candidates alone.
        """
        cfg = self.config
        qh = unit(q)
        adj: dict[str, list[Step]] = {}
        for h, r, t in dict.fromkeys(map(tuple, triples)):
            edge = (h, r, t)
            if edge not in self.vectors:
                continue
            adj.setdefault(h, []).append(Step(edge, True))
            adj.setdefault(t, []).append(Step(edge, False))
        if not adj:
            return Replay(())
        node = self._nodes(sorted({n for steps in adj.values() for s in steps for n in (s.edge[0], s.edge[2])}))

        def weight(step: Step) -> float:
            a, b = (step.edge[0], step.edge[2]) if step.forward else (step.edge[2], step.edge[0])
            return cfg.alpha * float(node[a] @ node[b]) + (1.0 - cfg.alpha) * float(qh @ self.vectors[step.edge])

        paths: list[tuple[Step, ...]] = []
        added: set[Edge] = set()

        def dfs(at: str, path: tuple[Step, ...], seen: frozenset[str]) -> None:
            extended = False
            if len(path) < cfg.max_depth:
                for step in adj.get(at, ()):
                    nxt = step.edge[2] if step.forward else step.edge[0]
                    if nxt in seen or len(added) >= cfg.max_edges or weight(step) <= cfg.threshold:
                        continue
                    added.add(step.edge)
                    extended = True
                    dfs(nxt, path + (step,), seen | {nxt})
            if path and not extended:
                paths.append(path)

        for seed in seeds:
            dfs(seed, (), frozenset({seed}))
        return Replay(tuple(paths))
