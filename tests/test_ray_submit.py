"""`ray job submit` of build → refine → train with the shipped configs' relative paths (issue 28).

A local Ray cluster of the test's own (``ray start --head --block`` in its own temp dir and ports,
stopped by its PID) takes the jobs through ``JobSubmissionClient`` with a storage root; the
working dir is edited between the two training submissions, and the second one resumes.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.ray_cluster import ray_head, wait_for_job

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster():
    """The dashboard address of a fresh local head node; stopped by PID afterwards."""
    with ray_head("submit") as address:
        yield address


def submit(address: str, workdir: Path, entrypoint: str, env_vars: dict[str, str]) -> tuple[str, str]:
    from ray.job_submission import JobSubmissionClient

    job = JobSubmissionClient(address).submit_job(entrypoint=entrypoint, runtime_env={
        "working_dir": str(workdir), "env_vars": {"RAY_AUTH_MODE": "disabled", **env_vars}})
    return wait_for_job(address, job)


def test_build_refine_train_resume_after_a_working_dir_edit(cluster, tmp_path):
    workdir = tmp_path / "wd"
    workdir.mkdir()
    for name in ("rg", "jobs", "configs", "pyproject.toml"):
        (shutil.copytree if (ROOT / name).is_dir() else shutil.copy)(ROOT / name, workdir / name)
    root = tmp_path / "storage"

    status, logs = submit(cluster, workdir, "python -m jobs.build_subgraphs --config configs/build_synthetic.yaml",
                          {})
    assert status == "FAILED" and "`output_dir: outputs/synthetic` is relative" in logs and "RG_STORAGE_ROOT" in logs
    env = {"RG_STORAGE_ROOT": str(root)}
    steps = [
        "python -m jobs.build_subgraphs --config configs/build_synthetic.yaml --set synthetic.questions=40 "
        "--set shard_size=10 --no-progress",
        "python -m jobs.refine --config configs/refine_synthetic.yaml --set num_actors=1 --no-progress",
    ]
    train = ("python -m jobs.train --config configs/train_synthetic_mlp.yaml --set num_workers=1 "
             "--set labels.source=refined --set labels.path=outputs/refine_synthetic/labels --set train.epochs=")
    for entrypoint in [*steps, train + "1"]:
        status, logs = submit(cluster, workdir, entrypoint, env)
        assert status == "SUCCEEDED", logs[-3000:]
    assert str(root / "outputs" / "train_synthetic_mlp") in logs
    (workdir / "jobs" / "train.py").write_text((workdir / "jobs" / "train.py").read_text() + "# edited\n")
    status, logs = submit(cluster, workdir, train + "2", env)
    assert status == "SUCCEEDED", logs[-3000:]
    report = json.loads((root / "outputs" / "train_synthetic_mlp" / "train_report.json").read_text())
    assert report["resumed"] is True and report["start_epoch"] == 1
    assert [h["epoch"] for h in report["history"]] == [0, 1]
