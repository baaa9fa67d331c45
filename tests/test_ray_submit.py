"""`ray job submit` of build → refine → train with the shipped configs' relative paths (issue 28).

A local Ray cluster of the test's own (``ray start --head --block`` in its own temp dir and ports,
stopped by its PID) takes the jobs through ``JobSubmissionClient`` with a storage root; the
working dir is edited between the two training submissions, and the second one resumes.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def free_ports(n: int) -> list[int]:
    sockets = [socket.socket() for _ in range(n)]
    for sock in sockets:
        sock.bind(("127.0.0.1", 0))
    ports = [sock.getsockname()[1] for sock in sockets]
    for sock in sockets:
        sock.close()
    return ports


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """The dashboard address of a fresh local head node; stopped by PID afterwards."""
    temp = Path("/tmp") / f"rg-submit-{os.getpid()}"  # Ray's socket paths must stay short
    gcs, dash, client, node, objects, *agent = free_ports(10)
    ray = str(Path(sys.executable).with_name("ray"))
    command = [ray, "start", "--head", "--block", "--temp-dir", str(temp), "--port", str(gcs),
               "--dashboard-host", "127.0.0.1", "--dashboard-port", str(dash), "--include-dashboard", "true",
               "--ray-client-server-port", str(client), "--node-manager-port", str(node),
               "--object-manager-port", str(objects), "--dashboard-agent-listen-port", str(agent[0]),
               "--dashboard-agent-grpc-port", str(agent[1]), "--runtime-env-agent-port", str(agent[2]),
               "--metrics-export-port", str(agent[3]), "--num-cpus", "2"]
    env = {**os.environ, "RAY_AUTH_MODE": "disabled"}
    env.pop("RAY_ADDRESS", None)
    head = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    address = f"http://127.0.0.1:{dash}"
    try:
        from ray.job_submission import JobSubmissionClient

        for attempt in range(60):  # up to about 2 minutes for the dashboard to come up
            try:
                JobSubmissionClient(address).list_jobs()
                break
            except Exception:  # noqa: BLE001 — the dashboard is not up yet; the last attempt raises
                if attempt == 59:
                    raise
                time.sleep(2)
        yield address
    finally:
        head.send_signal(signal.SIGTERM)
        head.wait(timeout=120)
        shutil.rmtree(temp, ignore_errors=True)


def submit(address: str, workdir: Path, entrypoint: str, env_vars: dict[str, str]) -> tuple[str, str]:
    from ray.job_submission import JobStatus, JobSubmissionClient

    client = JobSubmissionClient(address)
    job = client.submit_job(entrypoint=entrypoint, runtime_env={
        "working_dir": str(workdir), "env_vars": {"RAY_AUTH_MODE": "disabled", **env_vars}})
    deadline = time.monotonic() + 600
    while client.get_job_status(job) not in {JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED}:
        assert time.monotonic() < deadline, client.get_job_logs(job)[-3000:]
        time.sleep(2)
    return str(client.get_job_status(job)), client.get_job_logs(job)


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
