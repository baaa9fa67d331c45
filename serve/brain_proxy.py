"""The Brain as its own deployment, reached by the Hand only with sealed payloads.

:class:`BrainProxy` holds the untrusted tower: the local Brain (the relation-path planner) or the
LLM Brain (built, as everywhere in rg, only through :func:`rg.privacy.brain_client`). It never
sees the KG, the raw question or the Hand's privacy session: each call brings one
:class:`~rg.reasoning.dualtower.payload.SealedPayload` — JSON the Hand's egress guard has already
passed — and returns a :class:`BrainReply` (the typed result, or the fault, with the call's usage).
All four payload kinds are answered: ``analysis`` and ``selection``, and refine mode's ``follow_up``
and predict mode's ``prediction`` (a Brain without those two calls gives the reason ``unsupported``,
as the in-process controller records it).

On the Hand's side, :class:`RemoteBrainFactory` is the controller's Brain factory: its Brains
send the sealed payloads over a :class:`~ray.serve.handle.DeploymentHandle` and book the returned
usage in the question's ledger. They answer all four calls (an
:class:`~rg.reasoning.dualtower.brain.ExploringBrain`), so refine and predict modes reach the Brain
under Serve as they do in process. A proxy that is gone, overloaded or late becomes a
:class:`~rg.reasoning.dualtower.BrainError` with reason ``unavailable``, so the controller goes on
Hand-only and the question is answered, never lost.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

from ray import serve
from ray.exceptions import RayActorError, RayTaskError
from ray.serve.exceptions import BackPressureError, DeploymentUnavailableError, RayServeException
from ray.serve.handle import DeploymentHandle

from rg.llm.journal import UsageJournal, new_run_id
from rg.llm.usage import Usage, UsageLedger
from rg.privacy.exposure import ExposureLedger
from rg.privacy.schema import KGSchema
from rg.privacy.session import PrivacySession
from rg.reasoning.dualtower.brain import Analysis, Brain, BrainError, Choice, ExploringBrain, FollowUp, Prediction
from rg.reasoning.dualtower.build import brain_factory
from rg.reasoning.dualtower.config import DualTowerConfig
from rg.reasoning.dualtower.brains import LocalBrainFactory
from rg.reasoning.dualtower.local_brain import STAGE_ANALYSE, LocalBrain
from rg.reasoning.dualtower.payload import SealedPayload
from rg.reasoning.dualtower.prompts import protocol_words

UNAVAILABLE = "unavailable"
"""The fault reason of a Brain the Hand could not reach (proxy gone, overloaded or past its deadline)."""
UNSUPPORTED = "unsupported"
"""The fault reason of a follow-up or prediction for a Brain without those calls (0 attempts, as in process)."""
KINDS = ("analysis", "selection", "follow_up", "prediction")
"""The sealed payload kinds :meth:`BrainProxy.call` answers."""


@dataclass(frozen=True)
class BrainReply:
    """One Brain call's outcome as it crosses the process boundary.

    Attributes:
        result: The analysis, choice, follow-up or prediction; None on a fault.
        reason: The fault's reason (:class:`BrainError`); None on success.
        message: The fault's message.
        attempts: Calls the Brain made for it.
        usage: The call's usage ledger (``UsageLedger.to_dict()``), booked by the Hand.
        sent: Requests that left for an LLM Brain: ``(stage, messages, attempts, prompt_tokens,
            completion_tokens)``, booked by the Hand in its session's exposure ledger (the
            messages hold only the sealed payload in the Brain's template).
        refused: ``(stage, category)`` of requests the Brain side's guard refused.
    """

    result: Analysis | Choice | FollowUp | Prediction | None
    reason: str | None
    message: str
    attempts: int
    usage: dict[str, Any]
    sent: tuple[tuple[str, tuple[dict[str, str], ...], int, int, int], ...] = ()
    refused: tuple[tuple[str, str], ...] = ()


class SentCalls(ExposureLedger):
    """The Brain side's exposure ledger: also keeps each booked request, to hand back to the Hand."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[tuple[str, tuple[dict[str, str], ...], int, int, int]] = []
        self.refused: list[tuple[str, str]] = []

    def record_sent(self, stage: str, messages, *, attempts: int, prompt_tokens: int = 0,
                    completion_tokens: int = 0) -> None:
        self.sent.append((stage, tuple(dict(m) for m in messages), attempts, prompt_tokens, completion_tokens))
        super().record_sent(stage, messages, attempts=attempts, prompt_tokens=prompt_tokens,
                            completion_tokens=completion_tokens)

    def record_refused(self, stage: str, category: str) -> None:
        self.refused.append((stage, category))
        super().record_refused(stage, category)


