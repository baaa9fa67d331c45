"""QA evaluation: exact metrics on a hand-made set, chains vs raw triples, failures recorded not
dropped, gold answers kept from inference, and the Ray Data job with the retriever reader and
with the LLM reader against a scripted server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest

from rg.config import ConfigError, validate_config
from rg.data.rog import write_rog_parquet
from rg.data.sample import Sample
from rg.evaluation.qa import Prediction, answer_questions, inference_view
from rg.jobs.evaluate_qa import QAEvaluateConfig, evaluate_qa, evaluate_qa_runs, format_qa, pool_cpus
from rg.jobs.qa_pool import SharedModels, shared_pool_key
from rg.evaluation.qa_metrics import Gold, score_prediction, summarize
from rg.evaluation.scorers import HopDistanceScorer
from rg.evidence import EvidenceConfig
from rg.reasoning import FOLLOW_UP, NO_CANDIDATES, RetrieverReader
from tests.scripted_server import Reply, Respond, Script, ScriptedServer

A = Sample(  # one topic; a high-scoring distractor triple that no topic reaches
    id="a", question="Who directed Film1?", answers=("Ann",), q_entities=("Film1",), a_entities=("Ann",),
    triples=(("Film1", "directed_by", "Ann"), ("Film1", "starring", "Bob"), ("Carl", "directed_by", "Dora")), hops=1,
)
B = Sample(  # two topics that agree on F2
    id="b", question="Which film did Ann direct that stars Bob?", answers=("F2",), q_entities=("Ann", "Bob"),
    a_entities=("F2",), hops=2,
    triples=(("F1", "directed_by", "Ann"), ("F2", "directed_by", "Ann"), ("F2", "starring", "Bob"), ("F3", "starring", "Bob")),
)
C = Sample(  # the scorer prefers the wrong triple
    id="c", question="Where was Bob born?", answers=("Paris",), q_entities=("Bob",), a_entities=("Paris",),
    triples=(("Bob", "born_in", "Paris"), ("Bob", "lives_in", "Rome")), hops=1,
)
D = Sample(  # nothing retrieved: the reader has no candidate
    id="d", question="Who is Zed?", answers=("X",), q_entities=("Zed",), a_entities=("X",), triples=(), hops=1,
)
SAMPLES = (A, B, C, D)
SCORES = {"a": [0.9, 0.2, 0.95], "b": [0.5, 0.8, 0.8, 0.3], "c": [0.1, 0.9], "d": []}
ONE_STEP = EvidenceConfig(max_length=1)


class TableScorer:
    """Hand-made scores by question id; records what it was given."""

    name = "table"

    def __init__(self, fail_on: str | None = None) -> None:
        self.fail_on = fail_on
        self.seen: list[Sample] = []

    def score(self, samples):
        self.seen.extend(samples)
        if any(s.id == self.fail_on for s in samples):
            raise RuntimeError(f"cannot score {self.fail_on}")
        return [np.array(SCORES[s.id], dtype=float) for s in samples]


def run(samples, scorer, reader, chains=True, evidence=ONE_STEP):
    views = [inference_view(s) for s in samples]
    return asyncio.run(answer_questions(views, scorer, reader, top_k=10, chains=chains, evidence=evidence))


def summary_of(predictions, samples=SAMPLES):
    return summarize([score_prediction(p, Gold.of(s)) for p, s in zip(predictions, samples)])


def test_exact_metrics_with_chains():
    predictions = run(SAMPLES, TableScorer(), RetrieverReader())
    assert [p.answers for p in predictions] == [("Ann",), ("F2",), ("Rome",), ()]
    assert [p.failure for p in predictions] == [None, None, None, NO_CANDIDATES]
    assert all(p.reader == "retriever_scores" and p.scorer == "table" and p.chains for p in predictions)
    s = summary_of(predictions)
    o = s.overall
    assert (o.n, o.failed, o.hit, o.hits_at_1, o.macro_f1) == (4, 1, 0.5, 0.5, 0.5)
    assert o.micro_f1 == pytest.approx(2 * 2 / (2 * 2 + 1 + 2))  # tp 2, fp 1 (Rome), fn 2 (Paris, X)
    assert [(g.name, g.n, g.hit) for g in s.by_hops] == [("1-hop", 3, pytest.approx(1 / 3)), ("2-hop", 1, 1.0)]
    assert [(g.name, g.n, g.hit) for g in s.by_topics] == [("single topic", 3, pytest.approx(1 / 3)), ("multi topic", 1, 1.0)]
    assert s.failures == {NO_CANDIDATES: 1}
    # D's answer is not in its (empty) subgraph; A, B and C are covered
    assert [(g.name, g.n, g.hits_at_1) for g in s.covered] == [
        ("answers in subgraph", 3, pytest.approx(2 / 3)),
        ("1-hop, answers in subgraph", 2, 0.5),
        ("2-hop, answers in subgraph", 1, 1.0),
    ]
    assert (o.prompt_tokens, o.llm_calls) == (0.0, 0.0)
    # A: 2 anchored lines + the distractor as an unanchored one; B: the chains of Ann and Bob
    # that both reach F2 share one line (multi-entity merging); D has none.
    assert [p.evidence_lines for p in predictions] == [3, 3, 2, 0]
    assert o.evidence_lines == pytest.approx(8 / 4) and o.triples == pytest.approx(9 / 4)


def test_raw_triple_ablation_loses_the_anchor():
    predictions = run(SAMPLES, TableScorer(), RetrieverReader(), chains=False)
    assert not any(p.chains for p in predictions)
    assert predictions[0].answers == ("Carl", "Dora")  # the unanchored distractor wins without chains
    assert predictions[1].answers == ("F2",)
    s = summary_of(predictions)
    assert (s.overall.hit, s.overall.macro_f1) == (0.25, 0.25)
    assert [p.evidence_lines for p in predictions] == [3, 4, 2, 0]  # one line per retrieved triple


def test_gold_answers_never_reach_the_scorer_or_reader():
    class SpyReader(RetrieverReader):
        def __init__(self):
            super().__init__()
            self.questions = []

        async def read(self, question, evidence):
            self.questions.append(question)
            return await super().read(question, evidence)

    scorer, reader = TableScorer(), SpyReader()
    run(SAMPLES, scorer, reader)
    assert [s.id for s in scorer.seen] == ["a", "b", "c", "d"]
    assert all(s.answers == () and s.a_entities == () and s.relation_paths == () for s in scorer.seen)
    assert reader.questions == [s.question for s in SAMPLES]


def test_a_failing_reader_or_scorer_is_recorded_not_dropped():
    class Flaky(RetrieverReader):
        async def read(self, question, evidence):
            if "Bob born" in question:
                raise KeyError("broken reader")
            return await super().read(question, evidence)

    predictions = run(SAMPLES, TableScorer(), Flaky())
    assert [p.id for p in predictions] == ["a", "b", "c", "d"]
    assert predictions[2].failure == "read_error: KeyError: 'broken reader'" and predictions[2].answers == ()
    assert predictions[2].evidence_lines == 2  # evidence was built before the reader failed
    s = summary_of(predictions)
    assert s.overall.n == 4 and s.overall.failed == 2 and s.failures == {"read_error": 1, NO_CANDIDATES: 1}

    predictions = run(SAMPLES, TableScorer(fail_on="b"), RetrieverReader())
    assert predictions[1].failure == "retrieve_error: RuntimeError: cannot score b"
    assert [p.answers for p in predictions] == [("Ann",), (), ("Rome",), ()]  # the others are unaffected


def test_prediction_round_trips_through_json():
    [prediction] = run([A], TableScorer(), RetrieverReader())
    assert Prediction.from_dict(json.loads(json.dumps(prediction.to_dict()))) == prediction


def test_config_names_the_bad_key():
    base = {"input": "x", "output_dir": "o", "retriever": {"kind": "hop_distance"}}
    cfg = validate_config(base, QAEvaluateConfig)
    assert cfg.reader.kind == "retriever" and cfg.chains and cfg.top_k == 100
    with pytest.raises(ConfigError, match=r"reader\.llm\.llm: required key is missing"):
        validate_config({**base, "reader": {"kind": "llm"}}, QAEvaluateConfig)
    with pytest.raises(ConfigError, match=r"retriever: .*`path` is required for kind `retriever`"):
        validate_config({**base, "retriever": {"kind": "retriever"}}, QAEvaluateConfig)
    with pytest.raises(ConfigError, match=r"top_k: .*greater than or equal to 1"):
        validate_config({**base, "top_k": 0}, QAEvaluateConfig)


@pytest.fixture(scope="module")
def parquet(tmp_path_factory):
    path = tmp_path_factory.mktemp("qa") / "samples.parquet"
    write_rog_parquet(list(SAMPLES), path)
    return path


def job_config(parquet, out, **extra) -> QAEvaluateConfig:
    data = {
        "input": str(parquet), "output_dir": str(out), "retriever": {"kind": "hop_distance"},
        "evidence": {"max_length": 1}, "num_actors": 1, "actor_cpus": 0.5, "batch_size": 2,
        **extra,
    }
    return validate_config(data, QAEvaluateConfig)


def test_job_matches_the_library_and_writes_its_files(ray_local, parquet, tmp_path):
    result = evaluate_qa(job_config(parquet, tmp_path / "out"), progress=False)
    expected = summary_of(run(SAMPLES, HopDistanceScorer(), RetrieverReader()))
    assert result.summary == expected
    files = result.files
    assert files.plot.is_file() and files.plot.stat().st_size > 0
    rows = [json.loads(line) for line in files.predictions.read_text().splitlines()]
    assert [r["id"] for r in rows] == ["a", "b", "c", "d"]
    assert rows[3]["failure"] == NO_CANDIDATES and rows[3]["gold"] == ["X"] and rows[3]["hit"] == 0
    assert rows[0]["gold"] == ["Ann"] and rows[0]["scorer"] == "hop_distance"
    payload = json.loads(files.json.read_text())
    assert payload["summary"]["overall"]["n"] == 4 and payload["run"]["chains"] is True
    table = files.markdown.read_text()
    assert "| all | 4 | 1 |" in table and "| 2-hop | 1 |" in table and "failed questions: no_candidates × 1" in table
    assert "hop_distance" in format_qa(result)


def untimed(predictions) -> list[dict]:
    """A predictions file's rows without their timings."""
    return [{k: v for k, v in json.loads(line).items() if k != "seconds"} for line in predictions.read_text().splitlines()]


