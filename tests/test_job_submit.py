"""``ray job submit`` CLI against a local head node of the test's own (issue 23).

The repository is shipped as the working dir (outputs, virtual environments and data excluded, as
docs/cluster.md shows); the job's outputs land under ``RG_STORAGE_ROOT``, not in Ray's temporary
copy of the working dir.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.ray_cluster import ray_head, short_temp_dir, wait_for_job

ROOT = Path(__file__).resolve().parents[1]
EXCLUDES = ["outputs/", ".venv/", "bench/results/", "*.parquet", "data/"]
pytestmark = pytest.mark.slow


def test_build_subgraphs_submitted_with_the_cli_writes_under_the_storage_root(tmp_path):
    root = tmp_path / "storage"
    runtime_env = {"excludes": EXCLUDES, "env_vars": {"RG_STORAGE_ROOT": str(root), "RAY_AUTH_MODE": "disabled"}}
    job = f"rg-build-{uuid.uuid4().hex[:8]}"
    with ray_head("jobsubmit") as address:
        submitted = subprocess.run(
            [str(Path(sys.executable).with_name("ray")), "job", "submit", "--address", address,
             "--submission-id", job, "--no-wait", "--working-dir", str(ROOT),
             "--runtime-env-json", json.dumps(runtime_env), "--",
             "python", "-m", "jobs.build_subgraphs", "--config", "configs/build_synthetic.yaml",
             "--set", "synthetic.questions=20", "--set", "shard_size=10", "--no-progress"],
            capture_output=True, text=True, timeout=300, env={"RAY_AUTH_MODE": "disabled", "PATH": str(Path(sys.executable).parent)},
        )
        assert submitted.returncode == 0, submitted.stdout + submitted.stderr
        status, logs = wait_for_job(address, job)
        assert status == "SUCCEEDED", logs[-3000:]
        copies = list(short_temp_dir("jobsubmit").glob("session_*/runtime_resources/working_dir_files/*"))
        assert copies, "Ray's copy of the working dir was not found"
        assert not any((copy / "outputs").exists() for copy in copies), "outputs written into the working-dir copy"
        assert not any((copy / ".venv").exists() for copy in copies), "the virtual environment was uploaded"
    out = root / "outputs" / "synthetic"
    report = json.loads(next(out.rglob("build_report.json")).read_text())
    assert str(out) in logs
    shards = list(out.rglob("shard-*.parquet"))
    assert shards and report, f"no shards under {out}"