@serve.deployment
class BrainProxy:
    """The untrusted tower of the endpoint (module docstring).

    With the local Brain, concurrent analyses are batched (``@serve.batch``): the planner decodes
    every waiting question's constrained beams in one ``beam_search`` call, off the event loop, so
    the replica keeps collecting the next batch. ``max_batch_size`` 1 turns batching off.

    Args:
        config: The controller's settings (``brain`` and ``privacy`` are read).
        journal: Usage journal (``ServeConfig.usage_journal``) an LLM Brain appends each completed
            call to, as it completes, under one run id per replica; None: no journal.
        max_batch_size: Most analyses decoded together (local Brain).
        batch_wait_timeout_s: How long the first analysis of a batch waits for others.
    """

    def __init__(self, config: dict[str, Any], journal: str | None = None, max_batch_size: int = 8,
                 batch_wait_timeout_s: float = 0.005) -> None:
        self.config = DualTowerConfig.model_validate(config)
        self.brains = brain_factory(self.config, journal=UsageJournal(journal, new_run_id()) if journal else None)
        self.schema = KGSchema.build(())  # the Brain holds no KG: its guard knows only public words
        self.local: LocalBrain | None = None
        self.batches: list[int] = []  # sizes of the last batches decoded (observability; bounded)
        if isinstance(self.brains, LocalBrainFactory) and max_batch_size > 1:
            self.local = LocalBrain(self.brains.planner, self.brains.beams, self.brains.indicators)
            self._analyse_batch.set_max_batch_size(max_batch_size)
            self._analyse_batch.set_batch_wait_timeout_s(batch_wait_timeout_s)

    @serve.batch(max_batch_size=8, batch_wait_timeout_s=0.005)
    async def _analyse_batch(self, texts: list[str]) -> list[Analysis | BrainError]:
        assert self.local is not None  # only called with a local Brain
        payloads = [SealedPayload("analysis", t) for t in texts]
        self.batches = (self.batches + [len(payloads)])[-1000:]
        return self.local.analyse_batch(payloads)  # on the loop: decoding holds the GIL (see docs/serve.md)

    def batch_sizes(self) -> list[int]:
        """Sizes of the last (at most 1,000) analysis batches the local Brain decoded."""
        return list(self.batches)

    async def _batched_analysis(self, text: str) -> BrainReply:
        ledger = UsageLedger()
        started = time.perf_counter()
        result = await self._analyse_batch(text)
        ledger.add(STAGE_ANALYSE, "brain", Usage(calls=1, latency_s=time.perf_counter() - started))
        if isinstance(result, BrainError):
            return BrainReply(None, result.reason, str(result), result.attempts, ledger.to_dict())
        return BrainReply(result, None, "", 1, ledger.to_dict())

    async def call(self, kind: str, text: str) -> BrainReply:
        """Answer one sealed payload: analyse, select, follow up or predict, by its ``kind``.

        A ``follow_up`` or ``prediction`` for a Brain that lacks those calls is the fault ``unsupported``
        with 0 attempts; a kind not in :data:`KINDS` is ``malformed``. Neither reaches the Brain.
        """
        if kind not in KINDS:
            return BrainReply(None, "malformed", f"no Brain call answers a {kind!r} payload", 0, {})
        if kind == "analysis" and self.local is not None:
            return await self._batched_analysis(text)
        ledger, calls = UsageLedger(), SentCalls()
        session = PrivacySession(self.config.privacy, self.schema, protocol=protocol_words())
        session.guard.exposure = session.exposure = calls
        brain: Brain = self.brains(session, ledger)
        if kind in ("follow_up", "prediction") and not isinstance(brain, ExploringBrain):
            asked = "answers no follow-up" if kind == "follow_up" else "makes no prediction"
            return BrainReply(None, UNSUPPORTED, f"{self.brains.name} {asked}", 0, {})
        payload = SealedPayload(kind, text)
        try:
            result = await _dispatch(brain, payload)
        except BrainError as err:
            return BrainReply(None, err.reason, str(err), err.attempts, ledger.to_dict(), tuple(calls.sent),
                              tuple(calls.refused))
        return BrainReply(result, None, "", 1, ledger.to_dict(), tuple(calls.sent), tuple(calls.refused))

    def name(self) -> str:
        return self.brains.name


