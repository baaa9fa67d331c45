"""bench.serve on tiny load: the report's keys, and backpressure answering an overload with 503s only."""

from __future__ import annotations

import json

import pytest


@pytest.mark.slow
def test_bench_serve_reports_overhead_and_clean_backpressure(ray_local, tmp_path):
    from bench.serve import run

    out = tmp_path / "serve.json"
    report = run(requests=4, levels=[1, 2], overload_factor=3, out=out)
    assert json.loads(out.read_text()) == report
    for key in ("overhead_p50_ms", "p99_ms", "max_replicas_seen", "non_503_errors_under_overload",
                "lost_accepted_requests"):
        assert key in report
    assert [row["status"] for row in report["load"]] == [{"200": 4}, {"200": 4}]
    assert report["max_replicas_seen"] >= 1 and report["p99_ms"] >= report["serve_p50_ms_at_1"] > 0
    assert report["overload"]["status"].get("503", 0) > 0  # 3 × capacity at once: backpressure answered
    assert report["non_503_errors_under_overload"] == 0 and report["lost_accepted_requests"] == 0
