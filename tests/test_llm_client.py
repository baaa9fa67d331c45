"""OpenAICompatibleClient against the scripted server on 127.0.0.1: replies, retries, limits."""

from __future__ import annotations

import asyncio
import pickle
import time

import pytest

from rg.llm.client import Completion, LLMClient, LLMError, OpenAICompatibleClient, complete_sync
from rg.llm.config import LLMConfig
from rg.privacy import EgressGuard
from rg.llm.usage import Usage
from tests.scripted_server import Raw, Reply, Script, ScriptedServer, Status

MESSAGES = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "which path answers it"}]
PROMPT_ID = "echo_topic@v1"


def make_client(srv: ScriptedServer, guard=None, **overrides) -> OpenAICompatibleClient:
    """A client with tiny backoffs so retry tests take milliseconds."""
    settings = {"model": "test-model", "backoff_s": 0.001, "max_backoff_s": 0.01, "timeout_s": 10.0, **overrides}
    return OpenAICompatibleClient(LLMConfig(base_url=srv.base_url, **settings), guard=guard)


def run(client: OpenAICompatibleClient, stage: str = "refine") -> Completion:
    return complete_sync(client, MESSAGES, stage=stage, prompt_id=PROMPT_ID)


def test_reply_text_tokens_and_ledger(monkeypatch):
    monkeypatch.setenv("RG_TEST_LLM_KEY", "sk-from-env")
    with ScriptedServer([Reply("ans: Path 2"), Reply("ok", prompt_tokens=40, completion_tokens=3)]) as srv:
        client = make_client(srv, side="brain", api_key_env="RG_TEST_LLM_KEY", max_tokens=64, temperature=0.5,
                             guard=EgressGuard({"entity_name": ["Zed Quill"]}))
        assert isinstance(client, LLMClient)
        done = run(client)
        assert (done.text, done.prompt_tokens, done.completion_tokens) == ("ans: Path 2", 6, 3)
        assert (done.retries, done.model, done.prompt_id) == (0, "test-model", PROMPT_ID)
        run(client, stage="read")
        sent = srv.chat_requests[0]
        assert sent.body == {"model": "test-model", "messages": MESSAGES, "temperature": 0.5, "max_tokens": 64}
        assert sent.headers["authorization"] == "Bearer sk-from-env"
    refine = client.ledger.get("refine", "brain")
    assert (refine.prompt_tokens, refine.completion_tokens, refine.total_tokens, refine.calls) == (6, 3, 9, 1)
    assert client.ledger.get("read", "brain").total_tokens == 43
    assert client.ledger.get("refine", "hand") == Usage()
    assert client.ledger.total().calls == 2


def test_missing_usage_counts_the_call_with_zero_tokens():
    with ScriptedServer([Reply("fine", include_usage=False)]) as srv:
        client = make_client(srv, max_tokens=None)
        assert run(client).prompt_tokens == 0
        assert "max_tokens" not in srv.chat_requests[0].body
    assert client.ledger.total() == Usage(calls=1, latency_s=client.ledger.total().latency_s)


def test_rate_limit_then_success_honours_retry_after():
    with ScriptedServer([Status(429, retry_after=0.2), Reply("ok")]) as srv:
        client = make_client(srv, max_backoff_s=1.0)
        start = time.monotonic()
        done = run(client)
        assert time.monotonic() - start >= 0.2
        assert done.retries == 1 and len(srv.chat_requests) == 2
    usage = client.ledger.get("refine", "hand")
    assert (usage.calls, usage.retries, usage.failures) == (1, 1, 0)


def test_retry_after_is_capped_by_max_backoff():
    with ScriptedServer([Status(503, retry_after=100), Reply("ok")]) as srv:
        start = time.monotonic()
        assert run(make_client(srv, max_backoff_s=0.05)).retries == 1
        assert time.monotonic() - start < 30  # far below the 100 s the server asked for


@pytest.mark.parametrize("code", [500, 503])
def test_server_errors_exhaust_bounded_retries(code):
    with ScriptedServer(Script.always(Status(code))) as srv:
        client = make_client(srv, max_retries=2)
        with pytest.raises(LLMError) as info:
            run(client)
        assert info.value.reason == "server_error" and info.value.status_code == code
        assert info.value.attempts == 3 and len(srv.chat_requests) == 3
    usage = client.ledger.get("refine", "hand")
    assert (usage.calls, usage.retries, usage.failures, usage.total_tokens) == (1, 2, 1, 0)


@pytest.mark.parametrize("code", [400, 401, 404, 422])
def test_client_errors_fail_at_once(code):
    with ScriptedServer(Script.always(Status(code))) as srv:
        client = make_client(srv, max_retries=3)
        with pytest.raises(LLMError) as info:
            run(client)
        assert info.value.reason == "client_error" and info.value.attempts == 1
        assert len(srv.chat_requests) == 1
    assert client.ledger.total().failures == 1


