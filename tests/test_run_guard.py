"""A run resumes only under the settings it was started with (rg.run.guard)."""

from __future__ import annotations

import json

import pytest
from pydantic import Field

from rg.config import Config
from rg.run.guard import RUN_CONFIG_FILE, check_run_config, defining_settings


class Train(Config):
    epochs: int = 2
    lr: float = 0.001


class Job(Config):
    input: str = "data"
    train: Train = Field(default_factory=Train)
    num_workers: int = 2
    output_dir: str = "out"


def test_defining_settings_leave_out_what_may_change():
    assert defining_settings(Job()) == {"input": "data", "train.lr": 0.001}


def test_record_then_check(tmp_path):
    assert check_run_config(str(tmp_path), "run", Job()) is False
    assert json.loads((tmp_path / "run" / RUN_CONFIG_FILE).read_text()) == {"input": "data", "train.lr": 0.001}
    longer = Job(train=Train(epochs=5), num_workers=4, output_dir="elsewhere")
    assert check_run_config(str(tmp_path), "run", longer) is True
    with pytest.raises(ValueError) as err:
        check_run_config(str(tmp_path), "run", Job(input="other", train=Train(lr=0.01)))
    message = str(err.value)
    assert "input: 'data' -> 'other'; train.lr: 0.001 -> 0.01" in message
    assert "Fix: set a new `run_name`" in message and str(tmp_path / "run") in message
    assert check_run_config(str(tmp_path), "another", Job(input="other")) is False  # a new name is a new run
    assert check_run_config("s3://bucket/runs", "run", Job()) is False  # remote storage is not checked
    record = tmp_path / "run" / RUN_CONFIG_FILE
    record.write_text(json.dumps({"input": "data", "train.lr": 0.001, "old_field": 1}))
    assert check_run_config(str(tmp_path), "run", Job()) is True  # fields of another rg version are not compared


def test_worker_placement_is_validated_and_may_change_on_resume():
    from rg.jobs.refine import RefineConfig
    from rg.jobs.train_retriever import TrainJobConfig

    base = {"input": "data", "run_name": "run", "output_dir": "out"}
    placed = TrainJobConfig.model_validate({**base, "resources_per_worker": {"CPU": 0, "trainer": 1}})
    assert placed.resources_per_worker == {"CPU": 0.0, "trainer": 1.0}
    assert defining_settings(placed) == defining_settings(TrainJobConfig.model_validate(base))
    with pytest.raises(ValueError, match="resources_per_worker"):
        TrainJobConfig.model_validate({**base, "resources_per_worker": {"trainer": -1}})
    refine = RefineConfig.model_validate({"input": "data", "output_dir": "out", "actor_resources": {"selector": 1}})
    assert refine.actor_resources == {"selector": 1.0}
    with pytest.raises(ValueError, match="actor_resources"):
        RefineConfig.model_validate({"input": "data", "output_dir": "out", "actor_resources": {"selector": 0}})


class Reader(Config):
    machine_ids: str = "elided"


class ReaderJob(Config):
    input: str = "data"
    reader: Reader = Field(default_factory=Reader)


def test_a_run_recorded_before_a_changed_default_does_not_resume_under_it(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / RUN_CONFIG_FILE).write_text(json.dumps({"input": "data"}))  # an older rg's record
    with pytest.raises(ValueError, match="reader.machine_ids: 'shown' -> 'elided'"):
        check_run_config(str(tmp_path), "run", ReaderJob())
    assert check_run_config(str(tmp_path), "run", ReaderJob(reader=Reader(machine_ids="shown"))) is True
    assert check_run_config(str(tmp_path), "new", ReaderJob()) is False
    assert check_run_config(str(tmp_path), "new", ReaderJob()) is True
