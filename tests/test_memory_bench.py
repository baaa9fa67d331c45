"""bench.memory's parts on tiny data (the whole command at toy sizes: tests/test_bench_smoke.py)."""

from __future__ import annotations

from bench import memory as bench


def test_retrieval_write_and_replay_parts(tmp_path):
    got = bench.retrieval([300], queries=20, seed=0)
    assert got["300"]["index"] == "flat" and 0 < got["300"]["p50_ms"] <= got["300"]["p99_ms"]
    assert 0 < got["300"]["exact_p50_ms"] <= got["300"]["exact_p99_ms"] and got["300"]["recall_exact_top1"] == 1.0
    writes = bench.write_throughput(5, tmp_path)
    assert writes["remembered"] == 5 and writes["remember_per_s"] > 0 and writes["sealed_bytes_per_record"] > 0
    replay = bench.replay_cost([60], tmp_path, seed=0)
    assert replay["by_subgraph_triples"]["60"]["stored_edges"] == 12
    assert replay["bytes_per_edge"]["vector_bytes"] == 4 * bench.DIM
