"""bench.serve on tiny load: the report's keys, backpressure answering an overload with 503s only, and the
Hand autoscaling up under a load step and back down after it."""

from __future__ import annotations

import json

import pytest


@pytest.mark.slow
def test_bench_serve_reports_overhead_backpressure_and_autoscaling(ray_local, tmp_path):
    from bench.serve import HAND, run

    out = tmp_path / "serve.json"
    report = run(requests=4, levels=[1, 2], overload_factor=3, out=out, step=[(1, 2.0), (6, 12.0), (1, 2.0)],
                 settle_s=45.0, batching_requests=10)
    assert json.loads(out.read_text()) == report
    for key in ("overhead_p50_ms", "p99_ms", "max_replicas_seen", "non_503_errors_under_overload",
                "lost_accepted_requests"):
        assert key in report
    assert [row["status"] for row in report["load"]] == [{"200": 4}, {"200": 4}]
    assert report["max_replicas_seen"] >= 1 and report["p99_ms"] >= report["serve_p50_ms_at_1"] > 0
    assert report["serve_p50_ms_paired"] > 0 and report["in_process_p50_ms"] > 0 and report["handle_hop_p50_ms"] > 0 < report["http_healthz_p50_ms"]
    assert abs(report["overhead_p50_ms"] - (report["serve_p50_ms_paired"] - report["in_process_p50_ms"])) <= 0.11
    assert report["overload"]["status"].get("503", 0) > 0  # 3 × capacity at once: backpressure answered
    assert report["non_503_errors_under_overload"] == 0 and report["lost_accepted_requests"] == 0
    # the load step: six clients against a target of one request per replica → the autoscaler adds replicas
    # (starting ones count: a replica process may take longer than the step to come up on a busy machine), and
    # once the step is over the Hand is back at min_replicas within the bounded wait
    step = report["step"]
    assert set(step["status"]) <= {"200", "503"} and step["status"]["200"] > 0
    assert 1 < step["max_replicas_running_or_starting"] <= HAND["max_replicas"]
    assert step["replicas_back_to_min_s"] is not None and step["replicas_over_time"][-1][1:] == [1, 0]
    assert max(row[1] for row in step["offered_over_time"]) == 6
    assert (tmp_path / "serve_replicas.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    batching = report["brain_batching"]  # the same analyses with and without @serve.batch
    assert batching["same_analyses"] is True and batching["unbatched"]["mean_batch"] == 1.0
    assert report["brain_batching_speedup"] == batching["speedup"] > 0 and report["serve_mode"] == "default"
    phases = report["phases_s"]  # where the command's time went, in order
    assert list(phases) == ["setup", "app_start", "paired_and_hops", "load_and_overload", "brain_batching",
                            "serve_shutdown", "ray_shutdown"][: len(phases)] and len(phases) >= 6
    assert all(v >= 0 for v in phases.values()) and sum(phases.values()) <= report["wall_s"] + 0.5
