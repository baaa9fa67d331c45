"""ReMindRAG's traversal reasoner: exact local traversal, the LLM path on a scripted server, memory replay."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from rg.memory.edges import EdgeMemory, EdgeMemoryConfig
from rg.memory.embed import HashingEmbedder
from rg.reasoning.traverse import Subgraph, TraverseConfig, Traverser
from rg.reasoning.traverse.prompts import REASK
from tests.scripted_server import Reply, Script, ScriptedServer, Status

TRIPLES = (
    ("Heat", "directed_by", "Michael Mann"),     # 0
    ("Heat", "release_year", "1995"),            # 1
    ("Heat", "starred_actors", "Al Pacino"),     # 2
    ("Michael Mann", "born_in", "Chicago"),      # 3
    ("Al Pacino", "born_in", "New York"),        # 4
    ("Chicago", "contained_by", "USA"),          # 5
)
QUESTION = "where was the director of Heat born"
SCORES = np.array([3.0, -2.0, 1.0, 2.0, -1.0, -3.0])


def run(traverser: Traverser, scores=SCORES, question: str = QUESTION):
    return asyncio.run(traverser.traverse(question, ["Heat"], TRIPLES, scores))


def test_local_traversal_is_best_first_until_nothing_scores_above_the_floor():
    result = run(Traverser(TraverseConfig(kind="local", min_score=0.0)))
    # Heat->MM (3), MM->Chicago (2), Heat->Al Pacino (1); then the best leaving edge is -1 <= 0
    assert result.edges == (0, 3, 2)
    assert (result.steps, result.stop, result.source) == (3, "sufficient", "explore")
    assert result.answers == ("Chicago",) and result.scores == (5.0,)  # sum along Heat->MM->Chicago
    assert result.used == (0, 3)
    assert result.usage.calls == 0 and result.fallbacks == () and result.memorised is None


def test_local_traversal_budget_last_score_and_ties():
    result = run(Traverser(TraverseConfig(kind="local", max_steps=2, walk_score="last")))
    assert result.edges == (0, 3) and result.stop == "budget"
    assert result.answers == ("Michael Mann",)  # last: MM's edge 3 beats Chicago's 2
    tied = run(Traverser(TraverseConfig(kind="local", min_score=-10, max_steps=1)), scores=np.zeros(6))
    assert tied.edges == (0,) and tied.answers == ("Michael Mann",)  # ties: triple order
    assert run(Traverser(TraverseConfig(kind="local", min_score=-10)), scores=np.zeros(6)).stop == "exhausted"


def test_subgraph_paths_and_candidates():
    s = Subgraph(TRIPLES, ["Heat", "Nowhere"])
    assert s.seeds == ("Heat",)
    assert [c.tid for c in s.candidates("Heat")] == [0, 1, 2]
    assert s.add(0, "Heat", "step") == "Michael Mann" and s.add(3, "Michael Mann", "step") == "Chicago"
    assert s.path_to("Chicago") == [0, 3] and s.path_to("Heat") == []
    assert [c.tid for c in s.frontier()] == [1, 2, 5]
    with pytest.raises(ValueError, match="not in the subgraph"):
        s.add(4, "Al Pacino", "step")


def test_scores_must_match_the_triples():
    with pytest.raises(ValueError, match=r"\(2,\) scores for 6 triples"):
        run(Traverser(TraverseConfig()), scores=np.zeros(2))


def test_config_errors_name_the_field():
    with pytest.raises(ValueError, match="traverse.llm is not set"):
        TraverseConfig(kind="llm")
    with pytest.raises(ValueError, match="traverse.llm.side is 'brain'"):
        TraverseConfig(kind="llm", llm={"base_url": "http://127.0.0.1:1/v1", "model": "m", "side": "brain"})


def memory() -> EdgeMemory:
    return EdgeMemory(EdgeMemoryConfig(), HashingEmbedder(256))


def test_memorisation_changes_replay_on_the_next_round():
    edges = memory()
    traverser = Traverser(TraverseConfig(kind="local"), edges=edges)
    scores = np.array([3.0, -2.0, -0.5, 2.0, -1.0, -3.0])
    cold = run(traverser, scores)
    assert (cold.replayed, cold.steps, cold.source, cold.answers) == (0, 2, "explore", ("Chicago",))
    assert cold.memorised == (2, 0)  # edges 0 and 3 enhanced; nothing to penalise yet (no vectors)
    warm = run(traverser, scores)
    assert (warm.replayed, warm.steps, warm.source, warm.answers) == (2, 0, "replay", ("Chicago",))
    assert warm.edges == (0, 3)
    # a round that answers from Heat->Al Pacino instead penalises the replayed 0 and 3; twice enhanced, they
    # resist one penalty (damped update) and are still replayed, beside the newly enhanced 2
    other = run(traverser, OTHER)
    assert other.edges == (0, 3, 2) and other.answers == ("Al Pacino",) and other.memorised == (1, 2)
    assert replayed(edges) == {TRIPLES[0], TRIPLES[2], TRIPLES[3]}
    # enhanced once only, one penalty takes them out of the replay: q̂·v = 2/π·(1 − δ(2/π)) < λ/(1−α)
    fresh = memory()
    once = Traverser(TraverseConfig(kind="local"), edges=fresh)
    run(once, scores)
    assert replayed(fresh) == {TRIPLES[0], TRIPLES[3]}
    assert run(once, OTHER).memorised == (1, 2)
    assert replayed(fresh) == {TRIPLES[2]}


OTHER = np.array([-5.0, -2.0, 4.0, 0.5, -1.0, -3.0])


def replayed(edges: EdgeMemory) -> set:
    return {s.edge for p in edges.replay(TRIPLES, ["Heat"], edges.query(QUESTION)).paths for s in p}


def server_config(url: str, **extra) -> TraverseConfig:
    return TraverseConfig(kind="llm", reasks=1, llm={"base_url": url, "model": "scripted", "max_retries": 0,
                                                     "backoff_s": 0.0, "max_backoff_s": 0.0, "timeout_s": 5.0},
                          **extra)


def reply(text: str) -> Reply:
    return Reply(text, prompt_tokens=10, completion_tokens=3)


def test_llm_traversal_counts_every_call_and_token():
    script = [reply('{"sufficient": false, "node": 0}'), reply('{"edge": 0}'),
              reply('{"sufficient": false, "node": 1}'), reply('```json\n{"edge": 0}\n```'),
              reply('{"sufficient": true, "node": null}'), reply('{"answers": ["chicago"], "used": [1]}')]
    edges = memory()
    with ScriptedServer(script) as server:
        result = run(Traverser(server_config(server.base_url), edges=edges))
        bodies = [r.body for r in server.chat_requests]
    assert result.guide == "llm:scripted" and result.fallbacks == ()
    assert result.edges == (0, 3) and result.steps == 2 and result.stop == "sufficient"
    assert result.answers == ("chicago",) and result.used == (3, 0)  # the used line, then the path to Chicago
    assert (result.usage.calls, result.usage.prompt_tokens, result.usage.completion_tokens) == (6, 60, 18)
    assert result.memorised == (2, 0)
    exploit = bodies[1]["messages"][1]["content"]  # candidates best scored first
    assert exploit.endswith("Node: Heat\nEdges:\n[0] Heat -> directed_by -> Michael Mann\n"
                            "[1] Heat -> starred_actors -> Al Pacino\n[2] Heat -> release_year -> 1995\nReply:")
    answer = bodies[5]["messages"][1]["content"]
    assert answer.endswith("[0] Heat -> directed_by -> Michael Mann\n[1] Michael Mann -> born_in -> Chicago\nReply:")


def test_llm_malformed_reply_is_reasked_then_falls_back_to_the_local_rule():
    script = [reply("I think Heat"), reply('{"sufficient": false, "node": 7}'),  # explore: bad twice -> local
              Status(400, message="bad request"),                                   # exploit: client error -> local
              reply('{"sufficient": true}'),
              reply('{"answers": []}'), reply('{"answers": ["Michael Mann"], "used": [0]}')]
    with ScriptedServer(script) as server:
        result = run(Traverser(server_config(server.base_url)), question="who directed Heat")
        bodies = [r.body for r in server.chat_requests]
    assert result.fallbacks == ("traverse_explore:malformed", "traverse_exploit:llm_client_error")
    assert result.edges == (0,)  # the local rule chose Heat and its best edge
    assert result.answers == ("Michael Mann",) and result.used == (0,)
    assert (result.usage.calls, result.usage.failures) == (6, 1)
    assert result.usage.prompt_tokens == 50  # five answered calls; the failed one reports none
    reask = bodies[1]["messages"]
    assert [m["role"] for m in reask] == ["system", "user", "assistant", "user"]
    assert reask[2]["content"] == "I think Heat"
    assert reask[3]["content"] == REASK.format(problem="the reply holds no JSON object")
    assert "answers is empty" not in bodies[4]["messages"][-1]["content"]  # first answer ask is fresh
    assert "wrong shape" in bodies[5]["messages"][-1]["content"]  # empty answers fail validation


def test_llm_answer_falls_back_when_every_reply_is_malformed():
    script = Script((), default=reply('{"sufficient": true}'))
    with ScriptedServer(script) as server:
        result = run(Traverser(server_config(server.base_url, max_steps=0)))
    assert result.stop == "budget" and result.edges == ()
    assert result.fallbacks == ("traverse_answer:malformed",) and result.answers == ()
    assert result.usage.calls == 2
