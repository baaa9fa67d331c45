"""QA readers: the LLM reader through the real client against a scripted server, and the
retriever-score reader's exact rankings on hand-made chains."""

from __future__ import annotations

import asyncio
import math

import pytest

from rg.evidence import EvidenceConfig, build_evidence, triple_evidence
from rg.llm.client import OpenAICompatibleClient
from rg.llm.config import LLMConfig
from rg.reasoning import (
    FOLLOW_UP,
    NO_ANSWER_LINE,
    NO_CANDIDATES,
    READ_ANSWERS,
    LLMReader,
    LLMReaderConfig,
    Reader,
    RetrieverReader,
    RetrieverReaderConfig,
    parse_answers,
)
from tests.scripted_server import Reply, Script, ScriptedServer, Status, whitespace_tokens

TWO_TOPICS = (
    ("F1", "directed_by", "Ann"),
    ("F2", "directed_by", "Ann"),
    ("F3", "directed_by", "Ann"),
    ("F2", "starred_actors", "Bob"),
    ("F3", "starred_actors", "Bob"),
    ("F4", "starred_actors", "Bob"),
)
SCORES = (0.2, 0.9, 0.8, 0.9, 0.7, 0.1)
QUESTION = "which films did Ann direct that star Bob"


def evidence():
    return build_evidence(TWO_TOPICS, SCORES, ["Ann", "Bob"], EvidenceConfig(max_length=1))


def run_llm(steps, *, follow_up: bool = True, max_retries: int = 0):
    """Read QUESTION through a scripted server; return the reading, the requests and the ledger."""
    with ScriptedServer(Script(steps)) as srv:
        llm = LLMConfig(base_url=srv.base_url, model="scripted", max_retries=max_retries, backoff_s=0.001,
                        max_backoff_s=0.01, timeout_s=5.0)
        client = OpenAICompatibleClient(llm)
        reader = LLMReader(LLMReaderConfig(llm=llm, follow_up=follow_up), client=client)

        async def go():
            try:
                return await reader.read(QUESTION, evidence())
            finally:
                await client.aclose()

        reading = asyncio.run(go())
        bodies = [r.body for r in srv.chat_requests]
    return reading, bodies, client.ledger.get("read", "hand")


@pytest.mark.parametrize(
    "reply, expected",
    [
        ("ans: F2\nans: F3", ("F2", "F3")),
        ("  ANS :  f2  \n- ans: F2\n* ans: **F3**.\n1. ans: \"F4\"", ("f2", "F3", "F4")),
        ("**ans:** {F2 | F3}\nans: F3", ("F2", "F3")),
        ("The films are F2 and F3.", ()),
        ("answer: F2", ()),
        ("ans:\nans:  **  ", ()),
        ("", ()),
    ],
)
def test_parse_answers(reply, expected):
    assert parse_answers(reply) == expected


def test_prompt_shows_the_example_and_the_evidence_lines():
    reader = LLMReader(LLMReaderConfig(llm=LLMConfig(base_url="http://127.0.0.1:1/v1", model="m"), max_lines=2))
    system, user = reader.messages(QUESTION, evidence())
    assert system["role"] == "system" and READ_ANSWERS.full_id == "read_answers@v1"
    assert "Example:" in user["content"] and "ans: Ana Prado" in user["content"]
    assert user["content"].endswith(
        f"Task:\nQuestion: {QUESTION}\nEvidence:\n"
        "Ann ← [directed_by] ← {F2 | F3} & Bob ← [starred_actors] ← {F2 | F3}\n"
        "Ann ← [directed_by] ← F1\nReply:"
    )
    empty = reader.messages("q", build_evidence((), None, ()))[1]["content"]
    assert "Evidence:\n(no evidence was retrieved)\nReply:" in empty
    assert isinstance(reader, Reader) and isinstance(RetrieverReader(), Reader)


def test_well_formed_reply_maps_answers_to_their_chains():
    reading, bodies, ledger = run_llm([Reply("ans: f3\nans: F2\nans: Nobody\nans: F3")])
    assert reading.ok and reading.reader == "llm:scripted" and reading.prompt_id == "read_answers@v1"
    assert reading.answers == ("f3", "F2", "Nobody") and reading.selected == reading.ranked
    f3, f2, nobody = reading.ranked
    assert (f3.entity, f2.entity, nobody.entity) == ("F3", "F2", None)
    assert [c.render() for c in f3.chains] == ["Ann ← [directed_by] ← F3", "Bob ← [starred_actors] ← F3"]
    assert nobody.chains == () and f3.score is None
    assert len(bodies) == 1
    prompt_tokens = sum(whitespace_tokens(m["content"]) for m in bodies[0]["messages"])
    assert (reading.usage.calls, reading.usage.prompt_tokens, reading.usage.completion_tokens) == (1, prompt_tokens, 8)
    assert (ledger.calls, ledger.prompt_tokens) == (1, prompt_tokens)


def test_malformed_reply_gets_one_follow_up_turn():
    reading, bodies, ledger = run_llm([Reply("I believe the films are F2 and F3."), Reply("ans: F2\nans: F3")])
    assert reading.ok and reading.answers == ("F2", "F3")
    assert len(bodies) == 2
    first, second = bodies[0]["messages"], bodies[1]["messages"]
    assert second[:2] == first
    assert second[2:] == [
        {"role": "assistant", "content": "I believe the films are F2 and F3."},
        {"role": "user", "content": FOLLOW_UP},
    ]
    assert reading.usage.calls == ledger.calls == 2
    assert reading.usage.prompt_tokens == ledger.prompt_tokens == sum(
        whitespace_tokens(m["content"]) for b in bodies for m in b["messages"]
    )


