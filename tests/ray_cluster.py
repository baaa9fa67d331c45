"""Helpers of the tests that run rg on Ray clusters of their own: a `ray start --head`
node stopped by its PID, polling Ray Train's registered checkpoints, waiting for a submitted job."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from rg.run.ports import free_ports


def short_temp_dir(name: str) -> Path:
    """A Ray temp dir of this process's own (Ray's socket paths must stay short, so not under tmp_path)."""
    return Path("/tmp") / f"rg-{name}-{os.getpid()}"


@contextmanager
def ray_head(name: str, num_cpus: int = 2, timeout: float = 120.0) -> Iterator[str]:
    """A ``ray start --head --block`` node in its own temp dir and ports; yields its dashboard address.

    The node is stopped by its PID (SIGTERM) afterwards, never by ``ray stop``.
    """
    from ray.job_submission import JobSubmissionClient

    temp = short_temp_dir(name)
    gcs, dash, client, node, objects, *agent = free_ports(10)
    ray = str(Path(sys.executable).with_name("ray"))
    command = [ray, "start", "--head", "--block", "--temp-dir", str(temp), "--port", str(gcs),
               "--dashboard-host", "127.0.0.1", "--dashboard-port", str(dash), "--include-dashboard", "true",
               "--ray-client-server-port", str(client), "--node-manager-port", str(node),
               "--object-manager-port", str(objects), "--dashboard-agent-listen-port", str(agent[0]),
               "--dashboard-agent-grpc-port", str(agent[1]), "--runtime-env-agent-port", str(agent[2]),
               "--metrics-export-port", str(agent[3]), "--num-cpus", str(num_cpus)]
    env = {**os.environ, "RAY_AUTH_MODE": "disabled"}
    env.pop("RAY_ADDRESS", None)
    head = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    address = f"http://127.0.0.1:{dash}"
    try:
        deadline = time.monotonic() + timeout
        while True:
            assert head.poll() is None, f"`ray start --head` exited with {head.returncode}"
            try:
                JobSubmissionClient(address).list_jobs()
                break
            except (ConnectionError, RuntimeError) as err:  # the dashboard is not up yet
                if time.monotonic() > deadline:
                    raise TimeoutError(f"no dashboard at {address} within {timeout:.0f} s") from err
                time.sleep(1)
        yield address
    finally:
        head.send_signal(signal.SIGTERM)
        head.wait(timeout=120)
        shutil.rmtree(temp, ignore_errors=True)


def wait_for_job(address: str, job: str, timeout: float = 600.0) -> tuple[str, str]:
    """Poll a submitted job until it ends (bounded); returns its final status and logs."""
    from ray.job_submission import JobStatus, JobSubmissionClient

    client = JobSubmissionClient(address)
    deadline = time.monotonic() + timeout
    while client.get_job_status(job) not in {JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED}:
        assert time.monotonic() < deadline, f"job {job} still running after {timeout:.0f} s:\n" + \
            client.get_job_logs(job)[-3000:]
        time.sleep(2)
    return str(client.get_job_status(job)), client.get_job_logs(job)


def registered_epoch(run_dir: Path) -> int | None:
    """The epoch of the latest checkpoint Ray Train has registered (its run snapshot), if any."""
    snapshot = run_dir / "checkpoint_manager_snapshot.json"
    if not snapshot.is_file():
        return None
    latest = json.loads(snapshot.read_text()).get("latest_checkpoint_result")
    return None if latest is None else int(latest["metrics"]["epoch"])


def poll(condition: Callable[[], bool], timeout: float, what: str, interval: float = 0.2) -> None:
    """Wait until ``condition()`` holds; AssertionError naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not within {timeout:.0f} s"
        time.sleep(interval)
