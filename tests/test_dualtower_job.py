"""``reasoner: dualtower`` in the QA evaluation: config rules name the key and the fix, and the
Ray Data actor answers RoG rows (inference views: no gold answers) with the controller and a
saved planner checkpoint as the local Brain."""

from __future__ import annotations

import asyncio
import json

import pyarrow as pa
import pytest

from rg.config import ConfigError, validate_config
from rg.evaluation.dualtower_qa import load_schema
from rg.evaluation.qa import Prediction
from rg.evaluation.qa_job import QAEvaluateConfig, _QAActor
from tests.dualtower_world import QUESTIONS, TRIPLES, schema, shared_planner

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


def test_the_actor_answers_inference_views_with_the_controller(checkpoint, tmp_path):
    kg_schema = schema()
    kg_schema.save(tmp_path)
    cfg = validate_config({**BASE, "reasoner": "dualtower", "schema_dir": str(tmp_path), "dualtower": {
        "brain": {"planner": str(checkpoint)}, "similarity": "lexical"}}, QAEvaluateConfig)
    rows = [{"id": f"q{i}", "question": q, "answer": [a], "q_entity": list(topics), "a_entity": [a],
             "graph": [list(t) for t in TRIPLES], "choices": []} for i, (q, topics, a) in enumerate(QUESTIONS[:4])]
    out = asyncio.run(_QAActor(cfg)(pa.Table.from_pylist(rows)))
    predictions = [Prediction.from_dict(json.loads(p)) for p in out["prediction"]]
    assert [p.answers[0] for p in predictions] == [a for _, _, a in QUESTIONS[:4]]
    assert all(p.scorer == "dualtower" and p.reader.startswith("dualtower:planner:") for p in predictions)
    assert all(1 <= p.usage.calls <= 2 for p in predictions)  # Brain calls per question
    assert list(out["covered"]) == [True] * 4


def test_the_job_runs_the_dualtower_reasoner_through_ray_data(ray_local, checkpoint, tmp_path):
    from rg.data.rog import write_rog_parquet
    from rg.data.sample import Sample
    from rg.evaluation.qa_job import evaluate_qa

    samples = [Sample(f"q{i}", q, (a,), topics, (a,), TRIPLES) for i, (q, topics, a) in enumerate(QUESTIONS)]
    write_rog_parquet(samples, tmp_path / "samples.parquet")
    schema().save(tmp_path)
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
