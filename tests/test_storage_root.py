"""Cluster-safe paths for submitted Ray jobs, and Ctrl-C in a job (issue 28)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jobs import build_subgraphs as build_job
from rg.cli import EXIT_INTERRUPTED, run_job
from rg.run.storage import JOB_ENV, StorageRootError, resolve_paths, storage_root, submitted_job
from rg.jobs.refine import RefineConfig
from rg.jobs.train_retriever import TrainJobConfig

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def as_submitted_job(monkeypatch):
    """The environment `ray job submit` gives its entrypoint (the job config JSON with a submission id)."""
    monkeypatch.setenv(JOB_ENV, json.dumps({"runtime_env": {}, "metadata": {"job_submission_id": "raysubmit_1"}}))
    monkeypatch.delenv("RG_STORAGE_ROOT", raising=False)


def test_submitted_job_is_detected_from_the_environment(monkeypatch, as_submitted_job):
    assert submitted_job() == "raysubmit_1"
    monkeypatch.delenv(JOB_ENV)
    assert submitted_job() is None


def test_relative_paths_resolve_against_the_root(as_submitted_job, tmp_path, monkeypatch):
    cfg = TrainJobConfig.model_validate({
        "input": "runs/subgraphs/synthetic", "output_dir": "runs/model", "storage_path": "runs/ray",
        "run_name": "r", "labels": {"source": "refined", "path": "runs/refined/labels"},
    })
    out = resolve_paths(cfg, str(tmp_path))
    assert out.input == str(tmp_path / "runs/subgraphs/synthetic")
    assert (out.output_dir, out.storage_path) == (str(tmp_path / "runs/model"), str(tmp_path / "runs/ray"))
    assert out.labels.path == str(tmp_path / "runs/refined/labels")
    uri = resolve_paths(cfg.model_copy(update={"output_dir": "/abs/model", "input": "/abs/in",
                                                "labels": cfg.labels.model_copy(update={"path": "/abs/l"})}),
                        "s3://bucket/rg")
    assert uri.storage_path == "s3://bucket/rg/runs/ray" and uri.output_dir == "/abs/model"
    monkeypatch.setenv("RG_STAGING_DIR", str(tmp_path / "staging"))
    cached = cfg.model_copy(update={"encoder": cfg.encoder.model_copy(update={"cache_dir": "outputs/cache"})})
    relative = resolve_paths(cached, "s3://bucket/rg")  # every path key becomes a URI but the local cache
    assert (relative.input, relative.labels.path) == ("s3://bucket/rg/runs/subgraphs/synthetic",
                                                      "s3://bucket/rg/runs/refined/labels")
    assert relative.encoder.cache_dir == str(tmp_path / "staging" / "cache" / "outputs/cache")


def test_submitted_job_without_root_names_the_path_and_fix(as_submitted_job):
    cfg = RefineConfig(input="/data/in.parquet", output_dir="out/refined")
    with pytest.raises(StorageRootError, match=r"`output_dir: out/refined` is relative.*Fix: set RG_STORAGE_ROOT"):
        resolve_paths(cfg, None)
    assert resolve_paths(cfg, "gs://bucket/rg").output_dir == "gs://bucket/rg/out/refined"  # staged by rg.run.remote
    with pytest.raises(StorageRootError, match="must be an absolute path"):
        storage_root("relative/root")


def test_shared_data_needs_its_variable(as_submitted_job, monkeypatch, tmp_path):
    monkeypatch.delenv("RG_SHARED_DATA", raising=False)
    cfg = RefineConfig(input="@shared/metaqa/x.parquet", output_dir="/abs/out")
    with pytest.raises(StorageRootError, match="RG_SHARED_DATA"):
        resolve_paths(cfg, str(tmp_path))
    monkeypatch.setenv("RG_SHARED_DATA", str(tmp_path))
    assert resolve_paths(cfg, str(tmp_path)).input == "@shared/metaqa/x.parquet"


def test_job_exits_2_before_work_without_a_root(as_submitted_job, tmp_path, capsys, job_line):
    config = tmp_path / "b.yaml"
    config.write_text("kind: build_subgraphs\noutput_dir: runs/subgraphs\nsynthetic: {}\n")
    assert run_job("jobs.build_subgraphs", build_job.main, ["--config", str(config)]) == 2
    assert "`output_dir: runs/subgraphs` is relative" in job_line(capsys.readouterr().err, "jobs.build_subgraphs")
    config.write_text(f"kind: build_subgraphs\nstorage_root: {tmp_path}\noutput_dir: runs/sub\nsynthetic: {{}}\n")
    from rg.cli import job_parser, load_job_config
    from rg.jobs.build_subgraphs import BuildSubgraphsConfig

    args = job_parser("jobs.build_subgraphs", "x", BuildSubgraphsConfig).parse_args(["--config", str(config)])
    assert load_job_config(args, BuildSubgraphsConfig).output_dir == str(tmp_path / "runs/sub")


def test_keyboard_interrupt_prints_how_to_resume():
    def interrupted(argv):
        raise KeyboardInterrupt

    assert run_job("jobs.train", interrupted, ["--config", "c.yaml"]) == EXIT_INTERRUPTED


@pytest.mark.slow
def test_ctrl_c_in_a_real_job_exits_130(tmp_path):
    """SIGINT (what Ctrl-C sends) to a running build: one line saying how to resume, status 130."""
    config = tmp_path / "b.yaml"
    config.write_text(f"kind: build_subgraphs\noutput_dir: {tmp_path / 'out'}\nsynthetic: {{questions: 800}}\n"
                      "shard_size: 4\nnum_actors: 1\nray: {num_cpus: 2}\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RAY_AUTH_MODE": "disabled"}
    proc = subprocess.Popen([sys.executable, "-m", "jobs.build_subgraphs", "--config", str(config), "--no-progress"],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.monotonic() + 180
    while not list((tmp_path / "out").glob("*/shard-*.stats.json")) and time.monotonic() < deadline:
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == EXIT_INTERRUPTED, err.decode()[-2000:]
    assert f"resume with: python -m jobs.build_subgraphs --config {config} --no-progress" in err.decode()


def test_the_dual_towers_planner_and_schema_resolve_against_the_root(tmp_path):
    from rg.jobs.evaluate_qa import QAEvaluateConfig

    cfg = QAEvaluateConfig.model_validate({
        "input": "runs/subgraphs", "output_dir": "runs/qa", "reasoner": "dualtower", "schema_dir": "runs/schema",
        "dualtower": {"brain": {"kind": "local", "planner": "runs/plan/planner"}},
    })
    out = resolve_paths(cfg, str(tmp_path))
    assert out.dualtower.brain.planner == str(tmp_path / "runs/plan/planner")
    assert out.schema_dir == str(tmp_path / "runs/schema")