def test_one_pool_answers_several_runs_as_each_alone_would(ray_local, parquet, tmp_path):
    runs = {"chains": job_config(parquet, tmp_path / "chains"),
            "raw": job_config(parquet, tmp_path / "raw", chains=False),
            "wide": job_config(parquet, tmp_path / "wide", top_k=1)}
    pooled = evaluate_qa_runs(runs, progress=False)
    assert list(pooled) == ["chains", "raw", "wide"]
    for name, cfg in runs.items():
        alone = evaluate_qa(cfg.model_copy(update={"output_dir": str(tmp_path / f"{name}-alone")}), progress=False)
        assert pooled[name].summary == alone.summary, name
        rows, alone_rows = (untimed(r.files.predictions) for r in (pooled[name], alone))
        assert rows == alone_rows and len(rows) == 4, name
        assert str(pooled[name].files.predictions).startswith(str(tmp_path / name))
        record = pooled[name].run
        assert record["shared_pool"] == ["chains", "raw", "wide"] and record["answer_seconds"] > 0
        assert "shared_pool" not in alone.run
    assert pooled["chains"].summary == summary_of(run(SAMPLES, HopDistanceScorer(), RetrieverReader()))
    assert pooled["raw"].run["chains"] is False and pooled["wide"].run["top_k"] == 1


