"""Shared fixtures: the real data folder (skipped when absent) and a session-wide local Ray."""

from __future__ import annotations

from pathlib import Path

import pytest

from rg.data.paths import ENV_VAR, shared_data_dir


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The shared real-data folder; tests using it skip with the reason when it is absent."""
    path = shared_data_dir()
    if path is None:
        pytest.skip(f"real data not found: set ${ENV_VAR} or place shared/data beside the project")
    return path


@pytest.fixture(scope="session")
def ray_local():
    """One local Ray instance of the test session's own (num_cpus=2), never a running cluster."""
    import ray

    if not ray.is_initialized():
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.fixture
def job_line():
    """``job_line(stderr, module)``: the one line a job printed for an expected error (Ray's own log lines aside)."""

    def find(stderr: str, module: str) -> str:
        lines = [line for line in stderr.splitlines() if line.startswith(f"{module}: ")]
        assert len(lines) == 1, stderr
        return lines[0]

    return find
