"""The memories inside the dual-tower controller: fewer Brain calls when warm, same answers."""

from __future__ import annotations

import pytest

from rg.graph import KnowledgeGraph
from rg.memory import EdgeMemory, EdgeMemoryConfig, ExperienceConfig, ExperiencePool, PoolMemory, SealedLog
from rg.memory.embed import HashingEmbedder
from rg.reasoning.dualtower import DualTowerConfig, build_controller
from rg.reasoning.dualtower.controller import privacy_tag, topic_template
from rg.stores.memory import MemoryStore
from tests.dualtower_world import ANSWER_SETS, QUESTIONS, TRIPLES, schema, shared_planner

KEY = bytes(range(32))
CONFIG = DualTowerConfig(privacy={"mode": "utility"}, similarity="lexical")


@pytest.fixture(scope="module")
def planner():
    return shared_planner()


@pytest.fixture(scope="module")
def store():
    return MemoryStore(KnowledgeGraph.from_triples(TRIPLES))


def right(question, answers, expected):
    return bool(answers) and answers[0] in ANSWER_SETS.get(question, {expected})


def test_topic_template_hides_names():
    assert topic_template("Which films starred Al Pacino and al pacino?", ["Al Pacino"]) == \
        "Which films starred TE_1 and TE_1?"


def test_warm_pool_skips_the_brain_at_equal_answers(planner, store, tmp_path):
    cold = build_controller(CONFIG, schema(), store=store, planner=planner)
    pool = ExperiencePool(ExperienceConfig(embedder="hashing"), HashingEmbedder(128),
                          SealedLog(tmp_path / "pool.sealed", KEY))
    warm = build_controller(CONFIG, schema(), store=store, planner=planner,
                            memory=PoolMemory(pool, privacy_tag(CONFIG)))
    before = {q: cold.answer(q, t) for q, t, _ in QUESTIONS}
    first = {q: warm.answer(q, t) for q, t, _ in QUESTIONS}
    second = {q: warm.answer(q, t) for q, t, _ in QUESTIONS}
    for question, _, expected in QUESTIONS:
        assert second[question].answers[:1] == before[question].answers[:1], question
        assert right(question, second[question].answers, expected)
        assert second[question].memory["analysis"] == "experience"
        assert second[question].brain_calls < before[question].brain_calls, question
    assert sum(r.brain_calls for r in second.values()) == 0
    assert sum(r.brain_calls for r in first.values()) <= sum(r.brain_calls for r in before.values())
    # only anonymised traces are stored: no entity name in the sealed file or the records
    pool.log.close()
    data = (tmp_path / "pool.sealed").read_bytes()
    names = {n for t in TRIPLES for n in (t[0], t[2])}
    for name in names:
        assert name.encode() not in data
        for record in pool.records.values():
            assert name not in record.to_bytes().decode()


class Failing:
    """A memory whose verified template points the wrong way: the controller must fall back."""

    def exemplars(self, question, indicator):
        return []

    def hints(self, question, indicator, privacy):
        from rg.reasoning.dualtower.memory import MemoryHints, RecalledAnalysis
        return MemoryHints(skip_brain=True, analysis=RecalledAnalysis("TE -[no_such]-> ANSWER", ("no_such",), 1, "no_such_type"),
                           init=("topic", 1), score=1.0)

    def remember(self, trace):
        self.last = trace


def test_failed_template_falls_back_to_the_brain(planner, store):
    memory = Failing()
    controller = build_controller(CONFIG, schema(), store=store, planner=planner, memory=memory)
    result = controller.answer("who wrote Casino", ("Casino",))
    assert result.answers[:1] == ("Nicholas Pileggi",)
    assert result.memory["memory_fallback"] and result.memory["analysis"] == "brain"
    assert result.brain_calls >= 1
    assert memory.last.sufficient and "Casino" not in memory.last.question


def test_edge_memory_replays_the_used_evidence(planner, store):
    edges = EdgeMemory(EdgeMemoryConfig(), HashingEmbedder(128))
    controller = build_controller(CONFIG, schema(), store=store, planner=planner, edges=edges)
    first = controller.answer("who wrote Casino", ("Casino",))
    assert first.memory["analysis"] == "brain" and first.memory["edges_enhanced"] >= 1
    assert ("Casino", "written_by", "Nicholas Pileggi") in edges.vectors
    second = controller.answer("who wrote Casino", ("Casino",))
    assert second.memory["analysis"] == "replay" and second.memory["replay_edges"] >= 1
    assert second.answers[:1] == first.answers[:1] and second.brain_calls == 0
