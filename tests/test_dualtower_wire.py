"""The dual-tower controller with the LLM Brain at a scripted 127.0.0.1 server: whole controller
runs across privacy modes never put a raw entity name or id (nor, in privacy mode, a raw relation
label) in any request body the server receives — and the plaintext control shows the checker
finds them when they are sent; Brain faults (429, 500, timeout, malformed JSON) are retried a
bounded number of times, then the Hand goes on alone, the fault is recorded and the answer returned."""

from __future__ import annotations

import json
import re
import unicodedata

import pytest

from rg.graph import KnowledgeGraph
from rg.reasoning.dualtower import DualTowerConfig, build_controller
from rg.stores.memory import MemoryStore
from tests.dualtower_world import QUESTIONS, TRIPLES, schema
from tests.scripted_server import Reply, Respond, Script, ScriptedServer, Status

RAW_ENTITIES = sorted({e for h, _, t in TRIPLES for e in (h, t)})
RAW_RELATIONS = sorted({r for _, r, _ in TRIPLES})


def checker_form(text: str) -> str:
    """The checker's own normalisation (independent of rg.privacy)."""
    text = unicodedata.normalize("NFKD", unicodedata.normalize("NFKC", text))
    text = "".join(c for c in text if not unicodedata.combining(c) and unicodedata.category(c) != "Cf")
    return " " + re.sub(r"[^0-9a-z]+", " ", text.casefold()).strip() + " "


def leaks(body: str, raw) -> list[str]:
    folded = checker_form(body)
    return [r for r in raw if checker_form(r) in folded]


def relation_leaks(body: str) -> list[str]:
    """Raw relation labels written as labels (``directed_by``; the words "directed by" are the
    question's own language, which the Brain may read)."""
    return [r for r in RAW_RELATIONS if re.search(rf"(?<![\w.]){re.escape(r)}(?![\w.])", body)]


def payload_of(body: dict) -> dict:
    """The sealed payload JSON a Brain request carries (the task field of the template)."""
    user = body["messages"][-1]["content"]
    return json.loads(user.rsplit("Input: ", 1)[1].rsplit("\nReply:", 1)[0])


def brain(body: dict) -> str:
    """A scripted Brain: one-hop indicator; selection keeps the first candidates it is shown."""
    shown = payload_of(body)
    if shown["kind"] == "analysis":
        return json.dumps({"sub_questions": [shown["question"]], "depth": 1,
                           "indicators": [{"text": "TE_1 -[link]-> ANSWER", "relations": [], "depth": 1}]})
    return json.dumps({"ids": [c["id"] for c in shown["candidates"]][: shown["keep"]]})


def controller(url: str, mode: str, **llm):
    config = DualTowerConfig(
        privacy={"mode": mode}, similarity="lexical",
        brain={"kind": "llm", "reasks": 1,
               "llm": {"base_url": url, "model": "scripted", "side": "brain", "max_retries": 1, "backoff_s": 0.0,
                       "max_backoff_s": 0.0, "timeout_s": 5.0, **llm}})
    return build_controller(config, schema(), store=MemoryStore(KnowledgeGraph.from_triples(TRIPLES)))


@pytest.mark.parametrize("mode", ["utility", "privacy"])
def test_no_raw_entity_or_id_reaches_the_brain_across_whole_runs(mode):
    with ScriptedServer(Script.always(Respond(brain))) as server:
        run = controller(server.base_url, mode)
        results = [run.answer(question, topics) for question, topics, _ in QUESTIONS]
        bodies = [r.raw.decode("utf-8") for r in server.chat_requests]
    assert all(r.answers and not r.faults for r in results)
    assert len(bodies) == sum(r.brain_calls for r in results) >= len(QUESTIONS)
    assert [leaks(body, RAW_ENTITIES) for body in bodies] == [[]] * len(bodies)
    if mode == "privacy":
        assert [relation_leaks(body) for body in bodies] == [[]] * len(bodies)
    else:
        assert any(relation_leaks(body) for body in bodies)  # utility mode shows relations as they are
    # what the Brain saw is exactly what reached the wire
    sent = [json.dumps(payload_of(json.loads(b)), sort_keys=True) for b in bodies]
    saw = [json.dumps(json.loads(p), sort_keys=True) for r in results for p in r.brain_payloads]
    assert sent == saw
    assert sum(r.exposure["brain_calls"] for r in results) == len(bodies)


def test_the_checker_finds_raw_names_when_plaintext_sends_them():
    with ScriptedServer(Script.always(Respond(brain))) as server:
        controller(server.base_url, "plaintext").answer("who wrote Casino", ["Casino"])
        bodies = [r.raw.decode("utf-8") for r in server.chat_requests]
    assert "Casino" in leaks(" ".join(bodies), RAW_ENTITIES)


def analysis_requests(server: ScriptedServer) -> int:
    return sum(payload_of(r.body)["kind"] == "analysis" for r in server.chat_requests)


@pytest.mark.parametrize(
    ("first", "reason", "analysis_calls"),
    [
        (Status(429, retry_after=0.0), "rate_limited", 2),  # max_retries = 1: two HTTP attempts
        (Status(500), "server_error", 2),
        (Reply("{}", delay_s=3.0), "timeout", 2),
        (Reply("I think the answer is a film."), "malformed", 2),  # reasks = 1: asked twice
    ],
)
def test_brain_faults_are_bounded_then_the_hand_answers_alone(first, reason, analysis_calls):
    def scripted(body):
        return first if payload_of(body)["kind"] == "analysis" else Reply(brain(body))

    with ScriptedServer(Script.always(Respond(scripted))) as server:
        run = controller(server.base_url, "utility", timeout_s=1.0)
        result = run.answer("who wrote Casino", ["Casino"])
        calls = analysis_requests(server)
    assert calls == analysis_calls
    assert [(f.stage, f.reason, f.fallback) for f in result.faults] == [("analysis", reason, "hand_analysis")]
    assert result.hand_only and result.answers  # never a lost question
    assert result.tree[0]["indicator"] == "who wrote TE_1 (film)"  # the Hand's own analysis


def test_a_brain_that_is_down_loses_no_question():
    with ScriptedServer(Script.always(Status(500))) as server:
        run = controller(server.base_url, "utility", max_retries=0)
        results = [run.answer(question, topics) for question, topics, _ in QUESTIONS]
    assert all(r.faults and r.faults[0].reason == "server_error" for r in results)
    assert all(f.stage in ("analysis", "selection") for r in results for f in r.faults)
    assert sum(bool(r.answers) for r in results) == len(QUESTIONS)
    assert results[0].answers == ("Martin Scorsese",)  # "who directed Casino" by the Hand alone (lexical DRM)
