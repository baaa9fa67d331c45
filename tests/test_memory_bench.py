"""bench.memory's parts on tiny data (the rounds with a trained planner run with -m slow)."""

from __future__ import annotations

import json

import pytest

from bench import memory as bench


def test_retrieval_write_and_replay_parts(tmp_path):
    got = bench.retrieval([300], queries=20, seed=0)
    assert got["300"]["index"] == "flat" and 0 < got["300"]["p50_ms"] <= got["300"]["p99_ms"]
    writes = bench.write_throughput(5, tmp_path)
    assert writes["remembered"] == 5 and writes["remember_per_s"] > 0 and writes["sealed_bytes_per_record"] > 0
    replay = bench.replay_cost([60], tmp_path, seed=0)
    assert replay["by_subgraph_triples"]["60"]["stored_edges"] == 12
    assert replay["bytes_per_edge"]["vector_bytes"] == 4 * bench.DIM


@pytest.mark.slow
def test_quick_run_writes_the_keys(tmp_path, monkeypatch):
    out = tmp_path / "memory.json"
    retrieval, replay_cost = bench.retrieval, bench.replay_cost  # the originals (the patches call them)
    monkeypatch.setattr(bench, "retrieval", lambda sizes, queries, seed: retrieval([500, 1000], 10, seed))
    monkeypatch.setattr(bench, "replay_cost", lambda sizes, folder, seed: replay_cost([50], folder, seed))
    assert bench.main(["--quick", "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    for key in ("retrieval_p50_ms_100k", "token_reduction_round3", "brain_calls_per_question_round3",
                "hits1_round1", "hits1_round3"):
        assert key in data
    assert data["retrieval_largest"] == 1000 and "not 100k" in data["retrieval_p50_ms_100k_note"]
    shrunk = data["quick_shrunk"]
    assert (shrunk["round_questions"], shrunk["planner_train_questions"], shrunk["planner_epochs"]) == (20, 120, 8)
    assert shrunk["full_run"]["retrieval_sizes"][-1] == 100000
    assert set(data["part_seconds"]) == {"retrieval", "writes", "replay", "rounds"}
    assert len(data["rounds"]["local_brain"]) == 4  # three rounds and the self-correction count
