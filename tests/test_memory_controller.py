"""The memories inside the dual-tower controller: fewer Brain calls when warm, same answers."""

from __future__ import annotations

import numpy as np
import pytest

from rg.graph import KnowledgeGraph
from rg.memory import EdgeMemory, EdgeMemoryConfig, ExperienceConfig, ExperiencePool, PoolMemory, SealedLog
from rg.memory.embed import HashingEmbedder
from rg.reasoning.dualtower import DualTowerConfig, build_controller
from rg.reasoning.dualtower.controller import privacy_tag, topic_template
from rg.reasoning.dualtower.memory import RecalledAnalysis, Trace
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


def test_a_topic_with_a_mention_in_another_case_is_tagged_once():
    """A linked or written mention that differs from the name only in case (``casino``) must not match again
    inside the tag the name was replaced by (``TE_1 (Casino)``)."""
    from rg.privacy.names import NameBook
    from rg.reasoning.dualtower.template import reader_question, tag_topics

    book = NameBook({"m.0c": "Casino"}, {"m.0c": ("casino",)})
    assert tag_topics("who directed casino, the Casino of 1995", ["m.0c"], book) == \
        "who directed TE_1 (Casino), the TE_1 (Casino) of 1995"
    assert topic_template("who directed casino", ["m.0c"], book) == "who directed TE_1"
    assert reader_question("who directed casino", ["m.0c"], book) == "Who directed Casino?"


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
    # the replayed chain agrees with the Brain's analysis: it selects locally, the analysis stays the Brain's
    assert second.memory["analysis"] == "brain" and second.memory["replay_edges"] == 1
    assert second.memory["replay_agreed"] == 1
    assert second.answers[:1] == first.answers[:1] == ("Nicholas Pileggi",)


class Table:
    """A test embedder: the listed texts as the given vectors (normalised), any other text as the last axis.

    It stands for a sentence encoder on MetaQA's masked wordings, which scores most wordings of other
    templates at 0.9 or more (and every text alike for ``Table({}, 2)``)."""

    def __init__(self, rows: dict[str, list[float]], dim: int = 4) -> None:
        self.rows, self.dim = rows, dim

    def embed(self, texts):
        out = np.zeros((len(texts), self.dim), np.float32)
        for i, text in enumerate(texts):
            out[i, : len(self.rows.get(text, ()))] = self.rows.get(text, ())
            if text not in self.rows:
                out[i, -1] = 1.0
        return out / np.linalg.norm(out, axis=1, keepdims=True)


def test_a_shorter_replayed_chain_does_not_answer_a_deeper_question(planner, store):
    """A 1-hop question about Casino leaves its edge enhanced; a 2-hop question about Casino replays it (the
    embedder cannot tell the two apart) but must not stop at the first hop."""
    edges = EdgeMemory(EdgeMemoryConfig(), Table({}, 2))
    controller = build_controller(CONFIG, schema(), store=store, planner=planner, edges=edges)
    first = controller.answer("who directed Casino", ("Casino",))
    assert first.answers[:1] == ("Martin Scorsese",)
    assert set(edges.vectors) == {("Casino", "directed_by", "Martin Scorsese")}
    second = controller.answer("which films share a director with Casino", ("Casino",))
    assert second.memory["replay_edges"] == 1  # the 1-hop chain is replayed ...
    assert second.memory["analysis"] == "brain" and "replay_agreed" not in second.memory  # ... and not used
    assert second.answers[:1] == ("The Irishman",)
    third = controller.answer("who directed Casino", ("Casino",))  # a 2-hop replay's first hop agrees with 1 hop
    assert third.memory["replay_agreed"] == 1 and third.answers[:1] == ("Martin Scorsese",)


def test_a_close_trace_of_another_template_does_not_gate(planner, store):
    """A verified 1-hop trace whose question key scores 0.93 against a 2-hop question must not skip the Brain."""
    table = Table({"who directed TE_1": [1.0, 0.0, 0.0], "which films share a director with TE_1": [0.93, 0.3676, 0.0]})
    pool = ExperiencePool(ExperienceConfig(embedder="hashing"), table)
    warm = build_controller(CONFIG, schema(), store=store, planner=planner, memory=PoolMemory(pool, privacy_tag(CONFIG)))
    assert warm.answer("who directed Casino", ("Casino",)).answers[:1] == ("Martin Scorsese",)
    second = warm.answer("which films share a director with Heat", ("Heat",))
    assert 0.92 < second.memory["experience_score"] < 0.94
    assert second.memory["analysis"] == "brain" and second.brain_calls >= 1
    assert second.answers[:1] == ("Collateral",)
    third = warm.answer("who directed Heat", ("Heat",))  # the same template (score 1) still gates
    assert third.memory["analysis"] == "experience" and third.brain_calls == 0
    assert third.answers[:1] == ("Michael Mann",)


