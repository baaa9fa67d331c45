"""Ray Train retriever training (rg.jobs.train_retriever): 2 CPU workers under DDP, the best
checkpoint exported and loadable, and a resubmitted run (after finishing, or after being killed)
resuming from its latest checkpoint."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from rg.data.splits import load_split_samples
from rg.config import load_config
from rg.retrievers.registry import load_retriever
from rg.text.encoder import EncoderConfig
from rg.jobs.harness import REPORT_FILE
from rg.jobs.train_retriever import TrainJobConfig, train_retriever
from tests.ray_cluster import registered_epoch


@pytest.fixture(scope="module")
def encoder_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("encoder_cache")


def _driver_builds_nothing(monkeypatch) -> list[bool]:
    """Make the driver fail if it builds training data itself; returns the ``graph`` flags of its sample reads."""
    import ray.data

    from rg.jobs import train_retriever as ray_train
    from rg.retrievers import inputs as data
    from rg.training import graph_stream, shards

    def no_driver_dataset(*args, **kwargs):
        raise AssertionError("the driver built the training data itself")

    reads = []

    def questions_only(*args, **kwargs):
        reads.append(kwargs.get("graph", True))
        return load_split_samples(*args, **kwargs)

    # the driver reads questions without subgraphs and never builds graphs or holds rows for the workers
    monkeypatch.setattr(ray.data, "from_items", no_driver_dataset)
    monkeypatch.setattr(shards.HeldRows, "put", staticmethod(no_driver_dataset))
    monkeypatch.setattr(data, "question_graph", no_driver_dataset)
    monkeypatch.setattr(data, "build_tables", no_driver_dataset)
    monkeypatch.setattr(graph_stream, "question_graph", no_driver_dataset)  # the actors import their own copy
    monkeypatch.setattr(ray_train, "load_split_samples", questions_only)
    return reads


# with -m slow only: three Ray Train runs per retriever; the killed-job test below trains, resumes,
# exports and refuses a changed config in the default run
@pytest.mark.slow
@pytest.mark.parametrize(
    "retriever", [{"kind": "mlp", "hidden": 16}, {"kind": "pna", "hidden": 8, "num_layers": 1}], ids=["mlp", "pna"]
)
def test_train_export_and_resume(ray_local, synthetic_parquet, encoder_cache, tmp_path, retriever, monkeypatch):
    reads = _driver_builds_nothing(monkeypatch)

    def config(epochs: int, lr: float = 1e-3) -> TrainJobConfig:
        return TrainJobConfig.model_validate(
            {
                "input": str(synthetic_parquet),
                "retriever": retriever,
                "encoder": EncoderConfig(cache_dir=str(encoder_cache)),
                "train": {"epochs": epochs, "questions_per_batch": 4, "eval_ks": (10, 100), "lr": lr},
                "num_workers": 2,
                "run_name": f"test_{retriever['kind']}",
                "storage_path": str(tmp_path / "ray_results"),
                "keep_checkpoints": 1,
                "output_dir": str(tmp_path / "out"),
            }
        )

    first = train_retriever(config(2))
    assert reads == [False]
    assert first["resumed"] is False and first["start_epoch"] == 0 and first["epochs_run"] == [0, 1]
    assert first["train_questions"] + first["val_questions"] == first["questions"]
    assert first["val_questions"] == round(0.2 * first["questions"])
    for row in first["history"]:
        for key in ("val_triple_recall@10", "val_triple_recall@100", "val_answer_recall@100", "train_loss"):
            assert key in row
        assert row["world_size"] == 2
    assert first["metric"] == "val_triple_recall@100"
    assert first["best_epoch"] in (0, 1)
    best_row = first["history"][first["best_epoch"]]
    assert first["best_value"] == pytest.approx(best_row["val_triple_recall@100"])
    assert first["best_value"] == max(r["val_triple_recall@100"] for r in first["history"])

    loaded = load_retriever(first["retriever_dir"])
    assert loaded.meta.kind == retriever["kind"]
    assert loaded.meta.label_source == "weak"
    assert loaded.meta.encoder_model_id == first["encoder_model_id"]
    assert loaded.meta.extra["epoch"] == first["best_epoch"]
    if retriever["kind"] == "pna":
        assert loaded.model.config.deg is not None
    assert json.loads((tmp_path / "out" / REPORT_FILE).read_text())["run_name"] == f"test_{retriever['kind']}"

    second = train_retriever(config(3))
    assert second["resumed"] is True and second["start_epoch"] == 2 and second["epochs_run"] == [2]
    assert [int(row["epoch"]) for row in second["history"]] == [0, 1, 2]
    assert second["history"][:2] == first["history"]
    assert second["best_value"] == max(r["val_triple_recall@100"] for r in second["history"])
    with pytest.raises(ValueError, match=r"cannot resume: train\.lr: 0\.001 -> 0\.01.*Fix: set a new `run_name`"):
        train_retriever(config(4, lr=0.01))  # a changed setting must not continue the old checkpoints


@pytest.mark.mission  # SIGKILL and resume of a Ray Train job
@pytest.mark.slow  # a SIGKILLed job and three Ray Train runs (148 s); test_training_loop and test_run_guard check the resume rules
def test_killed_job_resumes_when_resubmitted(ray_local, synthetic_parquet, encoder_cache, tmp_path, monkeypatch):
    """``python -m jobs.train`` is SIGKILLed after its first checkpoint; the resubmission resumes, streams its
    input, exports a loadable retriever, and a changed setting is refused instead of continuing the run."""
    storage = tmp_path / "ray_results"
    settings = {
        "kind": "train",
        "input": str(synthetic_parquet),
        "retriever": {"kind": "mlp", "hidden": 16},
        "encoder": {"cache_dir": str(encoder_cache)},
        "train": {"epochs": 200, "questions_per_batch": 2, "eval_ks": [10, 100]},
        "num_workers": 2,
        "run_name": "killed",
        "storage_path": str(storage),
        "keep_checkpoints": 1,
        "output_dir": str(tmp_path / "out"),
    }
    config_file = tmp_path / "train.yaml"
    config_file.write_text(yaml.safe_dump(settings))
    env = {**os.environ, "RAY_ADDRESS": ray_local.get_runtime_context().gcs_address}
    job = subprocess.Popen(
        [sys.executable, "-m", "jobs.train", "--config", str(config_file)],
        cwd=Path(__file__).resolve().parents[1],
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 300
        while registered_epoch(storage / "killed") is None and time.monotonic() < deadline:
            assert job.poll() is None, job.stderr.read().decode()[-2000:] if job.stderr else "job exited"
            time.sleep(0.2)
        assert registered_epoch(storage / "killed") is not None, "no checkpoint within 300 s"
        assert job.poll() is None, "the job finished before it could be killed"
    finally:
        os.killpg(job.pid, signal.SIGKILL)
        job.wait()
    killed_at = registered_epoch(storage / "killed")
    assert killed_at is not None
    assert not (tmp_path / "out" / REPORT_FILE).exists()

    reads = _driver_builds_nothing(monkeypatch)
    resumed = train_retriever(
        load_config(config_file, TrainJobConfig, [f"train.epochs={killed_at + 3}"])
    )
    assert reads == [False]
    assert resumed["resumed"] is True
    assert resumed["start_epoch"] == killed_at + 1
    assert resumed["epochs_run"] == list(range(resumed["start_epoch"], killed_at + 3))
    assert [int(row["epoch"]) for row in resumed["history"]] == list(range(killed_at + 3))
    assert resumed["best_value"] == max(r["val_triple_recall@100"] for r in resumed["history"])
    loaded = load_retriever(resumed["retriever_dir"])
    assert loaded.meta.kind == "mlp" and loaded.meta.extra["epoch"] == resumed["best_epoch"]
    assert json.loads((tmp_path / "out" / REPORT_FILE).read_text())["run_name"] == "killed"
    with pytest.raises(ValueError, match=r"cannot resume: train\.lr: 0\.001 -> 0\.01.*Fix: set a new `run_name`"):
        train_retriever(load_config(config_file, TrainJobConfig, [f"train.epochs={killed_at + 4}", "train.lr=0.01"]))
