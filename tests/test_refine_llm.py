"""LLM path selection through the real client against a scripted OpenAI-compatible server."""

from __future__ import annotations

import asyncio
import re
from collections import Counter

import pytest

from rg.data.sample import Sample
from rg.llm.client import OpenAICompatibleClient
from rg.llm.config import LLMConfig
from rg.supervision.llm_selector import (
    OUT_OF_RANGE,
    SELECT_PATHS,
    UNPARSEABLE,
    LLMPathSelector,
    LLMSelectorConfig,
    parse_selection,
)
from rg.supervision.refine import refine_sample
from tests.scripted_server import Reply, Respond, Script, ScriptedServer, Status

TRIPLES = (
    ("Film A", "directed_by", "Ann"),
    ("Film A", "written_by", "Ann"),
    ("Film A", "release_year", "1999"),
    ("Film B", "directed_by", "Ann"),
)


def sample(tag: str) -> Sample:
    return Sample(id=tag, question=f"{tag}: who directed Film A", answers=("Ann",), q_entities=("Film A",),
                  a_entities=("Ann",), triples=TRIPLES)


def task_section(body: dict) -> str:
    return body["messages"][-1]["content"].split("Task:", 1)[1]


def directed_path_number(body: dict) -> int:
    """The number the prompt gave the chain Film A → [directed_by] → Ann (not the example's)."""
    match = re.search(r"Path (\d+): Film A → \[directed_by\] → Ann\b", task_section(body))
    assert match, task_section(body)
    return int(match.group(1))


def test_parse_selection():
    assert parse_selection("ans: Path 3\nans: path 1 (the director)\nANS:Path 3", 3) == (0, 2)
    assert parse_selection("Path 1 and Path 2", 3) == UNPARSEABLE
    assert parse_selection("ans: Path 0", 3) == OUT_OF_RANGE
    assert parse_selection("ans: Path 4", 3) == OUT_OF_RANGE


def test_prompt_lists_numbered_paths_with_the_worked_example():
    selector = LLMPathSelector(LLMSelectorConfig(llm=LLMConfig(base_url="http://127.0.0.1:1/v1", model="m")))
    from rg.supervision.refine import prepare_question

    prepared = prepare_question(sample("x"))
    user = selector.messages(sample("x"), prepared.pool)[1]["content"]
    assert "Example:" in user and "ans: Path 1" in user
    assert "Question: x: who directed Film A\nAnswers: Ann\nPaths:\nPath 1: " in user
    assert user.count("\nPath ") == len(prepared.pool) + 4  # the example lists four paths


def test_refinement_with_scripted_replies_and_failures():
    attempts: Counter = Counter()

    def reply(body: dict):
        tag = task_section(body).split("Question: ", 1)[1].split(":", 1)[0]
        attempts[tag] += 1
        if tag == "ok":
            return f"ans: Path {directed_path_number(body)}"
        if tag == "malformed":
            return "The first one looks right to me."
        if tag == "range":
            return "ans: Path 99"
        if tag == "ratelimit":
            return Status(429, retry_after=0.01) if attempts[tag] == 1 else f"ans: Path {directed_path_number(body)}"
        if tag == "broken":
            return Status(500)
        return Reply("ans: Path 1", delay_s=2.0)  # "slow": longer than the client timeout

    with ScriptedServer(Script.always(Respond(reply))) as srv:
        llm = LLMConfig(base_url=srv.base_url, model="scripted", max_retries=2, backoff_s=0.001,
                        max_backoff_s=0.01, timeout_s=0.5, max_concurrency=8)
        client = OpenAICompatibleClient(llm)
        selector = LLMPathSelector(LLMSelectorConfig(llm=llm), client=client)
        tags = ["ok", "malformed", "range", "ratelimit", "broken", "slow"]

        async def run():
            return await asyncio.gather(*(refine_sample(sample(t), selector) for t in tags))

        labels = dict(zip(tags, asyncio.run(run())))

    assert labels["ok"].source == "refined" and labels["ok"].positive_triples == (0,)
    assert labels["ok"].relation_paths == (("directed_by",),)
    assert labels["ok"].prompt_id == SELECT_PATHS.full_id == "select_paths@v1"
    assert labels["ok"].selector == "llm:scripted"
    assert labels["ratelimit"].source == "refined" and labels["ratelimit"].positive_triples == (0,)
    expected_fallback = {"malformed": "unparseable", "range": "out_of_range", "broken": "llm_server_error",
                         "slow": "llm_timeout"}
    for tag, reason in expected_fallback.items():
        assert labels[tag].source == "weak" and labels[tag].fallback_reason == reason
        assert labels[tag].positive_triples == (0, 1)  # both parallel shortest paths Film A → Ann
    slow = attempts.pop("slow")  # an attempt can time out before the server has read it
    assert dict(attempts) == {"ok": 1, "malformed": 1, "range": 1, "ratelimit": 2, "broken": 3} and 1 <= slow <= 3

    usage = client.ledger.get("refine", "hand")
    assert (usage.calls, usage.retries, usage.failures) == (6, 1 + 2 + 2, 2)
    assert usage.prompt_tokens == sum(x.prompt_tokens for x in labels.values()) > 0
    assert usage.completion_tokens == sum(x.completion_tokens for x in labels.values()) > 0
    assert labels["broken"].prompt_tokens == 0 and labels["malformed"].prompt_tokens > 0


def test_empty_pool_never_calls_the_endpoint():
    lonely = Sample(id="e", question="?", answers=("Z",), q_entities=("Nobody",), a_entities=(), triples=())
    with ScriptedServer(Script()) as srv:
        selector = LLMPathSelector(LLMSelectorConfig(llm=LLMConfig(base_url=srv.base_url, model="m")))
        label = asyncio.run(refine_sample(lonely, selector))
        assert srv.chat_requests == []
    assert label.source == "weak" and label.fallback_reason == "empty_pool" and label.positive_triples == ()


@pytest.mark.parametrize("bad", [{"selector": "llm"}])
def test_refine_config_requires_llm_section(bad):
    from rg.config import ConfigError, validate_config
    from rg.supervision.job import RefineConfig

    with pytest.raises(ConfigError, match="no `llm:` section"):
        validate_config({"input": "x", "output_dir": "o", **bad}, RefineConfig)
