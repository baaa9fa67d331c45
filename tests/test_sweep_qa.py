"""No-training sweeps: the Pareto front, cached-score replay equal to a live scorer, refused keys,
and a 2x2 Ray Tune grid end to end with its files, best config and resume."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace

import numpy as np
import pytest
import yaml

from rg.config import ConfigError, load_config, validate_config
from rg.data.rog import write_rog_parquet
from rg.evaluation.qa import answer_questions, inference_view
from rg.jobs.evaluate_qa import QAEvaluateConfig
from rg.evaluation.qa_metrics import Gold, score_prediction, summarize
from rg.evaluation.scorers import HopDistanceScorer
from rg.jobs.sweep_qa import CachedScorer, SweepData, SweepQAConfig, evaluate_point, pareto_front
from rg.evidence import EvidenceConfig
from rg.reasoning import RetrieverReader
from tests.test_qa_eval import SAMPLES, SCORES
from tune.qa import format_sweep, run_qa_sweep

BASE = {"input": "unused", "output_dir": "unused", "retriever": {"kind": "hop_distance"}, "top_k": 10,
        "evidence": {"max_length": 1}}


def test_pareto_front_by_hand():
    metric = [0.5, 0.7, 0.7, 0.4, 0.9, 0.9]
    cost = [10, 20, 30, 5, 50, 50]
    # 2 is beaten by 1 (same metric, cheaper); the twin at index 5 is not beaten by 4 (equal in both).
    assert pareto_front(metric, cost) == [3, 0, 1, 4, 5]
    assert pareto_front([1.0], [3.0]) == [0]


def cached_data() -> SweepData:
    scores = {k: np.asarray(v, dtype=float) for k, v in SCORES.items()}
    return SweepData(
        samples=tuple(inference_view(s) for s in SAMPLES),
        gold={s.id: Gold.of(s) for s in SAMPLES},
        scorer=CachedScorer("table", scores, {}),
    )


@pytest.mark.parametrize("overrides,expected", [
    ([], {"hits1": 0.5, "hit": 0.5, "failed": 0.25}),
    # a keeps only the unanchored distractor (answers Dora), b its first top triple (F2, right)
    (["top_k=1"], {"hits1": 0.25, "hit": 0.25, "failed": 0.25}),
])
def test_evaluate_point_exact(overrides, expected):
    metrics = evaluate_point(BASE, overrides, cached_data())
    assert {k: metrics[k] for k in expected} == pytest.approx(expected)
    assert metrics["llm_calls"] == 0 and metrics["prompt_tokens"] == 0


def test_cached_replay_equals_the_live_scorer():
    """Replaying stored scores gives the very predictions the live scorer gives."""
    live = HopDistanceScorer()
    views = [inference_view(s) for s in SAMPLES]
    cached = CachedScorer(live.name, dict(zip((s.id for s in views), live.score(views))), {})
    config = EvidenceConfig(max_length=2)

    def metrics(scorer):
        predictions = asyncio.run(answer_questions(views, scorer, RetrieverReader(), top_k=10, evidence=config))
        return [p.answers for p in predictions], summarize(
            [score_prediction(p, Gold.of(s)) for p, s in zip(predictions, SAMPLES)]).overall

    assert metrics(cached) == metrics(live)
    assert cached.name == "cached:hop_distance"
    with pytest.raises(KeyError, match="no cached scores"):
        cached.score([replace(views[0], id="zz")])
    with pytest.raises(ValueError, match="cover 3 triples"):
        cached.score([replace(views[1], id="a")])


def test_config_refuses_retrieval_keys_and_bad_points(tmp_path):
    base = tmp_path / "base.yaml"
    base.write_text(yaml.safe_dump({"kind": "evaluate_qa", **BASE}))
    common = {"base": str(base), "name": "s", "output_dir": str(tmp_path / "o")}
    with pytest.raises(ConfigError, match=r"space: .*'retriever.path' changes retrieval"):
        validate_config({**common, "space": {"retriever.path": ["a", "b"]}}, SweepQAConfig)
    with pytest.raises(ConfigError, match=r"space: .*'top_k' has no values"):
        validate_config({**common, "space": {"top_k": []}}, SweepQAConfig)
    cfg = validate_config({**common, "space": {"top_k": [5, 0]}}, SweepQAConfig)
    with pytest.raises(ConfigError, match=r"top_k: .*greater than or equal to 1"):
        cfg.load_base()
    cfg = validate_config({**common, "space": {"top_k": [5, 10], "chains": [True, False]}}, SweepQAConfig)
    assert cfg.grid() == [{"top_k": 5, "chains": True}, {"top_k": 5, "chains": False},
                          {"top_k": 10, "chains": True}, {"top_k": 10, "chains": False}]


def test_base_paths_resolve_against_the_root(tmp_path, monkeypatch):
    """The base evaluation's relative paths resolve against the sweep's root (the storage root of a
    submitted job); in a submitted job they are never left relative."""
    from rg.run.storage import JOB_ENV, StorageRootError

    base = tmp_path / "base.yaml"
    base.write_text(yaml.safe_dump({"kind": "evaluate_qa", **BASE, "input": "subgraphs/demo",
                                    "retriever": {"kind": "retriever", "path": "models/demo"}}))
    cfg = validate_config({"base": str(base), "name": "s", "output_dir": "o", "space": {"top_k": [5]}}, SweepQAConfig)
    monkeypatch.delenv(JOB_ENV, raising=False)
    assert cfg.load_base()[1].input == "subgraphs/demo"
    data, validated = cfg.load_base("/store")
    assert (validated.input, validated.retriever.path) == ("/store/subgraphs/demo", "/store/models/demo")
    assert data["output_dir"] == "/store/unused"
    monkeypatch.setenv(JOB_ENV, json.dumps({"metadata": {"job_submission_id": "raysubmit_1"}}))
    with pytest.raises(StorageRootError, match=r"`input: subgraphs/demo` is relative"):
        cfg.load_base()


@pytest.mark.mission  # 22 s: a Tune sweep and its resume
def test_sweep_end_to_end_and_resume(ray_local, tmp_path):
    parquet = tmp_path / "samples.parquet"
    write_rog_parquet(list(SAMPLES), parquet)
    base = tmp_path / "base.yaml"
    base.write_text(yaml.safe_dump({"kind": "evaluate_qa", **BASE, "input": str(parquet),
                                    "output_dir": str(tmp_path / "eval")}))
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(yaml.safe_dump({
        "kind": "sweep_qa", "base": str(base), "name": "tiny", "output_dir": str(tmp_path / "sweep"),
        "space": {"top_k": [1, 10], "evidence.max_length": [1, 2]}, "trial_cpus": 0.5,
    }))
    cfg = load_config(sweep, SweepQAConfig)
    result = run_qa_sweep(cfg, progress=False)
    assert (result.trials, result.errors, result.resumed) == (4, 0, False)
    # the live job's metrics at the best point equal what the sweep reported for it
    live_views = [inference_view(s) for s in SAMPLES]
    point = {k: result.best[k] for k in ("top_k", "evidence.max_length")}
    predictions = asyncio.run(answer_questions(
        live_views, HopDistanceScorer(), RetrieverReader(), top_k=point["top_k"],
        evidence=EvidenceConfig(max_length=point["evidence.max_length"])))
    live = summarize([score_prediction(p, Gold.of(s)) for p, s in zip(predictions, SAMPLES)]).overall
    assert result.best["hits1"] == pytest.approx(live.hits_at_1)
    assert result.best["hits1"] >= result.default["hits1"]
    files = result.files
    assert files.params_plot.stat().st_size > 0 and files.pareto_plot.stat().st_size > 0
    assert len(files.csv.read_text().splitlines()) == 5
    best = load_config(files.best_config, QAEvaluateConfig)
    assert (best.top_k, best.evidence.max_length) == (point["top_k"], point["evidence.max_length"])
    assert files.best_config.read_text().startswith("# python -m jobs.evaluate --config")
    summary = json.loads(files.summary.read_text())
    assert summary["scorer"] == "cached:hop_distance" and summary["questions"] == 4
    assert "top_k=" in format_sweep(result, "hits1", "evidence_lines")
    again = run_qa_sweep(cfg, progress=False)
    assert again.resumed and again.trials == 4 and again.best == result.best


@pytest.fixture(scope="module")
def film_sweep(tmp_path_factory):
    """The film graph's questions as a sweep's data (no scores: the dual tower answers each point) and a base
    whose local Brain is the shared film planner, saved to a folder."""
    from rg.data.sample import Sample
    from tests.dualtower_world import ANSWER_SETS, QUESTIONS, TRIPLES, shared_planner

    folder = tmp_path_factory.mktemp("planner")
    shared_planner().save(folder)
    samples = [Sample(id=f"q{i}", question=q, answers=tuple(sorted(ANSWER_SETS.get(q, {a}))), q_entities=topics,
                      a_entities=tuple(sorted(ANSWER_SETS.get(q, {a}))), triples=TRIPLES)
               for i, (q, topics, a) in enumerate(QUESTIONS)]
    data = SweepData(samples=tuple(inference_view(s) for s in samples), gold={s.id: Gold.of(s) for s in samples},
                     scorer=None)
    base = {"input": "unused", "output_dir": "unused", "reasoner": "dualtower",
            "dualtower": {"brain": {"kind": "local", "planner": str(folder), "beams": 3},
                          "privacy": {"mode": "utility"}, "similarity": "lexical"}}
    return base, data


def test_a_dualtower_point_answers_with_the_controller_and_counts_brain_calls(film_sweep):
    base, data = film_sweep
    default = evaluate_point(base, [], data)
    assert default["hits1"] == 1.0 and default["failed"] == 0.0  # every film question, as the controller tests
    assert 1.0 <= default["brain_calls"] <= 2.0 and default["llm_calls"] == default["brain_calls"]
    assert data.scorer_name == "dualtower"
    narrow = evaluate_point(base, ["dualtower.w_max=1", "dualtower.w1=1"], data)
    assert narrow["evidence_lines"] < default["evidence_lines"]  # one kept path per node instead of three


def test_a_dualtower_sweep_refuses_keys_it_cannot_vary(tmp_path):
    base = tmp_path / "base.yaml"
    base.write_text(yaml.safe_dump({"kind": "evaluate_qa", "input": "unused", "output_dir": "unused",
                                    "reasoner": "dualtower", "dualtower": {"brain": {"kind": "local",
                                                                                      "planner": "p"}}}))
    common = {"base": str(base), "name": "s", "output_dir": str(tmp_path / "o")}
    cfg = validate_config({**common, "space": {"top_k": [5, 10]}}, SweepQAConfig)
    with pytest.raises(ConfigError, match=r"\['top_k'\] have no effect with the base's reasoner dualtower"):
        cfg.load_base()
    cfg = validate_config({**common, "space": {"dualtower.w_max": [1, 3], "dualtower.w1": [2]}}, SweepQAConfig)
    with pytest.raises(ConfigError, match="w_max .* > w1"):
        cfg.load_base()  # every grid point is validated before a trial starts
    retriever_base = tmp_path / "retriever.yaml"
    retriever_base.write_text(yaml.safe_dump({"kind": "evaluate_qa", **BASE}))
    cfg = validate_config({**common, "base": str(retriever_base), "space": {"dualtower.w1": [5]}}, SweepQAConfig)
    with pytest.raises(ConfigError, match="base's reasoner is not dualtower"):
        cfg.load_base()
