"""The Brain as its own deployment, reached by the Hand only with sealed payloads.

:class:`BrainProxy` holds the untrusted tower: the local Brain (the relation-path planner) or the
LLM Brain (built, as everywhere in rg, only through :func:`rg.privacy.brain_client`). It never
sees the KG, the raw question or the Hand's privacy session: each call brings one
:class:`~rg.reasoning.dualtower.payload.SealedPayload` — JSON the Hand's egress guard has already
passed — and returns a :class:`BrainReply` (the typed result, or the fault, with the call's usage).

On the Hand's side, :class:`RemoteBrainFactory` is the controller's Brain factory: its Brains
send the sealed payloads over a :class:`~ray.serve.handle.DeploymentHandle` and book the returned
usage in the question's ledger. A proxy that is gone, overloaded or late becomes a
:class:`~rg.reasoning.dualtower.BrainError` with reason ``unavailable``, so the controller goes on
Hand-only and the question is answered, never lost.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from ray import serve
from ray.exceptions import RayActorError, RayTaskError
from ray.serve.exceptions import BackPressureError, DeploymentUnavailableError, RayServeException
from ray.serve.handle import DeploymentHandle

from rg.llm.usage import UsageLedger
from rg.privacy.schema import KGSchema
from rg.privacy.session import PrivacySession
from rg.reasoning.dualtower.brain import Analysis, Brain, BrainError, Choice
from rg.reasoning.dualtower.build import brain_factory
from rg.reasoning.dualtower.config import DualTowerConfig
from rg.reasoning.dualtower.payload import SealedPayload

UNAVAILABLE = "unavailable"
"""The fault reason of a Brain the Hand could not reach (proxy gone, overloaded or past its deadline)."""


@dataclass(frozen=True)
class BrainReply:
    """One Brain call's outcome as it crosses the process boundary.

    Attributes:
        result: The analysis or choice; None on a fault.
        reason: The fault's reason (:class:`BrainError`); None on success.
        message: The fault's message.
        attempts: Calls the Brain made for it.
        usage: The call's usage ledger (``UsageLedger.to_dict()``), booked by the Hand.
    """

    result: Analysis | Choice | None
    reason: str | None
    message: str
    attempts: int
    usage: dict[str, Any]


@serve.deployment
class BrainProxy:
    """The untrusted tower of the endpoint (module docstring).

    Args:
        config: The controller's settings (``brain`` and ``privacy`` are read).
    """

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = DualTowerConfig.model_validate(config)
        self.brains = brain_factory(self.config)
        self.schema = KGSchema.build(())  # the Brain holds no KG: its guard knows only public words

    async def call(self, kind: str, text: str) -> BrainReply:
        """Analyse or select on one sealed payload."""
        ledger = UsageLedger()
        brain: Brain = self.brains(PrivacySession(self.config.privacy, self.schema), ledger)
        payload = SealedPayload(kind, text)
        try:
            result = await (brain.analyse(payload) if kind == "analysis" else brain.select(payload))
        except BrainError as err:
            return BrainReply(None, err.reason, str(err), err.attempts, ledger.to_dict())
        return BrainReply(result, None, "", 1, ledger.to_dict())

    def name(self) -> str:
        return self.brains.name


class RemoteBrain:
    """A Brain whose calls go to the :class:`BrainProxy` deployment (sealed payloads only)."""

    def __init__(self, handle: DeploymentHandle, name: str, ledger: UsageLedger, timeout_s: float) -> None:
        self.handle, self.name, self.ledger, self.timeout_s = handle, name, ledger, timeout_s

    async def _call(self, payload: SealedPayload) -> Analysis | Choice:
        response = self.handle.call.remote(payload.kind, payload.text)
        try:
            reply: BrainReply = await asyncio.wait_for(_resolve(response), self.timeout_s)
        except asyncio.TimeoutError:
            response.cancel()
            raise BrainError(UNAVAILABLE, f"the Brain gave no reply within {self.timeout_s} s") from None
        except (BackPressureError, DeploymentUnavailableError, RayActorError, RayTaskError, RayServeException) as err:
            raise BrainError(UNAVAILABLE, f"the Brain deployment is not reachable ({type(err).__name__})") from None
        self.ledger.merge(UsageLedger.from_dict(reply.usage))
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


async def _resolve(response: Any) -> Any:
    return await response


class RemoteBrainFactory:
    """The controller's Brain factory in the Hand: one :class:`RemoteBrain` per question.

    The question's privacy session stays in the Hand (it sealed every payload already); only the
    usage ledger is bound.
    """

    def __init__(self, handle: DeploymentHandle, kind: str, timeout_s: float) -> None:
        self.handle, self.timeout_s = handle, timeout_s
        self.name = f"proxy:{kind}"

    def __call__(self, session: PrivacySession, ledger: UsageLedger) -> Brain:
        return RemoteBrain(self.handle, self.name, ledger, self.timeout_s)
