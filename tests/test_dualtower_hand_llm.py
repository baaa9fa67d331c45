"""The Hand LLM (``hand.kind: llm``): a trusted local model answers from the verified raw evidence,
booked as side ``hand``; the Brain's endpoint still sees only anonymised payloads; a Hand LLM that
gives no answer falls back to the local reader with the reason recorded, so no question is lost."""

from __future__ import annotations

import json

import pytest

from rg.config import ConfigError, validate_config
from rg.data.sample import Sample
from rg.evaluation.dualtower_qa import prediction
from rg.evaluation.qa import Prediction
from rg.graph import KnowledgeGraph
from rg.llm.journal import UsageJournal, read_journal
from rg.reasoning.dualtower import DualTowerConfig, build_controller
from rg.reasoning.dualtower.result import DualTowerResult
from rg.stores.memory import MemoryStore
from tests.dualtower_world import TRIPLES, schema
from tests.scripted_server import Reply, Respond, Script, ScriptedServer, Status
from tests.test_dualtower_wire import RAW_ENTITIES, brain, leaks

FAST = {"max_retries": 0, "backoff_s": 0.0, "max_backoff_s": 0.0, "timeout_s": 5.0}


def controller(brain_url: str, hand_url: str | None, journal: UsageJournal | None = None):
    hand = {"kind": "local"} if hand_url is None else {
        "kind": "llm", "llm": {"base_url": hand_url, "model": "local-reader", "side": "hand", **FAST}}
    config = DualTowerConfig(
        privacy={"mode": "utility"}, similarity="lexical", hand=hand,
        brain={"kind": "llm", "llm": {"base_url": brain_url, "model": "remote", "side": "brain", **FAST}})
    return build_controller(config, schema(), store=MemoryStore(KnowledgeGraph.from_triples(TRIPLES)), journal=journal)


def reader(body: dict) -> str:
    """A scripted Hand model: the tail of the evidence line whose relation the question's verb names."""
    prompt = body["messages"][-1]["content"].rsplit("Task:", 1)[1]
    verb = prompt.split("Question: ", 1)[1].split()[1][:5]  # "who starred in Casino" -> "starr"
    line = next(x for x in prompt.splitlines() if f"[{verb}" in x)
    return f"ans: {line.rsplit(' → ', 1)[1]}"


def test_the_hand_llm_reads_raw_evidence_and_is_booked_on_the_hand_side(tmp_path):
    with ScriptedServer(Script.always(Respond(brain))) as remote, ScriptedServer(Script.always(Respond(reader))) as local:
        alone = controller(remote.base_url, None).answer("who starred in Casino", ["Casino"])
        journal = UsageJournal(tmp_path / "llm_usage.jsonl", "r1")
        result = controller(remote.base_url, local.base_url, journal).answer("who starred in Casino", ["Casino"])
        brain_bodies = [r.raw.decode("utf-8") for r in remote.chat_requests]
        hand_prompts = [r.body["messages"][-1]["content"] for r in local.chat_requests]
    # the local reader takes the Brain's first kept path; the Hand's model reads what the question asks
    assert alone.answers == ("Martin Scorsese",) and "read" not in alone.usage.get("stages", {})
    assert result.answers == ("Robert De Niro",) and not result.faults and result.fallback is None
    assert len(hand_prompts) == 1 and "Casino → [starred_actors] → Robert De Niro" in hand_prompts[0]
    assert "Question: Who starred in Casino?" in hand_prompts[0]  # raw names, written as the tuned reader learnt
    assert [leaks(body, RAW_ENTITIES) for body in brain_bodies] == [[]] * len(brain_bodies)
    read = result.usage["stages"]["read"]
    assert list(read) == ["hand"] and read["hand"]["calls"] == 1 and read["hand"]["prompt_tokens"] > 0
    assert alone.brain_calls + result.brain_calls == len(brain_bodies) and result.brain_calls >= 1
    journaled = read_journal(tmp_path / "llm_usage.jsonl", "r1")  # both sides, as each call completed
    assert journaled.get("read", "hand").calls == 1
    assert journaled.by_side()["brain"].calls == result.brain_calls

    sample = Sample("q1", "who starred in Casino", ("Robert De Niro",), ("Casino",), ("Robert De Niro",), tuple(TRIPLES))
    pred = prediction(sample, result, 0.1)
    assert pred.usage_by_side["hand"].calls == 1 and pred.usage_by_side["brain"].calls == result.brain_calls
    assert pred.usage.calls == 1 + result.brain_calls
    assert type(pred).from_dict(pred.to_dict()).usage_by_side == pred.usage_by_side


