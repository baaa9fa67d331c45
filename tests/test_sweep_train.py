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
from tests.test_storage_root import as_submitted_job  # noqa: F401 — fixture
from tests.test_training_ray import encoder_cache  # noqa: F401 — fixture
from tune.train import COST, ReleaseStoppedRuns, driver_request, format_train_sweep, run_train_sweep


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
        "scheduler": {"grace_period": 1, "reduction_factor": 2},
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


def relative_sweep(folder) -> str:
    """A sweep whose file, base config and swept values all hold relative paths."""
    (folder / "base.yaml").write_text(yaml.safe_dump({
        "kind": "train", "input": ["subgraphs/1hop", "/abs/2hop"], "run_name": "r", "output_dir": "o",
        "retriever": {"kind": "mlp"}, "encoder": {"cache_dir": "cache"},
        "labels": {"source": "refined", "path": "labels/a"},
        "split": {"file": "@shared/splits/metaqa_split.json.gz"},
    }))
    (folder / "sweep.yaml").write_text(yaml.safe_dump({
        "kind": "sweep_train", "base": str(folder / "base.yaml"), "name": "s", "output_dir": "sweeps/s",
        "space": {"labels.path": ["labels/a", "labels/b"]},
    }))
    return str(folder / "sweep.yaml")


def test_trials_see_paths_resolved_before_tune_moves_them(tmp_path, monkeypatch):
    """Tune runs each trial in its own folder: the sweep resolves the base's and the points' relative
    paths, and its output folder, against the folder it started in, and a trial elsewhere gets the same."""
    from rg.data.storage import paths_root

    monkeypatch.delenv("RAY_JOB_CONFIG_JSON_ENV_VAR", raising=False)
    monkeypatch.delenv("RG_SHARED_DATA", raising=False)
    monkeypatch.chdir(tmp_path)
    sweep = load_config(relative_sweep(tmp_path), SweepTrainConfig)
    root = paths_root(None)
    assert root == str(tmp_path)
    data, cls = sweep.load_base(root)
    assert data["input"] == [str(tmp_path / "subgraphs/1hop"), "/abs/2hop"]
    assert data["encoder"]["cache_dir"] == str(tmp_path / "cache")
    assert data["split"]["file"] == "@shared/splits/metaqa_split.json.gz"  # outside a submitted job: as it was
    trial_folder = tmp_path / "trial_dir"
    trial_folder.mkdir()
    monkeypatch.chdir(trial_folder)  # what Tune does before a trial runs
    cfg = sweep.trial_config(data, cls, {"labels.path": "labels/b"}, root)
    assert cfg.labels.path == str(tmp_path / "labels/b") and cfg.input[0] == str(tmp_path / "subgraphs/1hop")
    assert cfg.storage_path == str(tmp_path / "sweeps/s/runs")
    assert cfg.output_dir == str(tmp_path / "sweeps/s/models" / cfg.run_name)


def test_a_submitted_sweep_resolves_against_the_storage_root(tmp_path, monkeypatch, as_submitted_job):  # noqa: F811
    """Under `ray job submit` the sweep, its base and its trials write and read under the storage root."""
    from rg.data.storage import StorageRootError, paths_root

    monkeypatch.delenv("RG_SHARED_DATA", raising=False)
    monkeypatch.chdir(tmp_path)
    sweep_file = relative_sweep(tmp_path)
    assert paths_root(None) is None
    with pytest.raises(StorageRootError, match=r"`cache_dir: cache` is relative.*Fix: set RG_STORAGE_ROOT"):
        load_config(sweep_file, SweepTrainConfig).load_base(paths_root(None))
    with pytest.raises(StorageRootError, match="RG_SHARED_DATA"):
        load_config(sweep_file, SweepTrainConfig).load_base(str(tmp_path / "store"))
    monkeypatch.setenv("RG_SHARED_DATA", str(tmp_path))
    monkeypatch.setenv("RG_STORAGE_ROOT", str(tmp_path / "store"))
    root = paths_root(None)
    sweep = load_config(sweep_file, SweepTrainConfig)
    data, cls = sweep.load_base(root)
    cfg = sweep.trial_config(data, cls, {"labels.path": "labels/b"}, root)
    store = tmp_path / "store"
    assert (cfg.input, cfg.labels.path) == ([str(store / "subgraphs/1hop"), "/abs/2hop"], str(store / "labels/b"))
    assert cfg.encoder.cache_dir == str(store / "cache") and cfg.storage_path == str(store / "sweeps/s/runs")


def test_submitted_sweep_without_a_root_exits_2_before_any_work(tmp_path, monkeypatch, capsys, job_line,
                                                                 as_submitted_job):  # noqa: F811
    from rg.cli import run_job
    from tune.sweep import main

    monkeypatch.delenv("RG_SHARED_DATA", raising=False)
    monkeypatch.chdir(tmp_path)
    sweep_file = relative_sweep(tmp_path)
    assert run_job("tune.sweep", main, ["--config", sweep_file]) == 2
    assert "`output_dir: sweeps/s` is relative" in job_line(capsys.readouterr().err, "tune.sweep")
    # With a root for the sweep's own folder, the base's `@shared/` split still needs RG_SHARED_DATA:
    # the base is resolved too, before Ray starts.
    assert run_job("tune.sweep", main, ["--config", sweep_file, "--set", f"storage_root={tmp_path}"]) == 2
    assert "RG_SHARED_DATA" in job_line(capsys.readouterr().err, "tune.sweep")
    assert not (tmp_path / "sweeps").exists()


def test_a_driver_that_needs_no_cpu_is_still_a_valid_trial():
    """The default `driver_resources: {CPU: 0}` used to make Tune refuse the trainable (an empty bundle)."""
    from ray import tune

    assert driver_request({"CPU": 0.0}) == {"CPU": 0.0, "memory": 1}
    assert driver_request({"tune_driver": 1}) == {"tune_driver": 1}
    with pytest.raises(ValueError, match="empty head"):
        tune.with_resources(lambda config: None, {"CPU": 0.0})
    trainable = tune.with_resources(lambda config: None, driver_request({"CPU": 0.0}))
    assert trainable._resources.required_resources == {"memory": 1.0}
