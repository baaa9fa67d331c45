"""Training sweeps: stable trial runs, refused keys, the release of stopped runs' placement groups,
and (slow) a small ASHA sweep of Ray Train runs on the synthetic KG with its table, default row,
best config and resume."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import yaml

from rg.config import ConfigError, load_config, validate_config
from rg.training.ray_train import TrainJobConfig
from rg.training.shards import WORKER_GROUP_KEY
from rg.training.sweep import SweepTrainConfig, selection_metric
from tests.test_training_ray import encoder_cache, synthetic_parquet  # noqa: F401 — fixtures
from tune.train import COST, ReleaseStoppedRuns, format_train_sweep, run_train_sweep


def base_file(tmp_path, parquet, cache) -> str:
    path = tmp_path / "base.yaml"
    path.write_text(yaml.safe_dump({
        "kind": "train", "input": str(parquet), "retriever": {"kind": "mlp", "hidden": 16},
        "encoder": {"cache_dir": str(cache)},
        "train": {"epochs": 3, "questions_per_batch": 4, "eval_ks": [10, 100], "lr": 0.001},
        "run_name": "base", "output_dir": str(tmp_path / "unused"),
    }))
    return str(path)


def test_trial_configs_are_stable_and_own_their_folders(tmp_path):
    base = tmp_path / "base.yaml"
    base.write_text(yaml.safe_dump({"kind": "train", "input": "x", "run_name": "r", "output_dir": "o",
                                    "retriever": {"kind": "mlp"}}))
    sweep = validate_config({"base": str(base), "name": "s", "output_dir": str(tmp_path / "sw"),
                             "space": {"train.lr": [0.1, 0.01], "retriever.hidden": [8]}}, SweepTrainConfig)
    data, cls = sweep.load_base()
    assert cls is TrainJobConfig
    a = sweep.trial_config(data, cls, {"train.lr": 0.1, "retriever.hidden": 8})
    b = sweep.trial_config(data, cls, {"retriever.hidden": 8, "train.lr": 0.1})
    c = sweep.trial_config(data, cls, {"train.lr": 0.01, "retriever.hidden": 8})
    assert a.run_name == b.run_name != c.run_name and a.run_name.startswith("s-")
    assert a.output_dir.endswith(a.run_name) and a.storage_path == str((tmp_path / "sw" / "runs").resolve())
    assert (a.train.lr, a.retriever.hidden, a.num_workers) == (0.1, 8, 1)
    assert selection_metric(a) == "val_triple_recall@100"
    with pytest.raises(ConfigError, match=r"space: .*'run_name' is set by each trial"):
        validate_config({"base": str(base), "name": "s", "output_dir": "o", "space": {"run_name": ["a"]}},
                        SweepTrainConfig)
    bad = validate_config({"base": str(base), "name": "s", "output_dir": "o", "space": {"train.lr": [-1]}},
                          SweepTrainConfig)
    with pytest.raises(ConfigError, match=r"train\.lr"):
        bad.load_base()


def test_an_ended_trials_placement_group_is_released(ray_local):
    """The callback removes the groups an ended trial reported, and no running trial's."""
    from ray.util.placement_group import placement_group, placement_group_table

    callback = ReleaseStoppedRuns()
    stopped, running = placement_group([{"CPU": 0.01}]), placement_group([{"CPU": 0.01}])
    ray_local.get([stopped.ready(), running.ready()])
    trial = SimpleNamespace(trial_id="t1")
    callback.on_trial_result(0, [], trial, {WORKER_GROUP_KEY: stopped.id.hex(), "epoch": 0})
    callback.on_trial_result(0, [], SimpleNamespace(trial_id="t2"), {WORKER_GROUP_KEY: running.id.hex()})
    callback.on_trial_result(0, [], trial, {"epoch": 1})
    callback.on_trial_complete(0, [], trial)
    states = {k: v["state"] for k, v in placement_group_table().items()}
    assert states[stopped.id.hex()] == "REMOVED" and states[running.id.hex()] == "CREATED"
    assert callback.release("t1") == [] and callback.release("t2") == [running.id.hex()]


@pytest.mark.slow
def test_asha_sweep_of_ray_train_runs(ray_local, synthetic_parquet, encoder_cache, tmp_path):  # noqa: F811
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump({
        "kind": "sweep_train", "base": base_file(tmp_path, synthetic_parquet, encoder_cache), "name": "tiny",
        "output_dir": str(tmp_path / "sweep"), "space": {"train.lr": [0.01, 0.0001]},
        "scheduler": {"grace_period": 1, "reduction_factor": 2}, "driver_resources": {"CPU": 0.5},
        "workers_per_trial": 1,
    }))
    sweep = load_config(path, SweepTrainConfig)
    result = run_train_sweep(sweep, progress=False)
    metric = "val_triple_recall@100"
    assert (result.trials, result.errors, result.resumed) == (3, 0, False)
    assert result.default is not None and result.default["train.lr"] == 0.001
    assert 1 <= result.best["epochs"] <= 3 and result.best[metric] >= result.default[metric]
    assert result.best[COST] > 0
    rows = result.files.csv.read_text().splitlines()
    assert len(rows) == 4 and rows[0].startswith("train.lr,")
    best = load_config(result.files.best_config, TrainJobConfig)
    assert best.train.lr == result.best["train.lr"] and best.run_name == "tiny-best"
    summary = json.loads(result.files.summary.read_text())
    assert summary["trials"] == 3 and summary["metric"] == metric
    assert "default config" in format_train_sweep(result, metric)
    again = run_train_sweep(sweep, progress=False)
    assert again.resumed and again.trials == 3 and again.best == result.best