@pytest.mark.parametrize(
    ("reply", "reason", "calls"),
    [
        (Reply("I am not sure."), "no_answer_line", 2),  # the follow-up asks once more, then the local reader
        (Status(500), "llm_server_error", 1),
    ],
)
def test_a_hand_llm_without_an_answer_falls_back_to_the_local_reader(reply, reason, calls):
    with ScriptedServer(Script.always(Respond(brain))) as remote, ScriptedServer(Script.always(reply)) as local:
        alone = controller(remote.base_url, None).answer("who starred in Casino", ["Casino"])
        result = controller(remote.base_url, local.base_url).answer("who starred in Casino", ["Casino"])
        asked = len(local.chat_requests)
    assert asked == calls
    assert [(f.stage, f.reason, f.attempts, f.fallback) for f in result.faults] == [
        ("hand_read", reason, calls, "local_reader")]
    assert result.answers == alone.answers == ("Martin Scorsese",)  # the local reader's answer: never a lost question
    assert result.usage["stages"]["read"]["hand"]["calls"] == calls


def test_hand_config_errors_name_the_field_and_the_fix():
    with pytest.raises(ConfigError, match=r"hand.llm is not set. Fix: give hand.llm"):
        validate_config({"hand": {"kind": "llm"}}, DualTowerConfig)
    with pytest.raises(ConfigError, match=r"llm.side is 'brain', but the Hand LLM sends raw evidence.*Fix: set `llm.side: hand`"):
        validate_config({"hand": {"kind": "llm", "llm": {"base_url": "http://127.0.0.1:1/v1", "model": "m",
                                                          "side": "brain"}}}, DualTowerConfig)
    with pytest.raises(ConfigError, match=r"hand.llm is set but hand.kind is 'local'"):
        validate_config({"hand": {"llm": {"base_url": "http://127.0.0.1:1/v1", "model": "m"}}}, DualTowerConfig)
    assert DualTowerConfig().hand.kind == "local"


@pytest.mark.parametrize(
    ("evidence", "fallback", "failure"),
    [
        (("Casino -> starred_actors -> Robert De Niro",), None, "reader_found_nothing"),
        ((), "unverified", "unverified"),
        ((), None, "no_candidates"),
        (("Casino -> starred_actors -> Robert De Niro",), "unverified", "unverified"),
    ],
)
def test_a_question_without_answers_records_why(evidence, fallback, failure):
    """Verified evidence that the reader found no answer in is not reported as a lack of candidates."""
    result = DualTowerResult(question="who starred in Casino", answers=(), evidence=evidence, brain_payloads=(),
                             brain="local", brain_calls=1, usage={}, exposure={}, fallback=fallback)
    sample = Sample("q1", "who starred in Casino", ("Robert De Niro",), ("Casino",), ("Robert De Niro",), tuple(TRIPLES))
    assert prediction(sample, result, 0.1).failure == failure


def test_a_prediction_records_how_the_controller_answered():
    """The prediction's trace holds the memory notes and each node's indicator, status and kept candidates,
    and it survives the predictions file's round trip."""
    node = {"indicator": "TE -[written_by]-> ANSWER", "depth": 1, "mode": "topic", "status": "verified",
            "failures": 0, "tried": [["topic", 1]], "candidates": ["TE_1 → [written_by] → ent_1 (person)"]}
    result = DualTowerResult(question="who wrote Casino", answers=("Nicholas Pileggi",), evidence=("x",),
                             brain_payloads=(), brain="local", brain_calls=0, usage={}, exposure={},
                             tree=(node,), memory={"analysis": "experience", "experience_score": 0.99})
    sample = Sample("q1", "who wrote Casino", ("Nicholas Pileggi",), ("Casino",), ("Nicholas Pileggi",), tuple(TRIPLES))
    made = prediction(sample, result, 0.1)
    assert made.trace == {"memory": {"analysis": "experience", "experience_score": 0.99}, "brain_calls": 0,
                          "nodes": [{"indicator": "TE -[written_by]-> ANSWER", "status": "verified", "mode": "topic",
                                     "candidates": ["TE_1 → [written_by] → ent_1 (person)"]}]}
    assert Prediction.from_dict(json.loads(json.dumps(made.to_dict()))).trace == made.trace