def test_two_malformed_replies_give_no_answers_with_the_reason():
    reading, bodies, _ = run_llm([Reply("F2, I think."), Reply("Still F2.")])
    assert not reading.ok and reading.fallback == NO_ANSWER_LINE
    assert reading.ranked == () and reading.answers == () and reading.usage.calls == 2 and len(bodies) == 2

    once, bodies, _ = run_llm([Reply("F2, I think.")], follow_up=False)
    assert once.fallback == NO_ANSWER_LINE and once.usage.calls == 1 and len(bodies) == 1


def test_empty_reply_and_llm_errors_never_raise():
    empty, _, _ = run_llm([Reply("   ")])
    assert empty.fallback == "llm_empty_reply" and (empty.usage.calls, empty.usage.failures) == (1, 1)

    broken, bodies, ledger = run_llm([Status(500), Status(503)], max_retries=1)
    assert broken.fallback == "llm_server_error" and broken.ranked == ()
    assert len(bodies) == 2 and (broken.usage.calls, broken.usage.retries, broken.usage.failures) == (1, 1, 1)
    assert (ledger.calls, ledger.failures) == (1, 1)

    second_turn, bodies, _ = run_llm([Reply("no idea"), Status(400)])
    assert second_turn.fallback == "llm_client_error" and len(bodies) == 2
    assert (second_turn.usage.calls, second_turn.usage.failures) == (2, 1)
    assert second_turn.usage.prompt_tokens > 0  # the first turn's tokens are kept


def read_local(evidence_, **config):
    return asyncio.run(RetrieverReader(RetrieverReaderConfig(**config)).read(QUESTION, evidence_))


def test_retriever_reader_logsumexp_ranks_ends_both_topics_reach_first():
    reading = read_local(evidence())
    assert reading.reader == "retriever_scores" and reading.ok and reading.usage.calls == 0
    assert [a.text for a in reading.ranked] == ["F2", "F3", "F1", "F4"]  # topics never answers
    scores = [a.score for a in reading.ranked]
    assert scores == pytest.approx([0.9 + math.log(2), 0.8 + math.log(1 + math.exp(-0.1)), 0.2, 0.1])
    assert reading.answers == ("F2",)  # max_gap 0: only ties with the best
    assert [c.render() for c in reading.ranked[1].chains] == ["Ann ← [directed_by] ← F3", "Bob ← [starred_actors] ← F3"]


def test_retriever_reader_max_and_thresholds():
    by_max = read_local(evidence(), aggregate="max", max_gap=0.15)
    assert [(a.text, a.score) for a in by_max.ranked] == [("F2", 0.9), ("F3", 0.8), ("F1", 0.2), ("F4", 0.1)]
    assert by_max.answers == ("F2", "F3")
    absolute = read_local(evidence(), aggregate="max", max_gap=None, min_score=0.15)
    assert absolute.answers == ("F2", "F3", "F1")
    too_high = read_local(evidence(), min_score=5.0)
    assert too_high.answers == ("F2",)  # always at least the best one


def test_retriever_reader_walk_scores_on_a_two_step_chain():
    triples = (("F1", "directed_by", "Ann"), ("F1", "starred_actors", "Bob"), ("F1", "release_year", "1999"))
    ev = build_evidence(triples, [0.9, 0.3, 0.6], ["Ann"])
    # walks: Ann→F1 (0.9); Ann→F1→Bob (0.9, 0.3); Ann→F1→1999 (0.9, 0.6)

    def ranked(**cfg):
        return [(a.text, a.score) for a in read_local(ev, **cfg).ranked]

    assert ranked(walk_score="min") == [("F1", 0.9), ("1999", 0.6), ("Bob", 0.3)]
    assert ranked() == [("1999", pytest.approx(1.5)), ("Bob", pytest.approx(1.2)), ("F1", 0.9)]  # sum
    assert ranked(walk_score="mean") == [("F1", 0.9), ("1999", pytest.approx(0.75)), ("Bob", pytest.approx(0.6))]


def test_summed_logits_stop_at_the_end_of_the_relevant_chain_and_skip_unnamed_nodes():
    triples = (("Ann", "spouse", "m.0x1"), ("m.0x1", "from", "1999"), ("1999", "next", "2000"))
    ev = build_evidence(triples, [2.0, 1.0, -3.0], ["Ann"])
    # walks: Ann→m.0x1 (2); Ann→m.0x1→1999 (2 + 1); Ann→…→2000 (2 + 1 - 3)
    reading = read_local(ev)
    assert [(a.text, a.score) for a in reading.ranked] == [("1999", 3.0), ("2000", 0.0)]
    assert reading.answers == ("1999",)
    assert [a.text for a in read_local(ev, unnamed_answers=True).ranked] == ["1999", "m.0x1", "2000"]


def test_retriever_reader_unanchored_candidates_and_no_candidates():
    raw = triple_evidence(TWO_TOPICS[:2], [0.5, 0.7], topics=["Ann"])
    fallback = read_local(raw)
    assert [(a.text, a.score) for a in fallback.ranked] == [("F2", 0.7), ("F1", 0.5)]
    assert fallback.answers == ("F2",)
    never = read_local(raw, unanchored="never")
    assert never.fallback == NO_CANDIDATES and never.ranked == ()
    assert read_local(build_evidence((), None, ["Ann"])).fallback == NO_CANDIDATES
