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
from tests.dualtower_world import QUESTIONS, TRIPLES, schema, trained_planner

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
    trained_planner(epochs=60).save(folder)
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
