"""LLM clients: the :class:`LLMClient` protocol and an OpenAI-compatible implementation.

Every task an LLM does in rg (path selection, reading, question analysis, verification) talks
to an :class:`LLMClient`: one ``complete(messages, stage=..., prompt_id=...)`` coroutine that
returns a :class:`Completion` and books its cost in ``client.ledger``.

:class:`OpenAICompatibleClient` calls any ``/v1/chat/completions`` endpoint (OpenAI, vLLM,
Ollama, Ray Serve LLM) through ``openai.AsyncOpenAI``. The SDK's own retries are switched off;
this client retries only HTTP 429, 5xx, timeouts and connection errors, at most
``max_retries`` times, sleeping ``uniform(0, min(max_backoff_s, backoff_s * 2**k))`` before
retry ``k`` ("full jitter") or the server's ``Retry-After`` if that is longer. Any other 4xx
fails at once. A semaphore bounds the HTTP requests in flight. The SDK client is created lazily
inside the running event loop, so the object can be built in a Ray actor and used there::

    client = OpenAICompatibleClient(LLMConfig(base_url=url, model="m", side="brain"))
    done = await client.complete(template.render(question=q), stage="refine", prompt_id=template.full_id)
    done.text, client.ledger.get("refine", "brain").total_tokens
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import logging
import random
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

from rg.llm.config import LLMConfig
from rg.llm.journal import UsageJournal
from rg.llm.usage import Usage, UsageLedger

if TYPE_CHECKING:  # the SDK is imported where a client first talks to its endpoint: most processes that import
    import openai  # rg.llm (every reader, the dual tower) never do, and the SDK's import costs ~0.6 s of each

logger = logging.getLogger(__name__)

ErrorReason = Literal[
    "rate_limited", "server_error", "timeout", "connection", "client_error", "empty_reply", "bad_response",
    "egress_refused",
]
"""Why a call failed. The first four are retried (bounded); the rest fail at once. ``egress_refused``:
the egress guard found a raw string in a Brain-bound request, and nothing was sent."""

RETRYABLE: frozenset[str] = frozenset({"rate_limited", "server_error", "timeout", "connection"})


class LLMError(RuntimeError):
    """A call failed for good (after its retries, or at once for a non-retryable reason).

    Attributes:
        reason: One of :data:`ErrorReason`.
        attempts: HTTP attempts made (``retries + 1``).
        status_code: HTTP status of the last attempt, when there was a response.
        stage: Stage the call was booked to.
        prompt_id: Prompt id of the call.
    """

    def __init__(
        self,
        reason: ErrorReason,
        message: str,
        *,
        attempts: int,
        status_code: int | None = None,
        stage: str = "",
        prompt_id: str = "",
    ) -> None:
        super().__init__(f"{reason}: {message} (attempts={attempts}, stage={stage!r}, prompt_id={prompt_id!r})")
        self.reason = reason
        self.attempts = attempts
        self.status_code = status_code
        self.stage = stage
        self.prompt_id = prompt_id


@dataclass(frozen=True)
class Completion:
    """One successful chat completion.

    Attributes:
        text: The assistant message content.
        prompt_tokens: Prompt tokens reported by the server (0 if it reported none).
        completion_tokens: Completion tokens reported by the server.
        latency_s: Wall-clock seconds of the whole call: waiting for a slot, attempts, backoff.
        retries: HTTP attempts beyond the first.
        model: Model name the server reported (the configured one if it reported none).
        prompt_id: The prompt template's ``full_id`` passed by the caller, stored with labels.
    """

    text: str
    prompt_tokens: int
    completion_tokens: int
    latency_s: float
    retries: int
    model: str
    prompt_id: str


@runtime_checkable
class LLMClient(Protocol):
    """What rg needs from an LLM: one chat completion at a time, with its cost booked."""

    ledger: UsageLedger

    async def complete(self, messages: list[dict[str, str]], *, stage: str, prompt_id: str) -> Completion:
        """Complete ``messages``; book the call under ``stage``; raise :class:`LLMError` on failure."""
        ...


@runtime_checkable
class EgressCheck(Protocol):
    """The check a Brain-side client runs on every request before it is sent (rg.privacy's guard).

    ``check_messages`` raises an exception with a ``category`` attribute when the request holds a
    raw string; it never names the string.
    """

    def check_messages(self, messages: list[dict[str, str]]) -> None: ...

    def record(self, messages: list[dict[str, str]], *, stage: str, attempts: int, prompt_tokens: int = 0,
               completion_tokens: int = 0, refused: str | None = None) -> None:
        """Book what left the machine (the exposure ledger): a refused call, or one sent in ``attempts`` requests."""
        ...


@dataclass(frozen=True)
class _Reply:
    """One successful attempt: the text, the reported model and the reported tokens."""

    text: str
    model: str
    usage: Usage


@dataclass(frozen=True)
class _Failure:
    """One failed attempt, classified."""

    reason: ErrorReason
    message: str
    status_code: int | None = None
    retry_after_s: float | None = None
    usage: Usage = Usage()


@dataclass(frozen=True)
class _LoopBinding:
    """The SDK client and the in-flight semaphore created for one event loop."""

    loop: asyncio.AbstractEventLoop
    sdk: openai.AsyncOpenAI
    slots: asyncio.Semaphore


class _Pool:
    """The binding a client and its :meth:`OpenAICompatibleClient.with_guard` twins share."""

    def __init__(self) -> None:
        self.bound: _LoopBinding | None = None


class OpenAICompatibleClient:
    """:class:`LLMClient` over an OpenAI-compatible ``/chat/completions`` endpoint.

    Args:
        config: Endpoint, model and calling policy.
        ledger: Ledger to book calls in (a new one by default).
        rng: Source of backoff jitter (seed it for reproducible sleeps).
        journal: Also append every booked call to this usage journal, as it completes
            (:mod:`rg.llm.journal`), so that killed runs' calls are still counted.
        guard: The egress check every request passes before it is sent; required when
            ``config.side`` is ``brain`` (a refused request fails with ``egress_refused``).

    Raises:
        MissingAPIKeyError: If no key is configured and the endpoint is not on loopback.
        ValueError: For a ``side: brain`` config without a guard.
    """

    def __init__(
        self,
        config: LLMConfig,
        *,
        ledger: UsageLedger | None = None,
        rng: random.Random | None = None,
        journal: UsageJournal | None = None,
        guard: EgressCheck | None = None,
    ):
        if config.side == "brain" and guard is None:
            raise ValueError(
                f"{config.base_url} is a side: brain endpoint, and a Brain-side client needs an egress guard. "
                "Fix: build it with rg.privacy.brain_client(config, session), or set `side: hand` for a local model"
            )
        self.config = config
        self.guard = guard
        self.ledger = ledger if ledger is not None else UsageLedger()
        self.journal = journal
        self._rng = rng if rng is not None else random.Random()
        self._api_key = config.resolve_api_key()
        self._pool = _Pool()

    def with_guard(self, guard: EgressCheck) -> "OpenAICompatibleClient":
        """This client with another egress guard (e.g. the next question's session); it shares
        the connection pool, the in-flight limit and the ledger."""
        twin = self._twin()
        twin.guard = guard
        return twin

    def with_ledger(self, ledger: UsageLedger) -> "OpenAICompatibleClient":
        """This client booking its calls in ``ledger`` (e.g. one question's); it shares the connection pool,
        the in-flight limit, the guard and the journal."""
        twin = self._twin()
        twin.ledger = ledger
        return twin

    def _twin(self) -> "OpenAICompatibleClient":
        twin = object.__new__(type(self))  # not copy.copy: it goes through __getstate__, which drops the pool
        twin.__dict__.update(self.__dict__)
        return twin

    def __repr__(self) -> str:
        cfg = self.config
        return f"OpenAICompatibleClient(base_url={cfg.base_url!r}, model={cfg.model!r}, side={cfg.side!r})"

    def __getstate__(self) -> dict[str, Any]:
        # A pickled client carries neither the live connection pool nor the resolved key; the
        # key is resolved again where it is unpickled (e.g. inside a Ray actor's environment).
        state = dict(self.__dict__)
        state["_pool"] = _Pool()
        state.pop("_api_key", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._api_key = self.config.resolve_api_key()

    async def __aenter__(self) -> OpenAICompatibleClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the SDK client of the current binding; the next call creates a new one."""
        bound, self._pool.bound = self._pool.bound, None
        if bound is not None and not bound.loop.is_closed():
            await bound.sdk.close()

    def _binding(self) -> _LoopBinding:
        """The SDK client and semaphore for the running loop, created on first use in it."""
        import openai

        loop = asyncio.get_running_loop()
        bound = self._pool.bound
        if bound is None or bound.loop is not loop:
            sdk = openai.AsyncOpenAI(
                api_key=self._api_key,
                base_url=self.config.base_url,
                timeout=self.config.timeout_s,
                max_retries=0,
            )
            bound = self._pool.bound = _LoopBinding(loop=loop, sdk=sdk, slots=asyncio.Semaphore(self.config.max_concurrency))
        return bound

    async def complete(self, messages: list[dict[str, str]], *, stage: str, prompt_id: str) -> Completion:
        """Send one chat completion with bounded retries; book it in :attr:`ledger`.

        Args:
            messages: Chat messages, each ``{"role": ..., "content": ...}``.
            stage: Pipeline stage to book the call to, e.g. ``"refine"``.
            prompt_id: The template's ``full_id`` (kept with the result for provenance).

        Returns:
            The completion with its token counts, latency and retry count.

        Raises:
            LLMError: When the call fails for good; it is booked as a failure first.
            ValueError: If ``messages`` is malformed (a caller bug; nothing is sent or booked).
        """
        _check_messages(messages)
        if not stage:
            raise ValueError("stage must be a non-empty string naming the pipeline step, e.g. 'refine'")
        if self.guard is not None:
            try:
                self.guard.check_messages(messages)
            except Exception as refused:  # noqa: BLE001 — any refusal stops the request; only its category is kept
                category = str(getattr(refused, "category", type(refused).__name__))
                logger.info("LLM request refused by the egress guard (%s); nothing sent", category)
                self.guard.record(messages, stage=stage, attempts=0, refused=category)
                raise LLMError("egress_refused", f"the request holds a raw {category}", attempts=0,
                               stage=stage, prompt_id=prompt_id) from None
        bound = self._binding()
        start = time.perf_counter()
        failure: _Failure | None = None
        reached = 0  # attempts that got to the endpoint (what the exposure ledger books)
        sending = False
        try:
            for attempts in range(1, self.config.max_retries + 2):
                if failure is not None:
                    delay = self._backoff(attempts - 2, failure.retry_after_s)
                    logger.debug("LLM attempt %d failed (%s); retrying in %.3fs", attempts - 1, failure.reason, delay)
                    await asyncio.sleep(delay)
                sending = True
                outcome = await self._attempt(bound, messages)
                sending = False
                if isinstance(outcome, _Reply) or outcome.reason != "connection":
                    reached += 1
                if isinstance(outcome, _Reply):
                    latency = time.perf_counter() - start
                    self._book(stage, outcome.usage, attempts, latency, failed=False)
                    if self.guard is not None:
                        self.guard.record(messages, stage=stage, attempts=reached,
                                          prompt_tokens=outcome.usage.prompt_tokens,
                                          completion_tokens=outcome.usage.completion_tokens)
                    return Completion(
                        text=outcome.text,
                        prompt_tokens=outcome.usage.prompt_tokens,
                        completion_tokens=outcome.usage.completion_tokens,
                        latency_s=latency,
                        retries=attempts - 1,
                        model=outcome.model,
                        prompt_id=prompt_id,
                    )
                failure = outcome
                if failure.reason not in RETRYABLE:
                    break
        except asyncio.CancelledError:
            if self.guard is not None:  # a request in flight when cancelled may have been sent
                self.guard.record(messages, stage=stage, attempts=reached + int(sending))
            raise
        assert failure is not None  # the loop runs at least once and returns on success
        self._book(stage, failure.usage, attempts, time.perf_counter() - start, failed=True)
        if self.guard is not None:
            self.guard.record(messages, stage=stage, attempts=reached)
        logger.info("LLM call failed for good: %s: %s (attempts=%d)", failure.reason, failure.message, attempts)
        raise LLMError(
            failure.reason,
            failure.message,
            attempts=attempts,
            status_code=failure.status_code,
            stage=stage,
            prompt_id=prompt_id,
        )

    def _book(self, stage: str, usage: Usage, attempts: int, latency: float, *, failed: bool) -> None:
        """Book one logical call (its tokens, attempts and outcome) in the ledger and the journal."""
        booked = Usage(
            prompt_tokens=usage.prompt_tokens,
            completion_tokens=usage.completion_tokens,
            total_tokens=usage.total_tokens,
            calls=1,
            retries=attempts - 1,
            failures=int(failed),
            latency_s=latency,
        )
        self.ledger.add(stage, self.config.side, booked)
        if self.journal is not None:
            self.journal.append(stage, self.config.side, booked)

    def _backoff(self, retry_index: int, retry_after_s: float | None) -> float:
        """Full-jitter exponential backoff, or the server's Retry-After if longer; capped."""
        cfg = self.config
        cap = min(cfg.max_backoff_s, cfg.backoff_s * (2.0**retry_index))
        delay = self._rng.uniform(0.0, cap)
        if retry_after_s is not None:
            delay = max(delay, min(retry_after_s, cfg.max_backoff_s))
        return delay

    async def _attempt(self, bound: _LoopBinding, messages: list[dict[str, str]]) -> _Reply | _Failure:
        """One HTTP attempt under the semaphore and the deadline; errors are classified, not raised."""
        import openai

        cfg = self.config
        request: dict[str, Any] = {"model": cfg.model, "messages": messages, "temperature": cfg.temperature}
        if cfg.max_tokens is not None:
            request["max_tokens"] = cfg.max_tokens
        async with bound.slots:
            try:
                response = await asyncio.wait_for(
                    bound.sdk.chat.completions.create(**request, timeout=cfg.timeout_s), timeout=cfg.timeout_s
                )
            except (openai.APITimeoutError, asyncio.TimeoutError):
                return _Failure("timeout", f"no reply within timeout_s={cfg.timeout_s}")
            except openai.APIConnectionError as err:
                return _Failure("connection", f"cannot reach {cfg.base_url}: {err}")
            except openai.APIStatusError as err:
                return _classify_status(err)
            except (openai.APIResponseValidationError, json.JSONDecodeError) as err:
                return _Failure("bad_response", f"response is not a chat completion: {err}")
        return _parse_response(response, cfg.model)


def _check_messages(messages: list[dict[str, str]]) -> None:
    """Raise ValueError unless ``messages`` is a non-empty list of role/content string dicts."""
    if not isinstance(messages, list) or not messages:
        raise ValueError("messages must be a non-empty list of {'role': ..., 'content': ...} dicts")
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str) or not isinstance(
            message.get("content"), str
        ):
            raise ValueError(f"messages[{i}] must be a dict with string 'role' and 'content', got {message!r}")


def _classify_status(err: openai.APIStatusError) -> _Failure:
    """Map an HTTP error status to a failure: 429 and 5xx are retryable, other 4xx are not."""
    status = err.status_code
    message = f"HTTP {status}: {err.message}"
    if status == 429:
        return _Failure("rate_limited", message, status, retry_after_s=_retry_after(err.response.headers))
    if status >= 500:
        return _Failure("server_error", message, status, retry_after_s=_retry_after(err.response.headers))
    return _Failure("client_error", message, status)


def _retry_after(headers: Any) -> float | None:
    """Seconds the server asks to wait (``retry-after-ms``, ``retry-after`` seconds or date)."""
    raw_ms = headers.get("retry-after-ms")
    if raw_ms is not None:
        try:
            return max(0.0, float(raw_ms) / 1000.0)
        except ValueError:
            pass
    raw = headers.get("retry-after")
    if raw is None:
        return None
    try:
        return max(0.0, float(raw))
    except ValueError:
        pass
    try:
        parsed = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError):
        return None
    return max(0.0, parsed.timestamp() - time.time())


def _parse_response(response: Any, default_model: str) -> _Reply | _Failure:
    """Text, tokens and model of a chat-completion response, or an ``empty_reply``/``bad_response``."""
    usage = _response_usage(response)
    choices = getattr(response, "choices", None)
    if not isinstance(choices, list):
        return _Failure("bad_response", f"response has no 'choices' list: {str(response)[:200]!r}", usage=usage)
    message = getattr(choices[0], "message", None) if choices else None
    text = getattr(message, "content", None)
    if not isinstance(text, str) or not text.strip():
        return _Failure("empty_reply", "the server returned no message content", usage=usage)
    return _Reply(text=text, model=getattr(response, "model", None) or default_model, usage=usage)


def _response_usage(response: Any) -> Usage:
    """Token counts from the response's ``usage`` block; zeros when the server sent none."""
    block = getattr(response, "usage", None)
    prompt = int(getattr(block, "prompt_tokens", 0) or 0)
    completion = int(getattr(block, "completion_tokens", 0) or 0)
    total = int(getattr(block, "total_tokens", 0) or 0) or prompt + completion
    return Usage(prompt_tokens=prompt, completion_tokens=completion, total_tokens=total)


def complete_sync(
    client: LLMClient, messages: list[dict[str, str]], *, stage: str, prompt_id: str
) -> Completion:
    """Run one ``client.complete`` call to the end from synchronous code (``asyncio.run``).

    The client's connection pool is closed afterwards (it belongs to the temporary loop); the
    ledger keeps the call. Do not use it inside a running event loop: ``await`` there instead.

    Raises:
        RuntimeError: If called from inside a running event loop.
        LLMError: As :meth:`LLMClient.complete`.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        raise RuntimeError("complete_sync() called inside a running event loop; use `await client.complete(...)`")

    async def once() -> Completion:
        try:
            return await client.complete(messages, stage=stage, prompt_id=prompt_id)
        finally:
            aclose = getattr(client, "aclose", None)
            if aclose is not None:
                await aclose()

    return asyncio.run(once())