def test_timeouts_are_retried_then_fail():
    # the reply would arrive after 30 s; the error (not the text) shows each attempt timed out
    with ScriptedServer(Script.always(Reply("too late", delay_s=30.0))) as srv:
        client = make_client(srv, timeout_s=0.5, max_retries=1)
        with pytest.raises(LLMError) as info:
            run(client)
        # counted at the client: on a loaded machine an attempt can time out before the
        # server has finished reading it, so the server may have recorded fewer requests
        assert info.value.reason == "timeout" and info.value.attempts == 2
        assert client.ledger.get("refine", "hand").retries == 1
        assert 1 <= len(srv.chat_requests) <= 2


def test_connection_errors_are_retried_then_fail():
    with ScriptedServer() as srv:
        client = make_client(srv, max_retries=1)
    with pytest.raises(LLMError) as info:
        run(client)  # the server is gone: nothing listens on its port now
    assert info.value.reason == "connection" and info.value.attempts == 2


@pytest.mark.parametrize(
    ("step", "reason"),
    [
        (Reply("   ", prompt_tokens=4, completion_tokens=1), "empty_reply"),
        (Raw("<html>gateway</html>", content_type="text/html"), "bad_response"),
        (Raw("{broken json"), "bad_response"),
    ],
)
def test_unusable_replies_fail_without_retry(step, reason):
    with ScriptedServer(Script.always(step)) as srv:
        client = make_client(srv)
        with pytest.raises(LLMError) as info:
            run(client)
        assert info.value.reason == reason and len(srv.chat_requests) == 1
    expected_tokens = 5 if reason == "empty_reply" else 0
    assert client.ledger.total().total_tokens == expected_tokens


@pytest.mark.parametrize("limit", [2, 6])
def test_in_flight_requests_never_exceed_max_concurrency(limit):
    async def six_calls(client: OpenAICompatibleClient) -> list[Completion]:
        async with client:
            calls = (client.complete(MESSAGES, stage="refine", prompt_id=PROMPT_ID) for _ in range(6))
            return await asyncio.gather(*calls)

    with ScriptedServer(Script.always(Reply("ok", delay_s=0.2))) as srv:
        client = make_client(srv, max_concurrency=limit)
        start = time.monotonic()
        results = asyncio.run(six_calls(client))
        elapsed = time.monotonic() - start
        assert [r.text for r in results] == ["ok"] * 6
        assert srv.max_in_flight == limit
        assert elapsed >= 0.2 * (6 // limit) - 0.02
    assert client.ledger.total().calls == 6


def test_client_pickles_without_its_key_and_works_after(monkeypatch):
    monkeypatch.setenv("RG_TEST_LLM_KEY", "sk-do-not-ship")
    with ScriptedServer(Script.always(Reply("ok"))) as srv:
        client = make_client(srv, api_key_env="RG_TEST_LLM_KEY")
        run(client)
        blob = pickle.dumps(client)
        assert b"sk-do-not-ship" not in blob
        clone = pickle.loads(blob)
        assert run(clone).text == "ok"
        assert srv.chat_requests[-1].headers["authorization"] == "Bearer sk-do-not-ship"
        assert clone.ledger.total().calls == 2  # the ledger travels with the client


def test_guard_twins_share_one_connection_pool_and_keep_their_own_guard_and_ledger():
    """A twin per question (``with_guard``) reuses the first client's SDK client: building one costs ~20 ms of TLS
    set-up, which every Brain call paid when ``copy.copy`` went through ``__getstate__`` and dropped the pool."""
    async def two_questions(first: OpenAICompatibleClient) -> tuple[object, object, OpenAICompatibleClient]:
        await first.complete(MESSAGES, stage="refine", prompt_id=PROMPT_ID)
        twin = first.with_guard(EgressGuard({"entity_name": ["Zed Quill"]}))
        twin.ledger = type(first.ledger)()
        await twin.complete(MESSAGES, stage="refine", prompt_id=PROMPT_ID)
        with pytest.raises(LLMError, match="egress_refused|raw"):
            await twin.complete([{"role": "user", "content": "who is Zed Quill"}], stage="refine", prompt_id=PROMPT_ID)
        assert first.with_ledger(type(first.ledger)())._binding().sdk is first._binding().sdk
        return first._binding().sdk, twin._binding().sdk, twin

    with ScriptedServer(Script.always(Reply("ok"))) as srv:
        first = make_client(srv, side="brain", guard=EgressGuard({"entity_name": ["Ann Other"]}))
        sdk, twin_sdk, twin = asyncio.run(two_questions(first))
        assert twin_sdk is sdk
        assert len(srv.chat_requests) == 2  # the refused request never left
    assert first.ledger.total().calls == 1 and twin.ledger.total().calls == 1  # each books its own; a refusal is no call
    assert first.guard is not twin.guard


def test_sync_helper_refuses_a_running_loop_and_bad_messages():
    with ScriptedServer(Script.always(Reply("ok"))) as srv:
        client = make_client(srv)

        async def inside() -> None:
            complete_sync(client, MESSAGES, stage="refine", prompt_id=PROMPT_ID)

        with pytest.raises(RuntimeError, match="inside a running event loop"):
            asyncio.run(inside())
        with pytest.raises(ValueError, match=r"messages\[0\] must be a dict"):
            complete_sync(client, [{"role": "user"}], stage="refine", prompt_id=PROMPT_ID)
        assert srv.chat_requests == [] and client.ledger.total() == Usage()
