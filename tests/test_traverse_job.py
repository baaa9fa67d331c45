"""``evaluate_qa`` with ``reasoner: traverse``: config rules, and LLM traversal rounds through Ray Data
with the edge memory in the named actor (a scripted Hand-side server on 127.0.0.1)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from rg.config import ConfigError, validate_config
from rg.data.paraphrase import ParaphraseConfig
from rg.data.synthetic.vocab import DIRECTED_BY
from rg.evaluation.rounds import RoundRewriter
from rg.data.rog import write_rog_parquet
from rg.data.sample import Sample
from rg.evaluation.qa_job import QAEvaluateConfig, evaluate_qa
from tests.scripted_server import Reply, Respond, Script, ScriptedServer

TRIPLES = (("Heat", "directed_by", "Michael Mann"), ("Heat", "release_year", "1995"),
           ("Michael Mann", "born_in", "Chicago"), ("Collateral", "directed_by", "Michael Mann"))
SAMPLES = [Sample("q0", "who directed Heat", ("Michael Mann",), ("Heat",), ("Michael Mann",), TRIPLES, hops=1),
           Sample("q1", "where was Michael Mann born", ("Chicago",), ("Michael Mann",), ("Chicago",), TRIPLES, hops=1)]
BASE = {"input": "x.parquet", "output_dir": "o", "side": "all", "reasoner": "traverse"}


def test_traverse_section_rules():
    with pytest.raises(ConfigError, match="`traverse` is not set"):
        validate_config(BASE, QAEvaluateConfig)
    with pytest.raises(ConfigError, match="traverse.kind is 'local' but retriever is not set"):
        validate_config({**BASE, "traverse": {"kind": "local"}}, QAEvaluateConfig)
    with pytest.raises(ConfigError, match="edge memory only. Fix: set memory.experience: null"):
        validate_config({**BASE, "traverse": {"kind": "local"}, "retriever": {"kind": "hop_distance"},
                         "memory": {}}, QAEvaluateConfig)
    ok = validate_config({**BASE, "traverse": {"kind": "local"}, "retriever": {"kind": "hop_distance"},
                          "memory": {"experience": None, "embedder": "hashing"}}, QAEvaluateConfig)
    assert ok.memory.embedder == "hashing"
    with pytest.raises(ConfigError, match="memory.embedder is set beside an experience pool"):
        validate_config({**BASE, "reasoner": "dualtower", "dualtower": {"brain": {"kind": "local"}},
                         "memory": {"embedder": "hashing"}}, QAEvaluateConfig)


def hand(body) -> Reply:
    """Scripted Hand model: expands along the question's relation, stops once S holds it, answers its tail."""
    task = body["messages"][-1]["content"].split("Task:\n", 1)[1]
    relation = "directed_by" if task.startswith("Question: who directed Heat") else "born_in"
    if "\nNodes:\n" in task:
        done = relation in task.split("\nTriples:\n", 1)[1]
        text = {"sufficient": True} if done else {"sufficient": False, "node": 0}
    else:
        lines = [line for line in task.splitlines() if line.startswith("[")]
        index = next(i for i, line in enumerate(lines) if relation in line)
        if "\nEdges:\n" in task:
            text = {"edge": index}
        else:
            text = {"answers": [lines[index].rsplit(" -> ", 1)[1]], "used": [index]}
    return Reply(json.dumps(text), prompt_tokens=20, completion_tokens=5)


