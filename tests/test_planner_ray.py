"""Ray Train planner training (rg.training.planner_ray): 2 CPU workers under DDP (gloo) write a
loadable adapter checkpoint, the report scores it, and a resubmitted run resumes — the second
submission goes through ``python -m jobs.train``'s dispatch on the config kind."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest
import yaml

from jobs.train import main as train_main
from rg.config import load_config
from rg.data.rog import read_rog
from rg.evaluation.qa import answer_questions, inference_view
from rg.reasoning import RetrieverReader, RetrieverReaderConfig
from rg.retrievers.planner import DecodeConfig, load_planner, plan_questions, read_planner_meta
from rg.retrievers.planner.scorer import PlannerScorer
from rg.training.planner_ray import REPORT_FILE, PlannerTrainConfig, pack_folder, train_planner, unpack_folder


def config_dict(parquet, tmp_path, epochs: int) -> dict:
    return {
        "kind": "train_planner",
        "input": str(parquet),
        "planner": {"tiny": {"layers": 1, "hidden": 32, "heads": 4, "max_positions": 48}, "max_prompt_tokens": 32},
        "train": {"epochs": epochs, "batch_size": 8, "lr": 0.005},
        "labels": {"source": "weak", "weak": {"rule": "answer_f1"}},
        "num_workers": 2,
        "run_name": "test_planner",
        "storage_path": str(tmp_path / "ray_results"),
        "keep_checkpoints": 1,
        "output_dir": str(tmp_path / "out"),
        "evaluation": {"side": "val", "beam_widths": [2]},
    }


def test_pack_round_trip(tmp_path):
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "f.txt").write_text("x")
    out = unpack_folder(pack_folder(tmp_path / "a"), tmp_path / "c")
    assert (out / "b" / "f.txt").read_text() == "x"


# slow (1.5 min): the pipeline's end-to-end test trains the planner on Ray Train in the default run
@pytest.mark.slow
def test_two_workers_write_a_loadable_adapter_checkpoint(ray_local, synthetic_parquet, tmp_path):
    data = {k: v for k, v in config_dict(synthetic_parquet, tmp_path, 2).items() if k != "kind"}
    report = train_planner(PlannerTrainConfig.model_validate(data))
    assert report["resumed"] is False and report["epochs_run"] == [0, 1]
    assert report["train_targets"]["questions_answer_f1"] > 0 and report["weak_rule"] == "answer_f1"
    assert report["train_examples"] >= report["train_targets"]["questions_answer_f1"]
    for row in report["history"]:
        assert row["world_size"] == 2
        for key in ("train_loss", "val_loss", "val_token_accuracy", "val_path_exact_match"):
            assert key in row
    assert report["best_epoch"] in (0, 1)

    folder = tmp_path / "out" / "planner"
    assert (folder / "adapter" / "adapter_model.safetensors").is_file()
    assert (folder / "tokenizer" / "tokenizer.json").is_file()
    assert (folder / "base" / "config.json").is_file()
    meta = read_planner_meta(folder)
    assert meta.label_source == "weak" and meta.prompt_ids == ("plan_relation_paths@v1",)
    assert meta.extra["epoch"] == report["best_epoch"]
    assert json.loads((tmp_path / "out" / REPORT_FILE).read_text())["planner_dir"] == str(folder)
    assert report["evaluation"]["scored_on"] == "ray_data"  # the side's subgraphs stay off the driver
    rows = [r for r in report["evaluation"]["scores"] if r["group"] == "all"]
    assert {r["group"] for r in report["evaluation"]["scores"]} > {"all"}  # by hop count too
    assert [(r["mode"], r["beam_width"]) for r in rows] == [("constrained", 2), ("unconstrained", 2)]
    assert rows[0]["groundable_fraction"] == 1.0

    planner = load_planner(folder)
    sample = next(iter(read_rog(synthetic_parquet)))
    plan = plan_questions(planner, [sample], DecodeConfig(beam_width=2))[0]
    assert plan.paths and all(p.grounded for p in plan.paths)

    # the planner as a triple scorer: with one beam, the last triples of its walks score high and
    # the other triples of its walks rank above the triples on no walk
    scorer = PlannerScorer(folder, DecodeConfig(beam_width=1))
    samples = list(read_rog(synthetic_parquet))[:6]
    scores = scorer.score(samples)
    assert scorer.name == "planner:weak" and [s.shape for s in scores] == [(len(x.triples),) for x in samples]
    for x, plan, row in zip(samples, scorer.plans, scores):
        last = {walk.triple_ids[-1] for walk, _ in plan.reasoning_paths if walk.end not in x.q_entities}
        assert sorted(np.flatnonzero(row > 0).tolist()) == sorted(last)
        assert sorted(np.flatnonzero(row > row.min()).tolist()) == list(plan.triple_ids)
    reader = RetrieverReader(RetrieverReaderConfig(walk_score="last"))
    predictions = asyncio.run(answer_questions([inference_view(x) for x in samples], scorer, reader, top_k=50))
    assert [p.id for p in predictions] == [x.id for x in samples]
    assert all(p.failure is None and p.answers and p.scorer == "planner:weak" for p in predictions)


@pytest.mark.slow
def test_jobs_train_dispatches_and_resumes(ray_local, synthetic_parquet, tmp_path):
    path = tmp_path / "planner.yaml"
    for epochs in (1, 2):
        path.write_text(yaml.safe_dump(config_dict(synthetic_parquet, tmp_path, epochs)))
        load_config(path, PlannerTrainConfig)
        assert train_main(["--config", str(path)]) == 0
        report = json.loads((tmp_path / "out" / REPORT_FILE).read_text())
    assert report["resumed"] is True and report["start_epoch"] == 1 and report["epochs_run"] == [1]
    assert [int(r["epoch"]) for r in report["history"]] == [0, 1]
