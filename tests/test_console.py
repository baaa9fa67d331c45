"""The quiet console: a job's own lines, progress bars and errors on the terminal; Ray's INFO lines, its C++
``core_worker`` messages and dependencies' warnings in the run's log file, whose path is printed once;
``--verbose`` shows everything; standard error is restored for a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from rg.console import CONSOLE_ENV, LOG_DIR_ENV, quiet_console, user_stream

ROOT = Path(__file__).resolve().parents[1]
NOISE = ("streaming_executor", "core_worker", "INFO", "Progress bars disabled")


def test_standard_error_goes_to_the_log_and_comes_back_for_a_traceback(tmp_path, capfd):
    seen: list[Path | None] = []
    with pytest.raises(RuntimeError, match="boom"):
        with quiet_console("jobs.example", folder=tmp_path) as path:
            seen.append(path)
            os.write(2, b"core_worker.cc: C++ noise\n")
            with open(2, "w", closefd=False) as stderr:  # what Ray's Python handlers write to: sys.stderr, fd 2
                print("ray INFO noise", file=stderr)
            warnings.warn("a dependency's FutureWarning", FutureWarning)
            print("for the user", file=user_stream())
            raise RuntimeError("boom")
    os.write(2, b"after\n")
    err = capfd.readouterr().err
    assert err.splitlines() == [f"Ray's and dependencies' messages: {seen[0]} (--verbose shows them here)",
                                "for the user", "after"]
    log = seen[0].read_text()
    assert "C++ noise" in log and "ray INFO noise" in log and "FutureWarning" in log and "for the user" not in log
    assert CONSOLE_ENV not in os.environ


def test_verbose_redirects_nothing_and_another_process_writes_to_its_own_stderr(tmp_path, capfd, monkeypatch):
    with quiet_console("jobs.example", verbose=True, folder=tmp_path) as path:
        os.write(2, b"shown\n")
    assert path is None and capfd.readouterr().err == "shown\n"
    monkeypatch.setenv(CONSOLE_ENV, f"{os.getpid() + 1}:1")  # inherited from another process: not ours
    assert user_stream() is sys.stderr


def run_build(tmp_path: Path, *extra: str, out: str = "out") -> subprocess.CompletedProcess:
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", LOG_DIR_ENV: str(tmp_path / "logs")}
    return subprocess.run([sys.executable, "-m", "jobs.build_subgraphs", "--config", "configs/build_synthetic.yaml",
                           "--set", f"output_dir={tmp_path / out}", "--set", "synthetic.questions=8", *extra],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.mission  # 50 s: a real job's terminal output
def test_a_job_shows_its_lines_and_logs_rays(tmp_path):
    done = run_build(tmp_path)
    assert done.returncode == 0, done.stderr
    shown = done.stdout + done.stderr
    assert "shards and report:" in done.stdout and "subgraphs: 100%" in done.stderr
    assert [n for n in NOISE if n in shown] == []
    [notice] = [line for line in done.stderr.splitlines() if line.startswith("Ray's and dependencies' messages: ")]
    log = Path(notice.split(": ", 1)[1].split(" (--verbose")[0])
    assert log.parent == tmp_path / "logs" and "streaming_executor" in log.read_text()

    verbose = run_build(tmp_path, "--verbose", out="again")
    assert verbose.returncode == 0 and "streaming_executor" in verbose.stderr
    assert "Ray's and dependencies' messages" not in verbose.stderr


def test_a_config_error_is_still_on_the_terminal(tmp_path):
    done = run_build(tmp_path, "--set", "num_actors=0")
    assert done.returncode == 2
    assert "num_actors" in done.stderr and "Traceback" not in done.stderr


def test_help_prints_the_usage_without_opening_a_log(tmp_path):
    env = {**os.environ, LOG_DIR_ENV: str(tmp_path / "logs")}
    done = subprocess.run([sys.executable, "-m", "jobs.build_subgraphs", "--help"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.startswith("usage: python -m jobs.build_subgraphs")
    assert "Ray's and dependencies' messages" not in done.stderr and not (tmp_path / "logs").exists()