@pytest.mark.slow
def test_llm_traversal_rounds_replay_and_cut_calls(ray_local, tmp_path):
    write_rog_parquet(SAMPLES, tmp_path / "samples.parquet")
    with ScriptedServer(Script.always(Respond(hand))) as server:
        cfg = validate_config({
            "input": str(tmp_path / "samples.parquet"), "output_dir": str(tmp_path / "out"), "side": "all",
            "reasoner": "traverse", "traverse": {"kind": "llm", "llm": {"base_url": server.base_url,
                                                                        "model": "scripted", "max_retries": 0}},
            "memory": {"experience": None, "embedder": "hashing", "rounds": 2, "baseline": True},
            "num_actors": 1, "actor_cpus": 0.5, "batch_size": 2}, QAEvaluateConfig)
        result = evaluate_qa(cfg, progress=False)
        requests = len(server.chat_requests)
    first, second = result.run["memory_rounds"]
    # round 1: explore, exploit, explore (sufficient), answer; round 2: the replay holds the edge
    assert (first["hits1"], second["hits1"]) == (1.0, 1.0)
    assert (first["hand_calls_per_question"], second["hand_calls_per_question"]) == (4.0, 2.0)
    assert first["tokens_per_question"] == {"hand": 100.0} and second["tokens_per_question"] == {"hand": 50.0}
    assert (first["replay_hit_rate"], second["replay_hit_rate"]) == (0.0, 1.0)
    assert first["brain_calls_per_question"] == 0.0 and (second["corrected"], second["lost"]) == (0, 0)
    assert first["evidence_lines_per_question"] == second["evidence_lines_per_question"] == 1.0
    # memory.baseline: each round once more with no edge memory, so no replay: four calls a question
    for one in (first, second):
        assert one["hits1_without_memory"] == 1.0 and one["hand_calls_per_question_without_memory"] == 4.0
        assert one["tokens_per_question_without_memory"] == {"hand": 100.0}
        assert (one["better_than_without_memory"], one["worse_than_without_memory"]) == (0, 0)
    assert requests == 12 + 2 * 8 and result.run["memory_stats"]["edges"] == 2
    # this run's usage is the memory pass's; the baseline's calls count in every run's spend
    assert result.run["llm_usage_this_run"]["total"]["calls"] == 12
    assert result.run["llm_usage_all_runs"]["total"]["calls"] == 28
    rows = [json.loads(line) for line in result.files.predictions.read_text().splitlines()]
    assert [r["evidence_walks"] for r in rows] == ["traverse:replay", "traverse:replay"]
    for n in (1, 2):  # every round's predictions, with memory and without, are kept beside the last round's
        for name in (f"predictions.round{n}.jsonl", f"predictions.round{n}.without_memory.jsonl"):
            assert len((tmp_path / "out" / name).read_text().splitlines()) == 2
    assert rows[0]["reader"] == "traverse:llm:scripted" and rows[0]["scorer"] == "none"


FILMS = (("Heat", DIRECTED_BY, "Michael Mann"), ("Collateral", DIRECTED_BY, "Michael Mann"),
         ("Casino", DIRECTED_BY, "Martin Scorsese"))
HEAT = Sample("h", "Who directed Heat?", ("Michael Mann",), ("Heat",), ("Michael Mann",), FILMS, hops=1)
SCORSESE = Sample("s", "Which films did Martin Scorsese direct?", ("Casino",), ("Martin Scorsese",), ("Casino",), FILMS,
                  hops=1)


def test_round_rewriter_paraphrases_and_same_template_questions():
    para = [RoundRewriter("paraphrase", ParaphraseConfig(), r, 3)(HEAT) for r in (2, 3)]
    assert [(s.question, s.answers, changed) for s, changed in para] == [
        ("Which person directed the film Heat?", ("Michael Mann",), True),
        ("Who was the director of Heat?", ("Michael Mann",), True)]
    other = [RoundRewriter("same_template", ParaphraseConfig(), r, 3)(HEAT)[0] for r in (2, 3)]
    assert [(s.question, s.q_entities, s.answers, s.a_entities) for s in other] == [
        ("Who directed Collateral?", ("Collateral",), ("Michael Mann",), ("Michael Mann",)),
        ("Who directed Casino?", ("Casino",), ("Martin Scorsese",), ("Martin Scorsese",))]
    odd = replace(HEAT, question="Name Heat's director")
    assert RoundRewriter("paraphrase", ParaphraseConfig(), 2, 3)(odd) == (odd, False)
    with pytest.raises(ValueError, match="nothing to rewrite"):
        RoundRewriter("same", ParaphraseConfig(), 2, 3)
    with pytest.raises(ConfigError, match="paraphrase.metaqa_files is empty"):
        validate_config({"bank": "metaqa"}, ParaphraseConfig)


@pytest.mark.slow
def test_same_template_rounds_score_against_the_new_gold(ray_local, tmp_path):
    write_rog_parquet([HEAT, SCORSESE], tmp_path / "samples.parquet")
    cfg = validate_config({
        "input": str(tmp_path / "samples.parquet"), "output_dir": str(tmp_path / "out"), "side": "all",
        "reasoner": "traverse", "retriever": {"kind": "hop_distance"},
        "traverse": {"kind": "local", "min_score": -10, "max_steps": 1},
        "memory": {"experience": None, "embedder": "hashing", "rounds": 2, "round_kind": "same_template"},
        "num_actors": 1, "actor_cpus": 0.5, "batch_size": 2}, QAEvaluateConfig)
    result = evaluate_qa(cfg, progress=False)
    first, second = result.run["memory_rounds"]
    assert (first["rewritten"], second["rewritten"], second["kind"]) == (0, 2, "same_template")
    assert first["hits1"] == second["hits1"] == 1.0 and second["hand_calls_per_question"] == 0.0
    rows = {r["id"]: r for r in map(json.loads, result.files.predictions.read_text().splitlines())}
    assert (rows["h"]["question"], rows["h"]["answers"], rows["h"]["gold"]) == (
        "Who directed Collateral?", ["Michael Mann"], ["Michael Mann"])
    assert (rows["s"]["question"], rows["s"]["gold"]) == ("Which films did Michael Mann direct?", ["Collateral", "Heat"])
