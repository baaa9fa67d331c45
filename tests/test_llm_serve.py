"""The local OpenAI-compatible server on Ray Serve with the real SmolLM2-135M, and the LLM paths of
rg (the client, refinement's path selector, the LLM reader) running against it."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import urllib.error
import urllib.request
from email.message import Message

import pytest

from rg.data.sample import Sample
from rg.evidence import EvidenceConfig, build_evidence
from rg.llm.client import OpenAICompatibleClient
from rg.llm.config import LLMConfig
from rg.models import REGISTRY, LocalChatModel, ModelNotAvailableError
from rg.reasoning import NO_ANSWER_LINE, LLMReader, LLMReaderConfig
from rg.supervision.llm_selector import LLMPathSelector, LLMSelectorConfig
from rg.supervision.refine import refine_sample
from rg.run.ports import free_port

SERVER = {"base": "smollm2-135m", "max_batch_size": 2, "max_ongoing_requests": 2, "max_queued_requests": 2,
          "retry_after_s": 2, "max_tokens_limit": 64, "default_max_tokens": 16}


@pytest.fixture(scope="module")
def server(ray_local):
    """The app on a free loopback port; yields its /v1 base URL. Shut down after the module."""
    try:
        REGISTRY["smollm2-135m"].locate()
    except ModelNotAvailableError as err:
        pytest.skip(str(err))
    from ray import serve

    from serve.llm_server import build_app

    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    serve.run(build_app(SERVER), name="llm", route_prefix="/")
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        serve.shutdown()


@pytest.fixture(scope="module")
def tokenizer_model(server) -> LocalChatModel:
    """The same model in the test process, to count prompt tokens independently of the server."""
    return LocalChatModel.load("smollm2-135m")


def post(url: str, body: dict) -> tuple[int, Message, dict]:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status, response.headers, json.loads(response.read())
    except urllib.error.HTTPError as err:
        text = err.read().decode()
        return err.code, err.headers, json.loads(text) if text.startswith("{") else {"text": text}


def chat(text: str, **extra) -> dict:
    return {"messages": [{"role": "user", "content": text}], "temperature": 0, **extra}


def llm(server: str, **kwargs) -> LLMConfig:
    return LLMConfig(base_url=server, model="smollm2-135m", max_retries=1, backoff_s=0.01, timeout_s=120,
                     max_tokens=24, **kwargs)


def test_models_and_one_completion_with_usage(server, tokenizer_model):
    with urllib.request.urlopen(f"{server}/models") as response:
        listing = json.loads(response.read())
    assert [m["id"] for m in listing["data"]] == ["smollm2-135m"]

    body = chat("What is the capital of France?", max_tokens=12)
    status, _, reply = post(f"{server}/chat/completions", body)
    assert status == 200 and reply["object"] == "chat.completion" and reply["model"] == "smollm2-135m"
    [choice] = reply["choices"]
    assert choice["message"]["role"] == "assistant" and choice["message"]["content"].strip()
    usage = reply["usage"]
    assert usage["prompt_tokens"] == len(tokenizer_model.prompt_ids(body["messages"]))
    assert 0 < usage["completion_tokens"] <= 12
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    [alone] = tokenizer_model.generate([tokenizer_model_request(body)])
    assert choice["message"]["content"] == alone.text  # greedy: the server adds nothing of its own


def tokenizer_model_request(body: dict):
    from rg.models import ChatRequest

    return ChatRequest(messages=body["messages"], max_tokens=body["max_tokens"])


@pytest.mark.parametrize(
    "extra, field",
    [
        ({"top_p": 0.5}, "top_p"),
        ({"n": 2}, "n"),
        ({"stream": True}, "stream"),
        ({"temperature": 3}, "temperature"),
        ({"max_tokens": 0}, "max_tokens"),
    ],
)
def test_bad_input_is_422_naming_the_field(server, extra, field):
    status, _, reply = post(f"{server}/chat/completions", chat("hi", **extra))
    assert status == 422 and reply["detail"][0]["loc"] == ["body", field]


def test_limits_and_unknown_model(server):
    status, _, reply = post(f"{server}/chat/completions", chat("hi", max_tokens=65))
    assert status == 422 and "exceeds this server's limit of 64" in reply["detail"]
    status, _, reply = post(f"{server}/chat/completions", chat("word " * 9000, max_tokens=8))
    assert status == 422 and "Fix: shorten `messages`" in reply["detail"]
    status, _, reply = post(f"{server}/chat/completions", {"messages": [], "max_tokens": 4})
    assert status == 422 and reply["detail"][0]["loc"] == ["body", "messages"]
    status, _, reply = post(f"{server}/chat/completions", chat("hi", model="gpt-4o"))
    assert status == 404 and reply["error"]["param"] == "model" and "smollm2-135m" in reply["error"]["message"]


@pytest.mark.mission  # 21 s: backpressure, no request lost
def test_a_full_queue_answers_503_with_retry_after(server):
    # 2 requests run and 2 wait on the one replica; the rest of 10 at once are turned away.
    bodies = [chat(f"Write a long story about the number {i}.", max_tokens=48) for i in range(10)]
    with concurrent.futures.ThreadPoolExecutor(len(bodies)) as pool:
        results = list(pool.map(lambda b: post(f"{server}/chat/completions", b), bodies))
    statuses = sorted(status for status, _, _ in results)
    assert set(statuses) == {200, 503} and statuses.count(200) >= 2, statuses
    rejected = [headers for status, headers, _ in results if status == 503]
    assert all(h.get("Retry-After") == "2" for h in rejected)


def test_client_ledger_matches_the_server_usage(server, tokenizer_model):
    messages = [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "Who wrote Hamlet?"}]
    client = OpenAICompatibleClient(llm(server))

    async def go():
        try:
            return await asyncio.gather(*(client.complete(messages, stage="probe", prompt_id="probe@v1")
                                          for _ in range(3)))
        finally:
            await client.aclose()

    done = asyncio.run(go())
    assert len({d.text for d in done}) == 1  # temperature 0: batched or not, the same text
    prompt = len(tokenizer_model.prompt_ids(messages))
    assert all(d.prompt_tokens == prompt and 0 < d.completion_tokens <= 24 for d in done)
    ledger = client.ledger.get("probe", "hand")
    assert (ledger.calls, ledger.failures) == (3, 0)
    assert ledger.prompt_tokens == 3 * prompt
    assert ledger.completion_tokens == sum(d.completion_tokens for d in done)


TRIPLES = (
    ("Inception", "directed_by", "Christopher Nolan"),
    ("Inception", "written_by", "Christopher Nolan"),
    ("Inception", "release_year", "2010"),
    ("Interstellar", "directed_by", "Christopher Nolan"),
)


def test_refinement_path_selector_on_the_real_model(server):
    sample = Sample(id="q1", question="who directed Inception", answers=("Christopher Nolan",),
                    q_entities=("Inception",), a_entities=("Christopher Nolan",), triples=TRIPLES)
    client = OpenAICompatibleClient(llm(server))
    selector = LLMPathSelector(LLMSelectorConfig(llm=llm(server)), client=client)

    async def go():
        try:
            return await refine_sample(sample, selector)
        finally:
            await client.aclose()

    label = asyncio.run(go())
    # A 135M model may or may not follow the format: either way the label is complete and says so.
    if label.source == "refined":
        assert label.fallback_reason is None and set(label.positive_triples) <= {0, 1}
    else:
        assert label.fallback_reason in {"unparseable", "out_of_range"} and label.positive_triples == (0, 1)
    ledger = client.ledger.get("refine", "hand")
    assert (ledger.calls, ledger.failures) == (1, 0)
    assert (label.prompt_tokens, label.completion_tokens) == (ledger.prompt_tokens, ledger.completion_tokens)
    assert label.prompt_tokens > 100 and 0 < label.completion_tokens <= 24


def test_llm_reader_on_the_real_model(server, tokenizer_model):
    evidence = build_evidence(TRIPLES, (0.9, 0.2, 0.1, 0.3), ["Inception"], EvidenceConfig(max_length=1))
    client = OpenAICompatibleClient(llm(server))
    reader = LLMReader(LLMReaderConfig(llm=llm(server)), client=client)
    question = "who directed Inception"

    async def go():
        try:
            return await reader.read(question, evidence)
        finally:
            await client.aclose()

    reading = asyncio.run(go())
    assert reading.reader == "llm:smollm2-135m" and reading.prompt_id == "read_answers@v1"
    assert reading.ok or reading.fallback == NO_ANSWER_LINE
    assert reading.usage.calls in (1, 2) and reading.usage.failures == 0
    ledger = client.ledger.get("read", "hand")
    assert (ledger.calls, ledger.prompt_tokens, ledger.completion_tokens) == (
        reading.usage.calls, reading.usage.prompt_tokens, reading.usage.completion_tokens)
    first_turn = len(tokenizer_model.prompt_ids(reader.messages(question, evidence)))
    assert (reading.usage.prompt_tokens == first_turn) == (reading.usage.calls == 1)
