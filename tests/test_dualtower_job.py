"""``reasoner: dualtower`` in the QA evaluation: config rules name the key and the fix, and the
Ray Data actor answers RoG rows (inference views: no gold answers) with the controller and a
saved planner checkpoint as the local Brain."""

from __future__ import annotations

import asyncio
import json

import pyarrow as pa
import pytest

from rg.config import ConfigError, validate_config
from rg.evaluation.dualtower_qa import check_brain_view, load_schema
from rg.evaluation.qa import Prediction
from rg.jobs.evaluate_qa import QAEvaluateConfig
from rg.jobs.qa_pool import QAActor
from rg.privacy.schema import KGSchema
from rg.reasoning.dualtower import DualTowerConfig
from rg.retrievers.base import CheckpointMeta
from tests.dualtower_world import QUESTIONS, TRIPLES, schema, shared_planner, write_qa_input

BASE = {"input": "x", "output_dir": "out", "side": "test"}


def test_reasoner_rules_name_the_key_and_the_fix():
    with pytest.raises(ConfigError, match="reasoner is 'dualtower' but `dualtower` is not set. Fix"):
        validate_config({**BASE, "reasoner": "dualtower"}, QAEvaluateConfig)
    with pytest.raises(ConfigError, match="retriever is not set.*Fix"):
        validate_config(BASE, QAEvaluateConfig)
    cfg = validate_config({**BASE, "reasoner": "dualtower", "dualtower": {"brain": {"planner": "p"}}}, QAEvaluateConfig)
    assert cfg.dualtower.w_max == 3 and cfg.retriever is None
    with pytest.raises(FileNotFoundError, match="schema_dir .* Fix"):
        load_schema("/nonexistent")


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    folder = tmp_path_factory.mktemp("planner") / "planner"
    shared_planner().save(folder)
    return folder


def test_a_local_brain_must_write_the_relations_of_the_view_it_reads(checkpoint, tmp_path):
    kg_schema = schema()
    (tmp_path / "schema").mkdir()
    (tmp_path / "other").mkdir()
    kg_schema.save(tmp_path / "schema")
    KGSchema(types={}, clusters={"directed_by": "rel_99 (type_01→type_02)"}).save(tmp_path / "other")
    raw, view = tmp_path / "raw", tmp_path / "view"
    shared_planner().save(raw, CheckpointMeta(extra={"relation_view": "raw"}))
    shared_planner().save(view, CheckpointMeta(extra={"relation_view": "privacy"}))
    meta = json.loads((view / "meta.json").read_text())
    meta["extra"]["relations"] = sorted(set(kg_schema.clusters.values()))  # what a cluster-view planner writes
    (view / "meta.json").write_text(json.dumps(meta))

    def config(planner, mode):
        return DualTowerConfig(brain={"planner": str(planner)}, privacy={"mode": mode})

    check_brain_view(config(raw, "utility"), None)
    check_brain_view(config(view, "privacy"), str(tmp_path / "schema"))
    check_brain_view(config(checkpoint, "privacy"), None)  # no recorded view: nothing to check
    with pytest.raises(ValueError, match=r"dualtower\.brain\.planner .* writes relation clusters .* "
                                         r"Fix: set dualtower\.privacy\.mode=privacy"):
        check_brain_view(config(view, "utility"), str(tmp_path / "schema"))
    with pytest.raises(ValueError, match=r"writes raw relations.*Fix: train the planner on the cluster view"):
        check_brain_view(config(raw, "privacy"), str(tmp_path / "schema"))
    with pytest.raises(ValueError, match=r"schema_dir is null.*Fix: set schema_dir"):
        check_brain_view(config(view, "privacy"), None)
    with pytest.raises(ValueError, match=r"cluster label\(s\) that schema_dir .* does not have .* another schema"):
        check_brain_view(config(view, "privacy"), str(tmp_path / "other"))


