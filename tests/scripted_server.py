"""A scripted OpenAI-compatible HTTP server for tests and benchmarks (not a language model).

Not a test module and not part of the ``rg`` package: imported as ``tests.scripted_server`` by the tests and
by ``bench/`` (both run from the project root).

:class:`ScriptedServer` serves ``POST /v1/chat/completions`` and ``GET /v1/models`` on
127.0.0.1 (an OS-chosen port) from a background thread of the standard library's
``ThreadingHTTPServer``. It generates nothing: each request is answered by the next step of a
:class:`Script` — a fixed text, an HTTP error status, raw bytes, or the text a test-supplied
callable returns for the request — optionally after a delay. It records every request it
receives and the most requests it ever had in flight, so tests can assert what the real client
sent, how often it retried and how much concurrency reached the wire::

    script = Script([Status(429, retry_after=0.01), Reply("ans: Path 2")])
    with ScriptedServer(script) as srv:
        client = OpenAICompatibleClient(LLMConfig(base_url=srv.base_url, model="m"))
        ...
        assert len(srv.chat_requests) == 2

Steps are consumed in arrival order; when they run out the ``default`` step answers, or, with
no default, an HTTP 400 explaining that the script is exhausted. Every delay ends early when the
server closes, so shutting down never waits for a scripted delay.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Union
from urllib.parse import urlsplit

CHAT_PATH = "/v1/chat/completions"
MODELS_PATH = "/v1/models"


def _check_delay(delay_s: float) -> None:
    if not (isinstance(delay_s, (int, float)) and math.isfinite(delay_s) and delay_s >= 0):
        raise ValueError(f"delay_s must be a finite number >= 0, got {delay_s!r}")


@dataclass(frozen=True)
class Reply:
    """Answer 200 with a chat completion whose message content is ``text``.

    Attributes:
        text: The assistant content.
        prompt_tokens: Reported prompt tokens; None counts whitespace tokens of all messages.
        completion_tokens: Reported completion tokens; None counts whitespace tokens of ``text``.
        include_usage: False omits the ``usage`` block, like servers that do not report it.
        delay_s: Seconds to wait before answering.
    """

    text: str
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    include_usage: bool = True
    delay_s: float = 0.0

    def __post_init__(self) -> None:
        _check_delay(self.delay_s)


@dataclass(frozen=True)
class Status:
    """Answer with an HTTP error status and an OpenAI-style ``{"error": ...}`` body.

    Attributes:
        code: HTTP status, e.g. 429, 500, 503, 400.
        retry_after: Seconds sent in a ``Retry-After`` header (fractions allowed); None sends none.
        message: The error message.
        delay_s: Seconds to wait before answering.
    """

    code: int
    retry_after: float | None = None
    message: str = "scripted error"
    delay_s: float = 0.0

    def __post_init__(self) -> None:
        if not 400 <= self.code <= 599:
            raise ValueError(f"Status.code must be an HTTP error status 400..599, got {self.code}")
        _check_delay(self.delay_s)


@dataclass(frozen=True)
class Raw:
    """Answer with arbitrary bytes (e.g. a malformed body) and a given status and content type."""

    body: str
    status: int = 200
    content_type: str = "application/json"
    delay_s: float = 0.0

    def __post_init__(self) -> None:
        _check_delay(self.delay_s)


@dataclass(frozen=True)
class Respond:
    """Answer with whatever ``fn(request_json)`` returns: a text (as :class:`Reply`) or a step.

    Attributes:
        fn: Called with the parsed request body; returns the reply text or a Reply/Status/Raw.
        delay_s: Seconds to wait before answering (after ``fn`` ran).
    """

    fn: Callable[[dict[str, Any]], Union[str, "Reply", "Status", "Raw"]]
    delay_s: float = 0.0

    def __post_init__(self) -> None:
        _check_delay(self.delay_s)


Step = Union[Reply, Status, Raw, Respond]


@dataclass(frozen=True)
class Script:
    """What the server answers: ``steps`` in order, then ``default`` for every later request.

    Attributes:
        steps: Consumed one per chat request, in arrival order.
        default: Answers once ``steps`` are used up; None answers 400 "script exhausted".
        latency_s: Fixed artificial latency added before every chat answer.
        models: What ``GET /v1/models`` answers: None lists the model; a :class:`Status` answers that
            error (an endpoint down behind its proxy, for preflight probes).
    """

    steps: Sequence[Step] = ()
    default: Step | None = None
    latency_s: float = 0.0
    models: Status | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "steps", tuple(self.steps))
        for step in (*self.steps, *([self.default] if self.default is not None else [])):
            if not isinstance(step, (Reply, Status, Raw, Respond)):
                raise ValueError(f"script steps must be Reply, Status, Raw or Respond, got {type(step).__name__}")
        _check_delay(self.latency_s)
        if self.models is not None and not isinstance(self.models, Status):
            raise ValueError(f"Script.models must be a Status or None, got {type(self.models).__name__}")

    @classmethod
    def always(cls, step: Step, *, latency_s: float = 0.0, models: Status | None = None) -> Script:
        """A script that answers every chat request with ``step``."""
        return cls((), default=step, latency_s=latency_s, models=models)


@dataclass(frozen=True)
class RecordedRequest:
    """One request as the server received it.

    Attributes:
        method: ``GET`` or ``POST``.
        path: URL path without the query.
        headers: Header names (lower case) to values.
        body: Parsed JSON body; None for GET or an unparseable body.
        raw: The body bytes as received.
        received_at: ``time.monotonic()`` when the body had been read.
    """

    method: str
    path: str
    headers: dict[str, str]
    body: dict[str, Any] | None
    raw: bytes
    received_at: float


@dataclass
class _State:
    """Everything the handler threads share, guarded by ``lock``."""

    script: Script
    lock: threading.Lock = field(default_factory=threading.Lock)
    stop: threading.Event = field(default_factory=threading.Event)
    cursor: int = 0
    requests: list[RecordedRequest] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    in_flight: int = 0
    max_in_flight: int = 0


def whitespace_tokens(text: str) -> int:
    """Token count used by the scripted server: whitespace-separated words."""
    return len(text.split())


def _prompt_tokens(body: dict[str, Any]) -> int:
    messages = body.get("messages") or []
    return sum(whitespace_tokens(str(m.get("content", ""))) for m in messages if isinstance(m, dict))


class _HTTPServer(ThreadingHTTPServer):
    """ThreadingHTTPServer carrying the scripted state; handler threads are joined on close."""

    daemon_threads = False
    block_on_close = True
    request_queue_size = 128  # listen backlog: many concurrent clients connect at once without refusals

    def __init__(self, address: tuple[str, int], state: _State, model: str, io_timeout_s: float) -> None:
        self.state = state
        self.model = model
        self.io_timeout_s = io_timeout_s
        super().__init__(address, _Handler)


class _Handler(BaseHTTPRequestHandler):
    """Serves one request from the script; one thread per connection (HTTP/1.0, no keep-alive)."""

    server: _HTTPServer
    protocol_version = "HTTP/1.0"

    def setup(self) -> None:
        self.timeout = self.server.io_timeout_s
        super().setup()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 — signature of the base class
        """Silence the per-request stderr log."""

    def do_GET(self) -> None:  # noqa: N802 — http.server naming
        path = urlsplit(self.path).path.rstrip("/")
        self._record(b"", None)
        models = self.server.state.script.models
        if path == MODELS_PATH and models is not None:
            self._send_error(models.code, models.message)
        elif path == MODELS_PATH:
            model = {"id": self.server.model, "object": "model", "created": 0, "owned_by": "scripted"}
            self._send_json(200, {"object": "list", "data": [model]})
        else:
            self._send_error(404, f"no route GET {path}; this scripted server serves {MODELS_PATH}")

    def do_POST(self) -> None:  # noqa: N802 — http.server naming
        path = urlsplit(self.path).path.rstrip("/")
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length > 0 else b""
        try:
            body = json.loads(raw) if raw else None
        except (UnicodeDecodeError, json.JSONDecodeError):
            body = None
        self._record(raw, body if isinstance(body, dict) else None)
        if path != CHAT_PATH:
            self._send_error(404, f"no route POST {path}; this scripted server serves {CHAT_PATH}")
            return
        if not isinstance(body, dict):
            self._send_error(400, "request body is not a JSON object")
            return
        state = self.server.state
        with state.lock:
            script = state.script
            if state.cursor < len(script.steps):
                step: Step | None = script.steps[state.cursor]
                state.cursor += 1
            else:
                step = script.default
            state.in_flight += 1
            state.max_in_flight = max(state.max_in_flight, state.in_flight)
        try:
            self._answer(step, body, script)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (e.g. its timeout fired during a scripted delay)
        finally:
            with state.lock:
                state.in_flight -= 1

    def _record(self, raw: bytes, body: dict[str, Any] | None) -> None:
        state = self.server.state
        record = RecordedRequest(
            method=self.command,
            path=urlsplit(self.path).path,
            headers={k.lower(): v for k, v in self.headers.items()},
            body=body,
            raw=raw,
            received_at=time.monotonic(),
        )
        with state.lock:
            state.requests.append(record)

    def _answer(self, step: Step | None, body: dict[str, Any], script: Script) -> None:
        state = self.server.state
        if step is None:
            message = f"scripted server: script exhausted after {len(script.steps)} steps"
            self._send_error(400, message + "; give the Script a default step")
            return
        delay = script.latency_s + step.delay_s
        if isinstance(step, Respond):
            try:
                produced = step.fn(body)
            except Exception as err:  # noqa: BLE001 — a test callback's bug becomes a visible 500
                with state.lock:
                    state.errors.append(f"{type(err).__name__}: {err}")
                self._send_error(500, f"scripted callback raised {type(err).__name__}: {err}")
                return
            step = Reply(produced) if isinstance(produced, str) else produced
            if not isinstance(step, (Reply, Status, Raw)):
                self._send_error(500, f"scripted callback returned {type(produced).__name__}, not str/Reply/Status/Raw")
                return
            delay += step.delay_s
        if delay > 0 and state.stop.wait(delay):
            return  # the server is closing: drop the connection instead of finishing the delay
        if isinstance(step, Reply):
            self._send_json(200, self._completion(step, body))
        elif isinstance(step, Status):
            headers = {} if step.retry_after is None else {"Retry-After": f"{step.retry_after:g}"}
            self._send_error(step.code, step.message, headers)
        else:
            self._send_bytes(step.status, step.body.encode("utf-8"), step.content_type, {})

    def _completion(self, step: Reply, body: dict[str, Any]) -> dict[str, Any]:
        state = self.server.state
        with state.lock:
            number = len(state.requests)
        payload: dict[str, Any] = {
            "id": f"chatcmpl-scripted-{number}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": str(body.get("model") or self.server.model),
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": step.text},
                    "finish_reason": "stop",
                    "logprobs": None,
                }
            ],
        }
        if step.include_usage:
            prompt = _prompt_tokens(body) if step.prompt_tokens is None else step.prompt_tokens
            completion = whitespace_tokens(step.text) if step.completion_tokens is None else step.completion_tokens
            payload["usage"] = {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
            }
        return payload

    def _send_error(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        payload = {"error": {"message": message, "type": "scripted_error", "param": None, "code": str(status)}}
        self._send_json(status, payload, headers)

    def _send_json(self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        self._send_bytes(status, json.dumps(payload).encode("utf-8"), "application/json", headers or {})

    def _send_bytes(self, status: int, data: bytes, content_type: str, headers: dict[str, str]) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)


class ScriptedServer:
    """Scripted OpenAI-compatible endpoint on a local port, run in a background thread.

    Args:
        script: A :class:`Script`, or a sequence of steps (no default).
        host: Interface to bind; loopback by default (never expose a test server).
        port: Port to bind; 0 lets the OS choose a free one.
        model: Model id listed by ``GET /v1/models`` and used when a request names none.
        io_timeout_s: Socket timeout of handler threads (bounds a stalled client).
    """

    def __init__(
        self,
        script: Script | Sequence[Step] = Script(),
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        model: str = "scripted",
        io_timeout_s: float = 10.0,
    ) -> None:
        self._state = _State(script=script if isinstance(script, Script) else Script(script))
        self._address = (host, port)
        self._model = model
        self._io_timeout_s = io_timeout_s
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> ScriptedServer:
        """Bind and start serving in a daemon thread; returns self."""
        if self._httpd is not None:
            raise RuntimeError("ScriptedServer is already running")
        self._state.stop.clear()
        self._httpd = _HTTPServer(self._address, self._state, self._model, self._io_timeout_s)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="scripted-llm-server", daemon=True
        )
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving: cut scripted delays short, stop the loop, join handler threads."""
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        self._state.stop.set()
        httpd.shutdown()
        httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=self._io_timeout_s)
            self._thread = None

    def __enter__(self) -> ScriptedServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def port(self) -> int:
        """The bound port (valid while running)."""
        if self._httpd is None:
            raise RuntimeError("ScriptedServer is not running; use `with ScriptedServer(...) as srv:`")
        return int(self._httpd.server_address[1])

    @property
    def base_url(self) -> str:
        """``http://<host>:<port>/v1``, the value for ``LLMConfig.base_url``."""
        if self._httpd is None:
            raise RuntimeError("ScriptedServer is not running; use `with ScriptedServer(...) as srv:`")
        host = self._httpd.server_address[0]
        return f"http://{host}:{self.port}/v1"

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request received so far, in arrival order (a copy)."""
        with self._state.lock:
            return list(self._state.requests)

    @property
    def chat_requests(self) -> list[RecordedRequest]:
        """Received ``POST /v1/chat/completions`` requests, in arrival order."""
        return [r for r in self.requests if r.method == "POST" and r.path.rstrip("/") == CHAT_PATH]

    @property
    def max_in_flight(self) -> int:
        """Most chat requests that were being answered at the same time."""
        with self._state.lock:
            return self._state.max_in_flight

    @property
    def steps_used(self) -> int:
        """How many of the script's steps have been consumed."""
        with self._state.lock:
            return self._state.cursor

    @property
    def errors(self) -> list[str]:
        """Exceptions raised by :class:`Respond` callbacks (each also answered with a 500)."""
        with self._state.lock:
            return list(self._state.errors)

    def reset(self, script: Script | Sequence[Step] | None = None) -> None:
        """Forget recorded requests and counters; optionally load a new script."""
        with self._state.lock:
            if script is not None:
                self._state.script = script if isinstance(script, Script) else Script(script)
            self._state.cursor = 0
            self._state.requests.clear()
            self._state.errors.clear()
            self._state.max_in_flight = self._state.in_flight
