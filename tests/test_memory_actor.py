"""One named Ray actor owns the sealed memories; handles share it; a new actor reloads the files;
``evaluate_qa`` with ``memory.rounds`` replays the questions through Ray Data."""

from __future__ import annotations

import json

import pytest

from rg.config import ConfigError, validate_config
from rg.jobs.evaluate_qa import QAEvaluateConfig
from rg.memory.config import MemoryConfig
from rg.memory.keys import new_key_hex
from rg.reasoning.dualtower.memory import RecalledAnalysis, Trace
from tests.dualtower_world import shared_planner, write_qa_input

TAG = "utility|1.0|0"


def test_memory_section_rules():
    with pytest.raises(ConfigError, match="memory.*reasoner is not 'dualtower'"):
        validate_config({"input": "x", "output_dir": "o", "side": "test", "retriever": {"kind": "cosine"},
                         "memory": {}}, QAEvaluateConfig)
    with pytest.raises(ConfigError, match="neither experience nor edges"):
        validate_config({"experience": None, "edges": None}, MemoryConfig)


def test_a_round_without_memory_is_compared_question_by_question(tmp_path):
    from rg.evaluation.qa import Prediction
    from rg.evaluation.memory_rounds import LOST, without_memory
    from rg.evaluation.qa_metrics import Gold, score_prediction
    from rg.llm.usage import Usage

    gold = {"a": Gold(("Ann",), 1, 1), "b": Gold(("Bo",), 2, 1), "c": Gold(("Cy",), 1, 1)}
    warm = [Prediction(id="a", question="qa", answers=("Ann",)), Prediction(id="b", question="qb", answers=("X",)),
            Prediction(id="c", question="qc", answers=("Cy",))]
    cold = {"a": Prediction(id="a", question="qa", answers=("Z",), usage_by_side={"brain": Usage(calls=2)}),
            "b": Prediction(id="b", question="qb", answers=("Bo",), usage_by_side={"brain": Usage(calls=1)})}
    scores = [score_prediction(p, gold[p.id], "exact") for p in warm]
    out = without_memory(scores, cold, gold, "exact", out_dir=str(tmp_path), round_no=2)  # c's baseline answer
    # went missing: counted lost, not dropped, and its row says so in the round's baseline predictions
    written = tmp_path / "predictions.round2.without_memory.jsonl"
    rows = [json.loads(line) for line in written.read_text().splitlines()]
    assert [(r["id"], r["hits_at_1"], r["failure"]) for r in rows] == [("a", 0, None), ("b", 1, None), ("c", 0, LOST)]
    assert out["hits1_without_memory"] == 1 / 3 and out["brain_calls_per_question_without_memory"] == 1.0
    assert (out["better_than_without_memory"], out["worse_than_without_memory"]) == (2, 1)
    assert (out["better_ids"], out["worse_ids"]) == (["a", "c"], ["b"])


@pytest.mark.slow
def test_named_actor_shares_and_persists_the_pool(ray_local, tmp_path):
    import ray

    from rg.memory.actor import RemotePool, memory_actor

    (tmp_path / "key").write_text(new_key_hex())
    config = MemoryConfig(key={"file": str(tmp_path / "key")}, edges={"path": str(tmp_path / "edges.sealed")},
                          experience={"embedder": "hashing", "path": str(tmp_path / "pool.sealed")})
    first = RemotePool(memory_actor(config, name="pool-test"), TAG)
    second = RemotePool(memory_actor(config, name="pool-test"), TAG)  # the same actor, by name
    first.remember(Trace(question="who directed TE_1", analysis=RecalledAnalysis(
        "TE -[directed_by]-> ANSWER", ("directed_by",), 1), trajectory=(("topic", 1),),
        templates=(("TE_1 → [directed_by] → (person)", (("directed_by",),)),), sufficient=True, warnings=(),
        privacy=TAG))
    assert second.hints("who directed TE_1", None, TAG).skip_brain
    assert ray.get(second.actor.stats.remote())["records"] == 1
    ray.get(first.actor.close.remote())
    ray.kill(first.actor)
    again = memory_actor(config, name="pool-test-2")
    assert ray.get(again.stats.remote())["records"] == 1
    ray.get(again.close.remote())
    ray.kill(again)


@pytest.mark.slow
def test_evaluate_qa_memory_rounds(ray_local, tmp_path):
    from rg.jobs.evaluate_qa import evaluate_qa

    folder = tmp_path / "planner"
    shared_planner().save(folder)
    write_qa_input(tmp_path)
    cfg = validate_config({"input": str(tmp_path / "samples.parquet"), "output_dir": str(tmp_path / "out"),
                           "side": "all", "reasoner": "dualtower", "schema_dir": str(tmp_path),
                           "dualtower": {"brain": {"planner": str(folder)}, "similarity": "lexical"},
                           "memory": {"experience": {"embedder": "hashing"}, "rounds": 2},
                           "num_actors": 1, "actor_cpus": 0.5, "batch_size": 4}, QAEvaluateConfig)
    result = evaluate_qa(cfg, progress=False)
    first, second = result.run["memory_rounds"]
    assert first["hits1"] == second["hits1"] == 1.0
    assert second["brain_calls_per_question"] < first["brain_calls_per_question"]
    assert second["experience_hit_rate"] + second["replay_hit_rate"] == 1.0
    assert result.run["memory_stats"]["records"] >= 1
    json.dumps(result.run)