@pytest.mark.parametrize("reworded_skip, edges, analysis", [
    ("with_replay", False, "brain"), ("with_replay", True, "replay"), ("alone", False, "experience")])
def test_a_reworded_question_reuses_a_trace_only_when_its_replay_confirms_it(planner, store, reworded_skip, edges,
                                                                            analysis):
    """A rewording scores 0.98 against a verified trace: by default the trace is reused only when the edge memory
    replays this question's chain along the trace's relations; without one the Brain is asked."""
    table = Table({"who directed TE_1": [1.0, 0.0, 0.0], "which director made TE_1": [0.98, 0.199, 0.0]})
    pool = ExperiencePool(ExperienceConfig(embedder="hashing", reworded_skip=reworded_skip), table)
    memory = EdgeMemory(EdgeMemoryConfig(), Table({}, 2)) if edges else None
    warm = build_controller(CONFIG, schema(), store=store, planner=planner,
                            memory=PoolMemory(pool, privacy_tag(CONFIG)), edges=memory)
    assert warm.answer("who directed Casino", ("Casino",)).answers[:1] == ("Martin Scorsese",)
    second = warm.answer("which director made Casino", ("Casino",))
    assert second.memory["experience_score"] == pytest.approx(0.98, abs=1e-3)
    assert second.memory["analysis"] == analysis
    assert second.memory.get("unconfirmed_match", False) == (analysis == "brain")
    if analysis == "brain":
        assert second.brain_calls >= 1
    else:
        assert second.brain_calls == 0 and second.answers[:1] == ("Martin Scorsese",)


def test_records_of_other_depths_scoring_as_close_make_the_match_ambiguous():
    """ShouldSkipBrain: the best record (0.995 for q1b) has a rival within the margin (0.98) of another depth ->
    ask the Brain; the record's own question (1.0, exact) is not ambiguous."""
    table = Table({"q1": [1.0, 0.0, 0.0], "q2": [0.99, 0.1411, 0.0], "q3": [0.0, 1.0, 0.0],
                   "q1b": [0.995, 0.0, 0.0999]})
    pool = ExperiencePool(ExperienceConfig(embedder="hashing"), table)
    tag = "utility|1.0|0"

    def trace(question, relations):
        analysis = RecalledAnalysis("TE " + " ".join(relations), relations, len(relations))
        return Trace(question, analysis, (("topic", len(relations)),), (("p", (relations,)),), True, (), tag)

    pool.remember(trace("q1", ("directed_by",)))
    assert pool.hints("q1", None, tag).skip_brain  # alone: confident
    pool.remember(trace("q2", ("directed_by", "directed_by^-1")))
    hints = pool.hints("q1b", None, tag)
    assert not hints.skip_brain and hints.analysis.depth == 1 and hints.score == pytest.approx(0.995, abs=1e-4)
    exact = pool.hints("q1", None, tag)  # asked again: its own record, not a rival's
    assert exact.skip_brain and exact.analysis.depth == 1 and exact.score == pytest.approx(1.0)
    assert exact.relation_paths == frozenset({(("directed_by",),)})
    pool.remember(trace("q3", ("written_by", "written_by^-1")))  # far from q1: no rival
    assert not pool.hints("q1b", None, tag).skip_brain  # q2 still is
    assert pool.hints("q3", None, tag).skip_brain
    assert pool.hints("q3", None, tag).relation_paths == frozenset({(("written_by", "written_by^-1"),)})


class Unreachable:
    """A Brain factory whose Brain fails every call (what an egress refusal or a dead endpoint leaves the Hand with)."""

    name = "unreachable"

    def __call__(self, session, ledger):
        return self

    async def analyse(self, payload):
        from rg.reasoning.dualtower.brain import BrainError
        raise BrainError("server_error", "scripted outage")

    async def select(self, payload):
        from rg.reasoning.dualtower.brain import BrainError
        raise BrainError("server_error", "scripted outage")


def test_an_analysis_the_hand_made_alone_is_not_booked_as_the_brains(store):
    edges = EdgeMemory(EdgeMemoryConfig(), HashingEmbedder(128))
    controller = build_controller(CONFIG, schema(), store=store, edges=edges, brains=Unreachable())
    result = controller.answer("who wrote Casino", ("Casino",))
    assert result.memory["analysis"] == "hand"
    assert [(f.stage, f.reason, f.fallback) for f in result.faults][:1] == [("analysis", "server_error", "hand_analysis")]


