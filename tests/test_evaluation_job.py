"""The retrieval evaluation job: a trained checkpoint next to a baseline, end to end."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rg.config import ConfigError, validate_config
from rg.data.rog import read_rog
from rg.evaluation.job import EvaluateConfig, evaluate
from rg.evaluation.retriever_scorer import RetrieverScorer
from rg.retrievers.base import CheckpointMeta
from rg.retrievers.registry import build_retriever
from rg.text.encoder import EncoderConfig, TextEncoder
from tests.synthetic_data import write_synthetic_parquet


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("evaluate")
    write_synthetic_parquet(tmp / "samples.parquet", questions=30, max_triples=150)
    encoder_cfg = EncoderConfig(cache_dir=str(tmp / "cache"))
    encoder = TextEncoder(encoder_cfg)
    model = build_retriever("mlp", {"kind": "mlp", "hidden": 8})
    model.save(tmp / "retriever", CheckpointMeta(label_source="weak", encoder_model_id=encoder.model_id))
    return tmp, encoder_cfg, encoder


def test_retriever_scorer_scores_every_triple(setup):
    tmp, _, encoder = setup
    samples = list(read_rog(tmp / "samples.parquet"))[:5]
    scorer = RetrieverScorer(tmp / "retriever", encoder, batch_questions=2)
    scores = scorer.score(samples)
    assert scorer.name == "mlp:weak"
    assert [s.shape[0] for s in scores] == [len(x.triples) for x in samples]
    assert all(np.isfinite(s).all() for s in scores)


def test_evaluate_job_writes_results_for_each_method(setup):
    tmp, encoder_cfg, _ = setup
    cfg = EvaluateConfig(
        input=str(tmp / "samples.parquet"), output_dir=str(tmp / "out"), encoder=encoder_cfg,
        methods=[{"kind": "retriever", "path": str(tmp / "retriever")}, {"kind": "hop_distance"}],
    )
    results, files = evaluate(cfg)
    assert [r["method"] for r in results] == ["mlp:weak", "hop_distance"]
    assert files.plot.is_file() and "| mlp:weak | weak triples |" in files.markdown.read_text()
    assert json.loads(files.json.read_text())


def test_evaluate_job_scores_the_held_out_split(setup):
    tmp, encoder_cfg, _ = setup
    cfg = EvaluateConfig(input=str(tmp / "samples.parquet"), output_dir=str(tmp / "val"), encoder=encoder_cfg,
                         methods=[{"kind": "hop_distance"}], side="val", split={"val_fraction": 0.2})
    results, _ = evaluate(cfg)
    assert results[0]["questions"] == 6  # 20% of 30


def test_retriever_method_needs_a_path():
    with pytest.raises(ConfigError, match="`path` is required"):
        validate_config({"input": "x", "output_dir": "o", "methods": [{"kind": "retriever"}]}, EvaluateConfig)
    with pytest.raises(ConfigError, match="`path` is required for kind `planner`"):
        validate_config({"input": "x", "output_dir": "o", "methods": [{"kind": "planner"}]}, EvaluateConfig)
    with pytest.raises(ConfigError, match="`path` applies to kinds"):
        validate_config({"input": "x", "output_dir": "o", "methods": [{"kind": "cosine", "path": "p"}]}, EvaluateConfig)
    with pytest.raises(ConfigError, match="`decode` applies to kind `planner` only"):
        methods = [{"kind": "hop_distance", "decode": {"beam_width": 2}}]
        validate_config({"input": "x", "output_dir": "o", "methods": methods}, EvaluateConfig)


def test_encoder_mismatch_is_refused(setup):
    tmp, _, encoder = setup
    model = build_retriever("mlp", {"kind": "mlp", "hidden": 8})
    model.save(tmp / "other", CheckpointMeta(label_source="weak", encoder_model_id="some-other-encoder"))
    with pytest.raises(ValueError, match="trained with encoder 'some-other-encoder'"):
        RetrieverScorer(tmp / "other", encoder)


def test_methods_can_be_named(setup):
    tmp, encoder_cfg, _ = setup
    cfg = EvaluateConfig(input=str(tmp / "samples.parquet"), output_dir=str(tmp / "named"), encoder=encoder_cfg,
                         methods=[{"kind": "hop_distance", "name": "distance to topic"}])
    results, files = evaluate(cfg)
    assert results[0]["method"] == "distance to topic"
    assert "| distance to topic |" in files.markdown.read_text()