async def _dispatch(brain: Brain, payload: SealedPayload) -> Analysis | Choice | FollowUp | Prediction:
    """The Brain call a sealed payload of a known kind asks for (follow-up and prediction: an ExploringBrain)."""
    if payload.kind == "analysis":
        return await brain.analyse(payload)
    if payload.kind == "selection":
        return await brain.select(payload)
    assert isinstance(brain, ExploringBrain)  # checked by BrainProxy.call
    if payload.kind == "follow_up":
        return await brain.follow_up(payload)
    return await brain.predict(payload)


class RemoteBrain:
    """A Brain whose calls go to the :class:`BrainProxy` deployment (sealed payloads only).

    It answers all four calls (an :class:`~rg.reasoning.dualtower.brain.ExploringBrain`); whether the
    proxy's Brain does is decided there (``unsupported`` otherwise). A reply of the wrong type for its
    payload is a :class:`BrainError` ``malformed``.
    """

    def __init__(self, handle: DeploymentHandle, name: str, session: PrivacySession, ledger: UsageLedger,
                 timeout_s: float) -> None:
        self.handle, self.name, self.session, self.ledger, self.timeout_s = handle, name, session, ledger, timeout_s

    async def _call(self, payload: SealedPayload) -> Analysis | Choice | FollowUp | Prediction:
        response = self.handle.call.remote(payload.kind, payload.text)
        try:
            reply: BrainReply = await asyncio.wait_for(_resolve(response), self.timeout_s)
        except asyncio.TimeoutError:
            response.cancel()
            raise BrainError(UNAVAILABLE, f"the Brain gave no reply within {self.timeout_s} s") from None
        except (BackPressureError, DeploymentUnavailableError, RayActorError, RayTaskError, RayServeException) as err:
            raise BrainError(UNAVAILABLE, f"the Brain deployment is not reachable ({type(err).__name__})") from None
        if reply.usage.get("stages"):
            self.ledger.merge(UsageLedger.from_dict(reply.usage))
        for stage, messages, attempts, prompt_tokens, completion_tokens in reply.sent:
            self.session.exposure.record_sent(stage, messages, attempts=attempts, prompt_tokens=prompt_tokens,
                                              completion_tokens=completion_tokens)
        for stage, category in reply.refused:
            self.session.exposure.record_refused(stage, category)
        if reply.result is None:
            raise BrainError(reply.reason or "malformed", reply.message, reply.attempts)
        return reply.result

    async def analyse(self, payload: SealedPayload) -> Analysis:
        result = await self._call(payload)
        if not isinstance(result, Analysis):
            raise BrainError("malformed", f"an analysis payload got a {type(result).__name__}")
        return result

    async def select(self, payload: SealedPayload) -> Choice:
        result = await self._call(payload)
        if not isinstance(result, Choice):
            raise BrainError("malformed", f"a selection payload got a {type(result).__name__}")
        return result

    async def follow_up(self, payload: SealedPayload) -> FollowUp:
        result = await self._call(payload)
        if not isinstance(result, FollowUp):
            raise BrainError("malformed", f"a follow-up payload got a {type(result).__name__}")
        return result

    async def predict(self, payload: SealedPayload) -> Prediction:
        result = await self._call(payload)
        if not isinstance(result, Prediction):
            raise BrainError("malformed", f"a prediction payload got a {type(result).__name__}")
        return result


async def _resolve(response: Any) -> Any:
    return await response


class RemoteBrainFactory:
    """The controller's Brain factory in the Hand: one :class:`RemoteBrain` per question.

    The question's privacy session stays in the Hand (it sealed every payload already); the
    Brain's usage and the requests it sent are booked back into the question's ledgers.
    """

    def __init__(self, handle: DeploymentHandle, kind: str, timeout_s: float) -> None:
        self.handle, self.timeout_s = handle, timeout_s
        self.name = f"proxy:{kind}"

    def __call__(self, session: PrivacySession, ledger: UsageLedger) -> Brain:
        return RemoteBrain(self.handle, self.name, session, ledger, self.timeout_s)