def test_the_actor_answers_inference_views_with_the_controller(checkpoint, tmp_path):
    kg_schema = schema()
    kg_schema.save(tmp_path)
    cfg = validate_config({**BASE, "reasoner": "dualtower", "schema_dir": str(tmp_path), "dualtower": {
        "brain": {"planner": str(checkpoint)}, "similarity": "lexical"}}, QAEvaluateConfig)
    rows = [{"id": f"q{i}", "question": q, "answer": [a], "q_entity": list(topics), "a_entity": [a],
             "graph": [list(t) for t in TRIPLES], "choices": []} for i, (q, topics, a) in enumerate(QUESTIONS[:4])]
    out = asyncio.run(QAActor({"dt": cfg})(pa.Table.from_pylist(rows)))
    predictions = [Prediction.from_dict(json.loads(p)) for p in out["prediction"]]
    assert [p.answers[0] for p in predictions] == [a for _, _, a in QUESTIONS[:4]]
    assert all(p.scorer == "dualtower" and p.reader.startswith("dualtower:planner:") for p in predictions)
    assert all(1 <= p.usage.calls <= 2 for p in predictions)  # Brain calls per question
    assert list(out["covered"]) == [True] * 4 and list(out["run"]) == ["dt"] * 4


def test_the_job_runs_the_dualtower_reasoner_through_ray_data(ray_local, checkpoint, tmp_path):
    from rg.jobs.evaluate_qa import evaluate_qa

    write_qa_input(tmp_path)
    cfg = validate_config({"input": str(tmp_path / "samples.parquet"), "output_dir": str(tmp_path / "out"),
                           "side": "all", "reasoner": "dualtower", "schema_dir": str(tmp_path),
                           "dualtower": {"brain": {"planner": str(checkpoint)}, "similarity": "lexical"},
                           "num_actors": 1, "actor_cpus": 0.5, "batch_size": 4}, QAEvaluateConfig)
    result = evaluate_qa(cfg, progress=False)
    assert result.summary.overall.n == len(QUESTIONS) and result.summary.overall.hits_at_1 == 1.0
    assert result.run["reasoner"] == "dualtower" and 1.0 <= result.run["brain_calls_per_question"] <= 2.0
    rows = [json.loads(line) for line in result.files.predictions.read_text().splitlines()]
    assert [r["id"] for r in rows] == [f"q{i}" for i in range(len(QUESTIONS))]
    assert all(r["scorer"] == "dualtower" for r in rows)


def test_the_job_report_totals_what_the_brain_endpoint_received(ray_local, tmp_path):
    from rg.jobs.evaluate_qa import evaluate_qa
    from tests.scripted_server import Respond, Script, ScriptedServer
    from tests.test_dualtower_wire import brain

    write_qa_input(tmp_path)
    with ScriptedServer(Script.always(Respond(brain))) as server:
        cfg = validate_config({"input": str(tmp_path / "samples.parquet"), "output_dir": str(tmp_path / "out"),
                               "side": "all", "reasoner": "dualtower", "schema_dir": str(tmp_path),
                               "dualtower": {"similarity": "lexical", "brain": {"kind": "llm", "llm": {
                                   "base_url": server.base_url, "model": "scripted", "side": "brain"}}},
                               "num_actors": 1, "actor_cpus": 0.5, "batch_size": 4}, QAEvaluateConfig)
        result = evaluate_qa(cfg, progress=False)
        texts = ["\n".join(m["content"] for m in r.body["messages"]) for r in server.chat_requests]
    report = json.loads((tmp_path / "out" / "qa.json").read_text())["run"]["exposure"]
    assert report == result.run["exposure"] and report["questions"] == len(QUESTIONS)
    brain_side = report["by_side"]["brain"]
    assert brain_side["requests"] == brain_side["brain_calls"] == len(texts) >= len(QUESTIONS)
    assert brain_side["request_chars"] == sum(len(t) for t in texts) and brain_side["refused"] == {}
    assert report["by_side"]["hand"]["calls"] == 0