class DirectorBrain:
    """A scripted Brain: every question is TE -[directed_by]-> ?x1 -[directed_by^-1]-> ANSWER (no planner to train)."""

    name = "scripted"

    def __call__(self, session, ledger):
        return self

    async def analyse(self, payload):
        from rg.reasoning.dualtower.brain import Analysis, Indicator
        indicator = Indicator(text="TE -[directed_by]-> ?x1 -[directed_by^-1]-> ANSWER",
                              relations=("directed_by", "directed_by^-1"), depth=2)
        return Analysis((), (indicator,), 2)

    async def select(self, payload):
        from rg.reasoning.dualtower.brain import Choice
        return Choice((1,))


def test_an_exemplar_of_another_relation_path_does_not_steer_the_pruning(store):
    """A verified co-actor trace ("which films share an actor with TE_1") scores 0.965 against a shared-director
    question (question key 0.93, indicator 1.0): before, its template entered the pruning score's memory term and,
    weighed 0.7 with W1 = 1, pulled the co-actor path over the director path (answer The Irishman / Casino).
    An exemplar only counts when its depth and relations are the node's indicator's."""
    config = DualTowerConfig(privacy={"mode": "utility"}, similarity="lexical", w1=1, w_max=1, alpha=0.3)
    table = Table({"which films share an actor with TE_1": [0.93, 0.3676, 0.0],
                   "which films share a director with TE_1": [1.0, 0.0, 0.0]})
    pool = ExperiencePool(ExperienceConfig(embedder="hashing"), table)
    actors = ("starred_actors", "starred_actors^-1")
    pool.remember(Trace("which films share an actor with TE_1",
                        RecalledAnalysis("TE -[starred_actors]-> ?x1 -[starred_actors^-1]-> ANSWER", actors, 2),
                        (("topic", 2),), (("TE_1 → [starred_actors] → (person) ← [starred_actors] ← (film)", (actors,)),),
                        True, (), privacy_tag(config)))
    warm = build_controller(config, schema(), store=store, brains=DirectorBrain(),
                            memory=PoolMemory(pool, privacy_tag(config)))
    result = warm.answer("which films share a director with Heat", ("Heat",))
    assert result.memory["analysis"] == "brain" and "exemplars" not in result.memory
    assert result.answers[:1] == ("Collateral",)
    assert [e.score for e in pool.exemplars("which films share a director with TE_1", "x", privacy_tag(config))
            if e.relations == actors] == \
        [pytest.approx(0.965, abs=1e-4)]  # close enough to count by score: the shape is what tells them apart
    # the same template's trace still counts as an exemplar
    warm.answer("which films share a director with Collateral", ("Collateral",))
    again = warm.answer("which films share a director with Heat", ("Heat",))
    assert again.memory["exemplars"] == 1 and again.answers[:1] == ("Collateral",)


def test_local_selection_keeps_the_indicators_path_before_a_records_other_templates(store):
    """A record's templates hold every path that verified for its question key, other questions' too (a
    co-star path beside the director path). The Hand selects locally only candidates that walk the
    indicator; with none, selection goes on as without memory."""
    import asyncio
    from types import SimpleNamespace

    from rg.reasoning.dualtower.brain import Indicator

    config = DualTowerConfig(privacy={"mode": "utility"}, similarity="lexical", w_max=2)
    controller = build_controller(config, schema(), store=store, brains=DirectorBrain())
    actors, directors = (("starred_actors", "starred_actors^-1"),), (("directed_by", "directed_by^-1"),)
    ranked = [(SimpleNamespace(relation_paths=p, name=n), s)
              for p, n, s in [(actors, "co-star", 0.9), (directors, "director", 0.8), (actors, "co-star 2", 0.7)]]
    q = SimpleNamespace(local_paths=frozenset({actors, directors}), memory={})
    indicator = Indicator(text="TE -[directed_by]-> ?x1 -[directed_by^-1]-> ANSWER", relations=directors[0], depth=2)
    kept = asyncio.run(controller._select(q, None, "which films share a director with TE_1", indicator, ranked))
    assert [c.name for c in kept] == ["director"] and q.memory["local_selections"] == 1
    # an indicator naming no relations keeps the pruning order
    loose = Indicator(text="TE -> ANSWER", relations=(), depth=2)
    kept = asyncio.run(controller._select(q, None, "which films share a director with TE_1", loose, ranked))
    assert [c.name for c in kept] == ["co-star", "director"]