def test_runs_that_cannot_share_a_pool_are_refused_naming_the_fields(parquet, tmp_path):
    apart = {"a": job_config(parquet, tmp_path / "a"), "b": job_config(parquet, tmp_path / "b", batch_size=3)}
    with pytest.raises(ValueError, match=r"cannot share one actor pool: each needs the same input, .*batch_size.*"
                                         r"Fix: run them one by one"):
        evaluate_qa_runs(apart, progress=False)
    assert shared_pool_key(apart["a"]) != shared_pool_key(apart["b"])
    assert shared_pool_key(apart["a"]) == shared_pool_key(job_config(parquet, tmp_path / "c", chains=False, top_k=3))


def test_runs_naming_the_same_scorer_share_one_loaded_copy(parquet, tmp_path):
    models = SharedModels()
    first = models.scorer(job_config(parquet, tmp_path / "a"))
    assert models.scorer(job_config(parquet, tmp_path / "b", chains=False)) is first
    cosine = {"kind": "cosine"}
    other = models.scorer(job_config(parquet, tmp_path / "c", retriever=cosine))
    assert other is not first and models.scorer(job_config(parquet, tmp_path / "d", retriever=cosine)) is other
    assert len(models._encoders) == 1  # the cosine scorers' one encoder


def test_llm_reader_through_the_job_counts_tokens_and_calls(ray_local, parquet, tmp_path):
    def reply(body):
        messages = body["messages"]
        last = messages[-1]["content"]
        if last == FOLLOW_UP and "Where was Bob born?" in messages[-3]["content"]:
            return Reply("ans: Paris", prompt_tokens=150, completion_tokens=2)
        if "Who directed Film1?" in last:
            return Reply("ans: Ann", prompt_tokens=100, completion_tokens=2)
        if "Where was Bob born?" in last:
            return Reply("Bob was born in Paris.", prompt_tokens=100, completion_tokens=5)  # no ans: line
        if "Ann direct" in last:
            return Reply("ans: F2\nans: F3", prompt_tokens=120, completion_tokens=4)
        return Reply("I cannot tell.", prompt_tokens=80, completion_tokens=3)  # D, twice: no answer

    with ScriptedServer(Script.always(Respond(reply))) as srv:
        llm = {"base_url": srv.base_url, "model": "scripted", "max_retries": 0, "timeout_s": 10.0}
        result = evaluate_qa(job_config(parquet, tmp_path / "llm", reader={"kind": "llm", "llm": llm}), progress=False)
        requests = len(srv.chat_requests)
    rows = {json.loads(line)["id"]: json.loads(line) for line in result.files.predictions.read_text().splitlines()}
    assert requests == 6  # a: 1, b: 1, c: 2 (follow-up), d: 2 (follow-up, still no answer)
    assert {k: r["usage"]["calls"] for k, r in rows.items()} == {"a": 1, "b": 1, "c": 2, "d": 2}
    assert rows["c"]["answers"] == ["Paris"] and rows["c"]["usage"]["prompt_tokens"] == 250
    assert rows["d"]["failure"] == "no_answer_line" and rows["d"]["usage"]["prompt_tokens"] == 160
    assert rows["b"]["answers"] == ["F2", "F3"] and rows["b"]["precision"] == 0.5
    assert all(r["reader"] == "llm:scripted" and r["prompt_id"] for r in rows.values())
    o = result.summary.overall
    assert o.llm_calls == 6 / 4 and o.prompt_tokens == (100 + 120 + 250 + 160) / 4
    assert o.completion_tokens == (2 + 4 + 7 + 6) / 4
    assert (o.hit, o.hits_at_1, o.failed) == (0.75, 0.75, 1)
    assert o.macro_f1 == pytest.approx((1 + 2 / 3 + 1 + 0) / 4)
    assert result.summary.usage.calls == 6



def test_an_actor_pool_as_large_as_the_cluster_leaves_room_for_reading(ray_local, parquet, tmp_path):
    """2 actors x 1 CPU on the 2-CPU session cluster: the pool reserves less so that the tasks
    reading the input can run (it waited for ever before), and the answers are the same."""
    cfg = job_config(parquet, tmp_path / "out", num_actors=2, actor_cpus=1.0, batch_size=2)
    assert pool_cpus(cfg, 2, 2.0) == pytest.approx(0.5) and pool_cpus(cfg, 1, 4.0) == 1.0
    result = evaluate_qa(cfg, progress=False)
    assert result.summary == summary_of(run(SAMPLES, HopDistanceScorer(), RetrieverReader()))
