"""The tuned reader's Ray Train job: two DDP workers, sharded validation, export, resume, and the
QA evaluation reading with the exported reader (real SmolLM2-135M, hop-distance evidence)."""

from __future__ import annotations

import asyncio
import json

import pytest

from rg.data.rog import read_rog
from rg.evaluation.qa import TunedReaderChoice, answer_questions, build_reader, inference_view
from rg.evaluation.scorers import HopDistanceScorer
from rg.evidence import EvidenceConfig
from rg.models import REGISTRY, ModelNotAvailableError
from rg.jobs.harness import REPORT_FILE
from rg.jobs.train_reader import ReaderTrainConfig, fit_depth, format_reader_report, train_reader
from rg.training.shards import side_rows
from tests.synthetic_data import write_synthetic_parquet


@pytest.fixture(scope="module")
def reader_parquet(tmp_path_factory):
    """24 synthetic questions (seed 3) with subgraphs capped at 60 triples, as one RoG parquet file."""
    try:
        REGISTRY["smollm2-135m"].locate()
    except ModelNotAvailableError as err:
        pytest.skip(str(err))
    path = tmp_path_factory.mktemp("rog") / "synthetic.parquet"
    write_synthetic_parquet(path, questions=24, max_triples=60, seed=3)
    return path


def config(parquet, tmp_path, epochs: int) -> ReaderTrainConfig:
    return ReaderTrainConfig.model_validate({
        "input": str(parquet), "split": {"val_fraction": 0.25, "seed": 0},
        "retriever": {"kind": "hop_distance"}, "top_k": 30, "evidence": {"merge_entities": False},
        "reader": {"max_lines": 6, "max_prompt_tokens": 200, "max_answers": 2},
        "train": {"epochs": epochs, "lr": 0.002, "batch_size": 4}, "max_val_questions": 4,
        "num_workers": 2, "run_name": "test_reader", "storage_path": str(tmp_path / "ray_results"),
        "output_dir": str(tmp_path / "out"), "ray": {"num_cpus": 2},
    })


def test_the_depth_predictor_is_fitted_on_the_training_side_and_scored_on_the_validation_side(reader_parquet, tmp_path):
    from rg.data.splits import load_split_samples
    from rg.reasoning.dualtower.template import topic_template
    from rg.reasoning.hops import HopPredictor
    from rg.text import TextEncoder

    cfg = config(reader_parquet, tmp_path, epochs=1)
    report = fit_depth(cfg, tmp_path / "hops")
    sides = load_split_samples(cfg.input, cfg.split, ("train", "val"), cfg.limit, graph=False)
    assert (report["train_questions"], report["val_questions"]) == (len(sides["train"]), len(sides["val"]))
    predictor = HopPredictor.load(tmp_path / "hops")
    assert sorted(predictor.hops.tolist()) == sorted(s.hops for s in sides["train"])
    val = sides["val"]
    predicted = predictor.predict([topic_template(s.question, s.q_entities) for s in val], TextEncoder(cfg.encoder))
    assert report["val_accuracy"] == sum(p == s.hops for p, s in zip(predicted, val)) / len(val)


@pytest.mark.slow  # two Ray Train runs; the README's main command (the demo) trains the reader on Ray Train too
def test_two_workers_train_export_resume_and_answer(ray_local, reader_parquet, tmp_path):
    report = train_reader(config(reader_parquet, tmp_path, epochs=1))
    assert report["train_examples"] + report["train_questions_without_gold_in_evidence"] == report["train_questions"]
    assert report["train_examples"] >= 2 and report["num_workers"] == 2 and not report["resumed"]
    [row] = report["history"]
    assert row["world_size"] == 2.0 and row["val_questions"] == 4.0  # both shards' counts were summed
    assert 0.0 <= row["val_hits_at_1"] <= row["val_hit"] <= 1.0
    assert json.loads((tmp_path / "out" / REPORT_FILE).read_text())["best_epoch"] == 0
    # the workers say what `auto` meant for them: fp32 under the tests' AVX2 pin (tests/conftest.py)
    assert report["precision"] == {"setting": "auto", "base_weights": "fp32"}

    resumed = train_reader(config(reader_parquet, tmp_path, epochs=2))
    assert resumed["resumed"] and [int(r["epoch"]) for r in resumed["history"]] == [0, 1]

    reader = build_reader(TunedReaderChoice(kind="tuned", checkpoint=resumed["reader_dir"]))
    # the checkpoint records the evidence settings it was trained on, for QA runs to compare theirs with
    assert reader.settings.evidence == EvidenceConfig(merge_entities=False)
    samples = [inference_view(s) for s in list(read_rog(reader_parquet))[:3]]
    predictions = asyncio.run(answer_questions(samples, HopDistanceScorer(), reader, top_k=30))
    assert [p.reader for p in predictions] == ["tuned:smollm2-135m+lora"] * 3
    assert all(p.ok and 1 <= len(p.answers) <= 2 for p in predictions)


@pytest.mark.slow  # a Ray Train run of two short epochs
def test_without_validation_the_last_epoch_is_kept(ray_local, reader_parquet, tmp_path):
    cfg = config(reader_parquet, tmp_path, epochs=2).model_copy(
        update={"max_val_questions": 0, "max_train_questions": 8, "num_workers": 1})
    report = train_reader(cfg)
    assert report["metric"] == "epoch" and report["best_epoch"] == 1 and report["val_questions"] == 0
    assert [int(r["epoch"]) for r in report["history"]] == [0, 1]
    assert not any(key.startswith("val_") for row in report["history"] for key in row)  # nothing was read
    assert "epoch 1 kept, the last (no validation: max_val_questions is 0)" in format_reader_report(report)
    assert build_reader(TunedReaderChoice(kind="tuned", checkpoint=report["reader_dir"])).settings.max_answers == 2


@pytest.mark.slow  # 45 s; the README's main command streams the reader's examples on Ray Train
def test_streamed_examples_equal_the_driver_built_ones(ray_local, reader_parquet, tmp_path):
    """Ray Data actors score, build evidence and tokenise what the driver used to (examples_on: driver), in order."""
    import pickle

    from rg.models.registry import resolve_model
    from rg.jobs.train_reader import _driver_input, _streamed_input

    cfg = config(reader_parquet, tmp_path, epochs=1).model_copy(update={"max_train_questions": 14})
    base = resolve_model(cfg.reader.base)
    before = _driver_input(cfg.model_copy(update={"examples_on": "driver"}), base)
    after = _streamed_input(cfg, base)
    counts = lambda d: (d.train_questions, d.val_questions, d.train_examples, d.skipped, d.prompt_tokens)  # noqa: E731
    assert counts(after) == counts(before) and before.train_questions == 14 and before.train_examples >= 2
    rows = lambda ds, column: [pickle.loads(r[column]) for r in side_rows(ds)]  # noqa: E731
    assert rows(after.train, "example") == rows(before.train, "example")
    assert rows(after.val, "item") == rows(before.val, "item") and before.val_questions == 4
