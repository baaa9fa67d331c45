"""Shared fixtures: the real data folder (skipped when absent), a session-wide local Ray and the synthetic RoG
parquet file most Ray job tests read."""

from __future__ import annotations

import os
import platform
from pathlib import Path

import pytest

from rg.run.paths import ENV_VAR, shared_data_dir

# Torch picks its CPU kernels by the machine's instruction set, and its AVX2 and AVX-512 kernels round
# differently: a tiny model trained in a test ends elsewhere on each kind of x86-64 machine, so a test that
# pins a trained planner's beams passed on one kind and failed on the other (tests/test_dualtower.py: 7 of
# 27 on an AVX-512 machine). Every test runs on the AVX2 kernels, which every x86-64 machine here has; a
# value the caller sets wins. Read at torch's first kernel dispatch, and inherited by Ray's workers.
if platform.machine().lower() in ("x86_64", "amd64"):
    os.environ.setdefault("ATEN_CPU_CAPABILITY", "avx2")


def pytest_collection_modifyitems(config, items):
    """A ``mission`` test or a ``heavy_smoke`` (CI's second step: ``pytest -m "mission or heavy_smoke"``) is also
    ``slow``: off in the default run."""
    for item in items:
        second_step = item.get_closest_marker("mission") or item.get_closest_marker("heavy_smoke")
        if second_step is not None and item.get_closest_marker("slow") is None:
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The shared real-data folder; tests using it skip with the reason when it is absent."""
    path = shared_data_dir()
    if path is None:
        pytest.skip(f"real data not found: set ${ENV_VAR} or place shared/data beside the project")
    return path


def start_local_ray():
    """Start the test session's own local Ray (num_cpus=2), never a running cluster; returns the module."""
    import ray

    if not ray.is_initialized():
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    return ray


@pytest.fixture(scope="session")
def ray_local():
    """One local Ray instance of the test session's own (num_cpus=2), never a running cluster."""
    yield start_local_ray()
    import ray

    ray.shutdown()


@pytest.fixture(scope="session")
def synthetic_parquet(tmp_path_factory) -> Path:
    """40 synthetic questions (seed 0) with subgraphs capped at 200 triples, as one RoG parquet file
    (``tests/synthetic_data.py``); shared by the Ray training, planner, sweep and multi-node tests."""
    from tests.synthetic_data import write_synthetic_parquet

    path = tmp_path_factory.mktemp("rog") / "synthetic.parquet"
    write_synthetic_parquet(path, questions=40, max_triples=200)
    return path


@pytest.fixture
def job_line():
    """``job_line(stderr, module)``: the one line a job printed for an expected error (Ray's own log lines aside),
    with no traceback anywhere in ``stderr``."""

    def find(stderr: str, module: str) -> str:
        assert "Traceback" not in stderr, stderr
        lines = [line for line in stderr.splitlines() if line.startswith(f"{module}: ")]
        assert len(lines) == 1, stderr
        return lines[0]

    return find


@pytest.fixture(scope="session")
def virtuoso(tmp_path_factory):
    """A Virtuoso of the test session's own in a temp dir on free ports, stopped by its PID at the end.

    Skips with the reason when Debian's ``virtuoso-opensource`` package is not installed.
    """
    import shutil

    from rg.stores.virtuoso import PACKAGE, SERVER_BINARY, VirtuosoServer
    from rg.run.ports import free_ports

    if shutil.which(SERVER_BINARY) is None:
        pytest.skip(f"{SERVER_BINARY} not installed: apt-get install -y {PACKAGE}")
    server = VirtuosoServer(tmp_path_factory.mktemp("virtuoso"), *free_ports(2))
    server.start(timeout=120)
    yield server
    assert server.stop(), "the session's Virtuoso was not running at teardown"
