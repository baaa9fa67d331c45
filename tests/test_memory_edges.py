"""Edge memory (ReMindRAG): exact enhance / penalise vectors, replay DFS, persistence."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rg.memory.edges import EdgeMemory, EdgeMemoryConfig, delta, enhance, penalise
from rg.memory.sealed import SealedLog, read_sealed

KEY = bytes(range(32))


class TableEmbedder:
    """Hand-made unit vectors per text (3 dimensions)."""

    dim = 3

    def __init__(self, table):
        self.table = {k: np.asarray(v, dtype=np.float32) / np.linalg.norm(v) for k, v in table.items()}

    def embed(self, texts):
        return np.stack([self.table[t] for t in texts]).astype(np.float32)


def test_delta_values():
    assert delta(0.0) == pytest.approx(2 / math.pi)
    assert delta(1.0) == pytest.approx(0.0, abs=1e-12)
    assert delta(0.5) == pytest.approx(2 / math.pi * math.cos(math.pi / 4))


def test_enhance_from_zero_and_damped():
    q = np.array([3.0, 4.0, 0.0])  # q̂ = (0.6, 0.8, 0)
    v1 = enhance(np.zeros(3), q)
    np.testing.assert_allclose(v1, 2 / math.pi * np.array([0.6, 0.8, 0.0]))
    v2 = enhance(v1, q)
    step = 2 / math.pi * math.cos(math.pi / 2 * (2 / math.pi))
    np.testing.assert_allclose(v2, v1 + step * np.array([0.6, 0.8, 0.0]))
    assert step < 2 / math.pi  # damped once the vector holds something


def test_penalise_removes_part_of_the_query_component_only():
    v = np.array([0.5, 0.0, 0.7])
    q = np.array([1.0, 0.0, 0.0])
    s = 0.5
    out = penalise(v, q)
    np.testing.assert_allclose(out, [0.5 - delta(s) * s, 0.0, 0.7])  # the orthogonal part is untouched
    assert out[2] == v[2]
    # not the public code's scalar subtraction from every component
    assert not np.allclose(out, v - delta(s) * s)


def test_penalise_leaves_opposed_vectors():
    v = np.array([-0.4, 0.2, 0.0])
    assert penalise(v, np.array([1.0, 0.0, 0.0])) is v


GRAPH = [("a", "r1", "b"), ("b", "r2", "c"), ("a", "r3", "d"), ("d", "r4", "e"), ("c", "r5", "f")]
NODES = {n: [1.0, 0.0, 0.0] for n in "abcdef"}


def memory(path=None, threshold=0.55):
    emb = TableEmbedder({**NODES, "q": [0.0, 1.0, 0.0], "other": [0.0, 0.0, 1.0]})
    log = SealedLog(path, KEY) if path else None
    return EdgeMemory(EdgeMemoryConfig(threshold=threshold), emb, log)


def test_replay_is_empty_before_any_memory():
    mem = memory()
    assert not mem.replay(GRAPH, ["a"], mem.query("q"))


def test_replay_follows_enhanced_edges_only():
    mem = memory()
    q = mem.query("q")
    mem.memorise(q, [("a", "r1", "b"), ("b", "r2", "c")], [("a", "r3", "d")])
    replay = mem.replay(GRAPH, ["a"], q)
    assert [[s.label for s in p] for p in replay.paths] == [["r1", "r2"]]
    # w = 0.1·sim(from, to) + 0.9·q̂·v = 0.1·1 + 0.9·2/π ≈ 0.673 > 0.55
    assert replay.edges == {("a", "r1", "b"), ("b", "r2", "c")}
    # an orthogonal query does not replay the memory
    assert not mem.replay(GRAPH, ["a"], mem.query("other"))
    # from the other end the edges are walked backwards
    back = mem.replay(GRAPH, ["c"], q)
    assert [[s.label for s in p] for p in back.paths] == [["r2^-1", "r1^-1"]]


def test_penalised_edge_drops_out_of_replay():
    mem = memory()
    q = mem.query("q")
    mem.memorise(q, [("a", "r1", "b"), ("a", "r3", "d")], [])
    assert len(mem.replay(GRAPH, ["a"], q).paths) == 2
    enhanced, penalised = mem.memorise(q, [("a", "r1", "b")], [("a", "r3", "d")])
    assert (enhanced, penalised) == (1, 1)
    assert [[s.label for s in p] for p in mem.replay(GRAPH, ["a"], q).paths] == [["r1"]]


def test_persisted_sparse_and_encrypted(tmp_path):
    path = tmp_path / "edges.sealed"
    mem = memory(path)
    q = mem.query("q")
    mem.memorise(q, [("a", "r1", "b")], [("a", "r3", "d")])  # r3 has no vector: nothing stored for it
    mem.memorise(q, [("a", "r1", "b")], [])
    assert set(mem.vectors) == {("a", "r1", "b")}
    data = path.read_bytes()
    # a plaintext record holds its edge as JSON (["a", "r1", "b"]); quoted names are long enough that random
    # ciphertext does not hold them by chance (a bare b"r1" turned up in one CI run's ciphertext)
    assert b'"r1"' not in data and b'"a"' not in data
    mem.log.close()
    again = memory(path)
    np.testing.assert_allclose(again.vector(("a", "r1", "b")), mem.vector(("a", "r1", "b")), rtol=1e-6)
    assert again.compact() == 1
    assert len(read_sealed(path, KEY).records) == 1
    sizes = again.bytes_per_edge()
    assert sizes["vector_bytes"] == 12 and sizes["file_bytes"] > 12
    again.log.close()
