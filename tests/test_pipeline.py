"""The pipeline: stage wiring of the config, and an end-to-end run on a tiny synthetic KG that
writes every stage's files and metrics, skips finished stages on a rerun, and redoes only a
changed stage."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rg.config import ConfigError, load_config, validate_config
from rg.pipeline import PipelineConfig, format_report, run_pipeline
from rg.pipeline.state import STATE_FILE, PipelineState


def tiny(root: Path, cache: Path) -> dict:
    return {
        "output_dir": str(root),
        "split": {"val_fraction": 0.25, "seed": 0},
        "encoder": {"cache_dir": str(cache)},
        "build": {"synthetic": {"seed": 1, "questions": 24}, "subgraph": {"max_triples": 300}, "shard_size": 12,
                  "num_actors": 1},
        "refine": {"selector": "similarity", "num_actors": 1, "actor_cpus": 0.5, "batch_size": 12},
        "train": {"retriever": {"kind": "mlp", "hidden": 8}, "num_workers": 2, "keep_checkpoints": 1,
                  "train": {"epochs": 2, "questions_per_batch": 4, "eval_ks": [10, 100]}},
        "plan": {"planner": {"tiny": {"layers": 1, "hidden": 16, "heads": 2, "max_positions": 72},
                             "lora": {"rank": 4, "alpha": 8}},
                 "train": {"epochs": 2, "batch_size": 8}, "num_workers": 2, "keep_checkpoints": 1,
                 "evaluation": {"beam_widths": [2]}},
        "evaluate": {"ks": [10, 100]},
        "qa": {"chains": {"top_k": 50, "num_actors": 1, "actor_cpus": 0.5, "batch_size": 3},
               "paths": {"retriever": {"kind": "planner", "decode": {"beam_width": 2}}, "top_k": None,
                         "evidence": {"walks": "planned"}, "reader": {"kind": "retriever", "walk_score": "last",
                                                                     "aggregate": "max"},
                         "num_actors": 1, "actor_cpus": 0.5, "batch_size": 3}},
    }


def test_sections_are_wired_together(tmp_path):
    cfg = validate_config(tiny(tmp_path / "run", tmp_path / "cache"), PipelineConfig)
    shards = str(tmp_path / "run" / "build" / "synthetic")
    assert cfg.build.output_dir == str(tmp_path / "run" / "build")
    assert cfg.refine.input == cfg.train.input == cfg.evaluate.input == cfg.qa["chains"].input == shards
    assert cfg.train.labels.source == "refined" and cfg.train.labels.path == str(tmp_path / "run" / "refine" / "labels")
    assert cfg.train.storage_path == str(tmp_path / "run" / "ray_results") and cfg.train.run_name == "pipeline-run-train"
    checkpoint = str(tmp_path / "run" / "train" / "retriever")
    assert [m.kind for m in cfg.evaluate.methods] == ["retriever", "planner", "cosine", "hop_distance"]
    assert cfg.evaluate.methods[0].path == checkpoint == cfg.qa["chains"].retriever.path
    planner = str(tmp_path / "run" / "plan" / "planner")
    assert cfg.evaluate.methods[1].path == planner == cfg.qa["paths"].retriever.path
    assert cfg.plan.labels.source == "refined" and cfg.plan.labels.path == cfg.train.labels.path
    assert cfg.plan.run_name == "pipeline-run-plan" and cfg.plan.split.val_fraction == 0.25
    assert cfg.evaluate.labels == {"refined": str(tmp_path / "run" / "refine" / "labels")}
    assert cfg.evaluate.side == cfg.qa["chains"].side == "val"
    assert cfg.train.split.val_fraction == cfg.qa["chains"].split.val_fraction == 0.25
    assert cfg.qa["chains"].encoder.cache_dir == str(tmp_path / "cache")


def test_a_dualtower_run_takes_the_plan_stage_planner_as_its_brain(tmp_path):
    data = tiny(tmp_path / "run", tmp_path / "cache")
    data["qa"]["dual"] = {"reasoner": "dualtower", "dualtower": {"brain": {"beams": 2}, "privacy": {"mode": "utility"}}}
    data["qa"]["dual_given"] = {"reasoner": "dualtower", "dualtower": {"brain": {"planner": "elsewhere/planner"}}}
    cfg = validate_config(data, PipelineConfig)
    dual = cfg.qa["dual"]
    assert dual.retriever is None and dual.reasoner == "dualtower"
    assert dual.dualtower.brain.kind == "local" and dual.dualtower.brain.beams == 2
    assert dual.dualtower.brain.planner == str(tmp_path / "run" / "plan" / "planner")
    assert cfg.qa["dual_given"].dualtower.brain.planner == "elsewhere/planner"
    assert dual.input == cfg.qa["chains"].input and dual.side == "val" and dual.split.val_fraction == 0.25
    assert dual.output_dir == str(tmp_path / "run" / "qa" / "dual")

    data["plan"] = None
    del data["qa"]["paths"], data["qa"]["dual_given"]
    with pytest.raises(ConfigError, match=r"qa\.dual\.dualtower\.brain: a local Brain without `planner` needs a `plan` stage"):
        validate_config(data, PipelineConfig)


def test_answer_f1_labels_are_searched_on_the_kg_the_build_cut_from(tmp_path):
    data = tiny(tmp_path / "run", tmp_path / "cache")
    data["plan"]["labels"] = {"source": "weak", "weak": {"rule": "answer_f1"}}
    data["train"]["labels"] = {"source": "weak",
                               "weak": {"rule": "answer_f1", "kb": {"path": "kg.tsv", "format": "tsv"}}}
    cfg = validate_config(data, PipelineConfig)
    kb = cfg.plan.labels.weak.kb
    assert (kb.path, kb.format) == (str(tmp_path / "run" / "build" / "dataset" / "kg.txt"), "tsv")
    assert cfg.train.labels.weak.kb.path == "kg.tsv"  # one the section names is kept
    data["plan"]["labels"] = {"source": "weak"}  # the shortest-path rule searches each question's subgraph
    assert validate_config(data, PipelineConfig).plan.labels.weak.kb is None
    data["build"] = {"kb": {"path": "kb.txt", "format": "metaqa"},
                     "questions": [{"name": "q", "path": "q.jsonl", "format": "jsonl"}]}
    data["plan"]["labels"] = {"source": "weak", "weak": {"rule": "answer_f1"}}
    assert validate_config(data, PipelineConfig).plan.labels.weak.kb.path == "kb.txt"


def test_the_demo_plans_on_answer_paths_and_reads_the_planned_walks(tmp_path):
    cfg = load_config(Path(__file__).resolve().parents[1] / "configs" / "demo.yaml", PipelineConfig,
                      [f"output_dir={tmp_path}"])
    assert cfg.plan.labels.weak.rule == "answer_f1"
    assert cfg.plan.labels.weak.kb.path == str(tmp_path / "build" / "dataset" / "kg.txt")
    # the served Brain also learns the synthetic templates' other wordings
    assert (cfg.plan.paraphrases.bank.bank, cfg.plan.paraphrases.per_question) == ("synthetic", 2)
    planner = str(tmp_path / "plan" / "planner")
    for section in (cfg.read, cfg.qa["tuned"], cfg.qa["paths"]):
        retriever = section.retriever
        assert (retriever.kind, retriever.path, section.evidence.walks) == ("planner", planner, "planned")
    assert cfg.qa["dualtower"].dualtower.hand.kind == "local"


def test_a_disabled_stage_takes_its_input_as_a_path(tmp_path):
    cfg = validate_config(
        {"output_dir": str(tmp_path), "input": ["a.parquet", "b.parquet"], "split": {"file": "split.json"},
         "qa": {"baseline": {"retriever": {"kind": "hop_distance"}, "chains": False}}},
        PipelineConfig,
    )
    assert cfg.build is None and cfg.train is None
    assert cfg.qa["baseline"].input == ["a.parquet", "b.parquet"] and cfg.qa["baseline"].side == "test"


@pytest.mark.parametrize(
    "data, message",
    [
        ({"qa": {"x": {"retriever": {"kind": "hop_distance"}}}}, "need questions: set `input`"),
        ({"input": "a", "qa": {"x": {}}}, r"qa\.x: set `retriever`"),
        ({"input": "a", "build": {"synthetic": {}}}, "either `input`"),
        ({"input": "a", "qa": {"bad name": {"retriever": {"kind": "cosine"}}}}, "must be folder names"),
        ({"input": "a", "train": {"retriever": {"kind": "mlp"}, "epochz": 2}}, r"train\.epochz: unknown key"),
        ({"input": "a", "qa": {"x": {"retriever": {"kind": "planner"}}}}, r"qa\.x\.retriever: a planner without `path` needs a `plan` stage"),
    ],
)
def test_config_errors_name_the_fix(tmp_path, data, message):
    with pytest.raises(ConfigError, match=message):
        validate_config({"output_dir": str(tmp_path), **data}, PipelineConfig)


def test_a_stage_run_again_with_an_earlier_config_makes_the_stages_after_it_run_again(tmp_path):
    state = PipelineState(tmp_path)
    state.start("read", "A")
    state.finish("read", "A", 1.0, {})
    first = state.upstream_of("read", "A")
    assert first.startswith("A:") and PipelineState(tmp_path).upstream_of("read", "A") == first  # kept on disk
    state.start("read", "B")  # changed and interrupted
    state.start("read", "A")  # changed back: a new run, not the first one's outputs
    state.finish("read", "A", 1.0, {})
    assert state.upstream_of("read", "A") not in (first, "A")


def test_a_resumed_stage_keeps_its_run_and_an_old_state_passes_the_bare_fingerprint(tmp_path):
    state = PipelineState(tmp_path)
    state.start("train", "A")
    running = state.upstream_of("train", "A")
    state.start("train", "A")  # interrupted, then resumed with the same config
    state.finish("train", "A", 1.0, {})
    assert state.upstream_of("train", "A") == running
    (tmp_path / STATE_FILE).write_text(json.dumps({"stages": {"train": {"fingerprint": "A", "status": "done"}}}))
    assert PipelineState(tmp_path).upstream_of("train", "A") == "A"


def test_untrained_stages_end_to_end_then_skip_and_redo_a_changed_stage(ray_local, tmp_path):
    """The default run's pipeline check, without the two Ray Train stages (the full one is slow below)."""
    root, cache = tmp_path / "run", tmp_path / "cache"
    data = {key: value for key, value in tiny(root, cache).items() if key not in ("train", "plan", "qa")}
    data["evaluate"] = {"ks": [10, 100], "methods": [{"kind": "hop_distance"}]}
    pool = {"retriever": {"kind": "hop_distance"}, "top_k": 50, "num_actors": 1, "actor_cpus": 0.5, "batch_size": 6}
    data["qa"] = {"baseline": pool, "apart": {**pool, "batch_size": 3}, "raw": {**pool, "chains": False}}
    said: list[str] = []
    report = run_pipeline(validate_config(data, PipelineConfig), progress=False, echo=said.append)
    assert [(s.name, s.status) for s in report.stages] == [
        ("build", "ran"), ("refine", "ran"), ("evaluate", "ran"), ("qa/baseline", "ran"), ("qa/apart", "ran"),
        ("qa/raw", "ran")]
    by_name = {s.name: s for s in report.stages}
    assert by_name["refine"].result.metrics["questions"] == by_name["build"].result.metrics["built"] == 24
    assert list(by_name["evaluate"].result.metrics["answer_recall"]) == ["hop_distance"]
    for name in ("baseline", "raw", "apart"):
        rows = (root / f"qa/{name}/predictions.jsonl").read_text().splitlines()
        assert len(rows) == by_name[f"qa/{name}"].result.metrics["overall"]["n"] == 6  # the val side: a quarter of 24
    # baseline and raw differ only in their evidence: one actor pool answered both; apart batches differently
    assert by_name["qa/baseline"].pool == by_name["qa/raw"].pool == ("qa/baseline", "qa/raw")
    assert by_name["qa/apart"].pool == () and by_name["qa/baseline"].seconds == by_name["qa/raw"].seconds
    assert said.index("[4/6] qa/baseline: running") < said.index("[6/6] qa/raw: running") < \
        said.index("      one actor pool answers these 2 QA runs, each model loaded once") < \
        said.index("[5/6] qa/apart: running")
    assert by_name["qa/raw"].result.metrics["chains"] is False
    text = format_report(report)
    assert "| qa/apart | ran |" in text and "| qa/raw | ran | " in text
    assert "‡ one actor pool answered qa/baseline, qa/raw together; the seconds are the pool's" in text

    again = run_pipeline(validate_config(data, PipelineConfig), progress=False, echo=lambda _: None)
    assert [s.status for s in again.stages] == ["skipped"] * 6
    assert [s.result for s in again.stages] == [s.result for s in report.stages]
    assert [s.pool for s in again.stages] == [s.pool for s in report.stages]  # kept in the state
    data["evaluate"]["ks"] = [5, 10, 100]
    data["qa"]["raw"]["top_k"] = 20
    changed = run_pipeline(validate_config(data, PipelineConfig), progress=False, echo=lambda _: None)
    assert [s.status for s in changed.stages] == ["skipped", "skipped", "ran", "skipped", "skipped", "ran"]
    assert changed.stages[-1].pool == ()  # alone this time: its pool mates are finished
    assert json.loads((root / "evaluate/retrieval.json").read_text())["results"][0]["ks"] == [5, 10, 100]


