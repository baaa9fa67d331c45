"""The scripted OpenAI-compatible server, spoken to with plain urllib (no client code)."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request

import pytest

from tests.scripted_server import Raw, Reply, Respond, Script, ScriptedServer, Status

BODY = {"model": "m", "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "a b c"}]}


def call(srv: ScriptedServer, body: object = BODY, path: str = "/chat/completions", method: str = "POST"):
    """(status, headers, parsed JSON or text) of one request to the server."""
    data = json.dumps(body).encode() if method == "POST" else None
    request = urllib.request.Request(srv.base_url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json", "Authorization": "Bearer k"})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            status, headers, raw = response.status, response.headers, response.read()
    except urllib.error.HTTPError as err:
        status, headers, raw = err.code, err.headers, err.read()
    try:
        return status, headers, json.loads(raw)
    except json.JSONDecodeError:
        return status, headers, raw.decode()


def test_reply_is_a_chat_completion_with_whitespace_usage():
    steps = [Reply("ans: Path 1"), Reply("ok", prompt_tokens=100, completion_tokens=7), Reply("x", include_usage=False)]
    with ScriptedServer(steps) as srv:
        assert srv.base_url.startswith("http://127.0.0.1:") and srv.base_url.endswith("/v1")
        status, _, body = call(srv)
        assert status == 200 and body["object"] == "chat.completion" and body["model"] == "m"
        assert body["choices"][0]["message"] == {"role": "assistant", "content": "ans: Path 1"}
        assert body["usage"] == {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}
        assert call(srv)[2]["usage"] == {"prompt_tokens": 100, "completion_tokens": 7, "total_tokens": 107}
        assert "usage" not in call(srv)[2]


def test_status_steps_and_retry_after():
    with ScriptedServer([Status(429, retry_after=0.25, message="slow down"), Status(503)]) as srv:
        status, headers, body = call(srv)
        assert status == 429 and headers["Retry-After"] == "0.25"
        assert body["error"]["message"] == "slow down"
        assert call(srv)[0] == 503


def test_default_step_then_exhaustion_message():
    with ScriptedServer(Script([Reply("first")], default=Reply("again"))) as srv:
        texts = [call(srv)[2]["choices"][0]["message"]["content"] for _ in range(3)]
        assert texts == ["first", "again", "again"] and srv.steps_used == 1
    with ScriptedServer([Reply("only")]) as srv:
        call(srv)
        status, _, body = call(srv)
        assert status == 400 and "script exhausted after 1 steps" in body["error"]["message"]


def test_callable_steps_see_the_request():
    def answer(request: dict) -> str | Status:
        question = request["messages"][-1]["content"]
        return Status(400) if question == "bad" else f"echo {question}"

    with ScriptedServer(Script.always(Respond(answer))) as srv:
        assert call(srv)[2]["choices"][0]["message"]["content"] == "echo a b c"
        bad = {**BODY, "messages": [{"role": "user", "content": "bad"}]}
        assert call(srv, bad)[0] == 400


def test_callable_errors_become_visible_500s():
    def broken(request: dict) -> str:
        raise KeyError("no such field")

    with ScriptedServer(Script.always(Respond(broken))) as srv:
        status, _, body = call(srv)
        assert status == 500 and "KeyError" in body["error"]["message"]
        assert srv.errors == ["KeyError: 'no such field'"]


def test_records_requests_models_and_unknown_routes():
    with ScriptedServer(Script.always(Raw("not json", content_type="text/plain")), model="tiny") as srv:
        status, headers, text = call(srv)
        assert (status, headers["Content-Type"], text) == (200, "text/plain", "not json")
        call(srv)
        assert call(srv, path="/models", method="GET")[2]["data"][0]["id"] == "tiny"
        assert call(srv, path="/embeddings")[0] == 404
        chat = srv.chat_requests
        assert len(chat) == 2 and len(srv.requests) == 4
        assert chat[0].body == BODY and chat[0].headers["authorization"] == "Bearer k"
        srv.reset()
        assert srv.requests == [] and srv.steps_used == 0


def test_latency_and_max_in_flight():
    with ScriptedServer(Script.always(Reply("ok"), latency_s=0.15)) as srv:
        threads = [threading.Thread(target=call, args=(srv,)) for _ in range(3)]
        start = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.monotonic() - start
        assert elapsed >= 0.15
        assert srv.max_in_flight == 3


def test_close_cuts_pending_delays_short():
    srv = ScriptedServer(Script.always(Reply("late", delay_s=30))).start()
    results: list[object] = []
    worker = threading.Thread(target=_swallow, args=(srv, results))
    worker.start()
    while not srv.chat_requests:
        time.sleep(0.01)
    start = time.monotonic()
    srv.close()
    worker.join(timeout=5)
    assert time.monotonic() - start < 20 and not worker.is_alive()  # the scripted delay was 30 s
    with pytest.raises(RuntimeError, match="not running"):
        srv.base_url


def _swallow(srv: ScriptedServer, results: list[object]) -> None:
    """Call the server, keeping the connection error that a closing server causes."""
    try:
        results.append(call(srv))
    except (OSError, urllib.error.URLError) as err:
        results.append(err)


@pytest.mark.parametrize(
    ("make", "pattern"),
    [
        (lambda: Reply("x", delay_s=-1), "delay_s must be"),
        (lambda: Status(200), "400..599"),
        (lambda: Script(["text"]), "must be Reply, Status, Raw or Respond"),  # type: ignore[list-item]
    ],
)
def test_bad_steps_fail_early(make, pattern):
    with pytest.raises(ValueError, match=pattern):
        make()
