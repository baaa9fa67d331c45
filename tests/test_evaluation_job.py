"""The retrieval evaluation job: a trained checkpoint next to a baseline, end to end."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rg.config import ConfigError, validate_config
from rg.data.rog import read_rog, write_rog_parquet
from rg.data.sample import Sample
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


# Heat's neighbourhood; hop distance from the topic Heat: 0 for triples 0 and 1, 1 for triple 2, 2 for triple 3,
# so hop_distance ranks the triples 0, 1, 2, 3 (ties keep triple order).
HEAT = (("Heat", "release_year", "1995"), ("Heat", "directed_by", "Mann"), ("Mann", "born_in", "Chicago"),
        ("Chicago", "located_in", "USA"))
KNOWN = [
    Sample("d", "who directed Heat", ("Mann",), ("Heat",), ("Mann",), HEAT, hops=1),  # weak positives: 1
    Sample("b", "where was the director of Heat born", ("Chicago",), ("Heat",), ("Chicago",), HEAT, hops=2),  # 1, 2
    Sample("x", "who scored Heat", ("Goldenthal",), ("Heat",), ("Goldenthal",), HEAT, hops=1),  # answer not in it
]


def test_evaluate_job_scores_of_a_hand_made_case(tmp_path):
    write_rog_parquet(KNOWN, tmp_path / "known.parquet")
    cfg = EvaluateConfig(input=str(tmp_path / "known.parquet"), output_dir=str(tmp_path / "out"),
                         methods=[{"kind": "hop_distance"}], ks=(1, 2, 3))
    results, files = evaluate(cfg)
    # triple recall against the weak labels, d and b (x has none): @1 (0 + 0) / 2, @2 (1 + 1/2) / 2, @3 (1 + 1) / 2;
    # answer recall, d and b (x's answer is not in its subgraph): @1 (0 + 0) / 2, @2 (1 + 0) / 2, @3 (1 + 1) / 2
    assert results == [{
        "method": "hop_distance", "ks": [1, 2, 3], "questions": 3,
        "triple_recall": {"weak": {"recall": {"1": 0.0, "2": 0.75, "3": 1.0}, "n": 2, "skipped": 1}},
        "answer_recall": {"recall": {"1": 0.0, "2": 0.5, "3": 1.0}, "n": 2, "skipped": 1},
    }]
    assert json.loads(files.json.read_text())["results"] == results
    # by hop count: 2-hop is b alone
    two_hop = json.loads((tmp_path / "out" / "by_hops" / "2hop" / "retrieval.json").read_text())["results"][0]
    assert two_hop["questions"] == 1 and two_hop["triple_recall"]["weak"]["recall"] == {"1": 0.0, "2": 0.5, "3": 1.0}
    assert two_hop["answer_recall"]["recall"] == {"1": 0.0, "2": 0.0, "3": 1.0}


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