@pytest.mark.mission  # the whole flow and its resume
@pytest.mark.slow  # two Ray Train stages: 205 s of the default run's 25 minutes; the test above checks the rest
def test_end_to_end_then_resume(ray_local, tmp_path):
    root, cache = tmp_path / "run", tmp_path / "cache"
    data = tiny(root, cache)
    report = run_pipeline(validate_config(data, PipelineConfig), progress=False, echo=lambda _: None)
    assert [(s.name, s.status) for s in report.stages] == [
        ("build", "ran"), ("refine", "ran"), ("train", "ran"), ("plan", "ran"), ("evaluate", "ran"),
        ("qa/chains", "ran"), ("qa/paths", "ran"),
    ]
    for path in ("build/build_report.json", "build/synthetic", "refine/labels", "refine/refine_report.json",
                 "train/retriever", "train/train_report.json", "plan/planner", "plan/train_report.json",
                 "qa/paths/predictions.jsonl", "evaluate/retrieval.md", "evaluate/retrieval.png",
                 "qa/chains/qa.json", "qa/chains/qa.md", "qa/chains/qa.png", "qa/chains/predictions.jsonl",
                 "pipeline_report.json", "pipeline.md", STATE_FILE):
        assert (root / path).exists(), path

    by_name = {s.name: s.result for s in report.stages}
    assert by_name["build"].metrics["questions"] == 24
    assert by_name["refine"].metrics["questions"] == by_name["build"].metrics["built"]
    assert 0.0 <= by_name["train"].metrics["best_value"] <= 1.0
    assert 0.0 <= by_name["plan"].metrics["best_value"] <= 1.0 and "planner on refined paths" in by_name["plan"].result
    methods = list(by_name["evaluate"].metrics["answer_recall"])
    assert methods[0] == "mlp:refined" and methods[1] == "planner:refined"
    assert methods[2].startswith("cosine:") and methods[3] == "hop_distance"
    paths = [json.loads(row) for row in (root / "qa/paths/predictions.jsonl").read_text().splitlines()]
    assert {p["evidence_walks"] for p in paths} <= {"planned", "bfs_fallback"} and paths[0]["scorer"] == "planner:refined"
    assert "| paths | planner:refined | retriever_scores | chains of the decoded paths |" in format_report(report)
    qa = json.loads((root / "qa/chains/qa.json").read_text())
    overall = qa["summary"]["overall"]
    rows = (root / "qa/chains/predictions.jsonl").read_text().splitlines()
    assert overall["n"] == len(rows) == round(0.25 * by_name["build"].metrics["built"])  # the val side
    assert overall == by_name["qa/chains"].metrics["overall"]
    assert 0.0 <= overall["hit"] <= 1.0 and overall["llm_calls"] == 0.0 and qa["run"]["scorer"] == "mlp:refined"
    text = format_report(report)
    assert "| qa/chains | ran |" in text and "| chains | mlp:refined | retriever_scores | chains, top 50 |" in text
    assert str(root / "qa/chains/qa.png") in text

    again = run_pipeline(validate_config(data, PipelineConfig), progress=False, echo=lambda _: None)
    assert [s.status for s in again.stages] == ["skipped"] * 7
    assert [s.result for s in again.stages] == [s.result for s in report.stages]

    data["evaluate"] = {"ks": [5, 10, 100]}
    changed = run_pipeline(validate_config(data, PipelineConfig), progress=False, echo=lambda _: None)
    assert [s.status for s in changed.stages] == ["skipped"] * 4 + ["ran", "skipped", "skipped"]
    assert json.loads((root / "evaluate/retrieval.json").read_text())["results"][0]["ks"] == [5, 10, 100]
