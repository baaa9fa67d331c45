"""The Brain of each question, made by a factory the controller holds: the trained planner
(:class:`LocalBrainFactory`, loaded once) or an OpenAI-compatible LLM (:class:`LLMBrainFactory`, one
connection pool, each question's Brain bound to its privacy session and booking into its ledger). Serve's
``RemoteBrainFactory`` (``serve/brain_proxy.py``) is a third, over the BrainProxy deployment."""

from __future__ import annotations

from typing import Protocol

from rg.llm.client import OpenAICompatibleClient
from rg.llm.config import LLMConfig
from rg.llm.journal import UsageJournal
from rg.llm.usage import UsageLedger
from rg.privacy.session import PrivacySession
from rg.reasoning.dualtower.brain import Brain
from rg.reasoning.dualtower.llm_brain import LLMBrain
from rg.reasoning.dualtower.local_brain import LocalBrain
from rg.retrievers.planner.model import PlannerModel


class BrainFactory(Protocol):
    """Makes the question's Brain, bound to its privacy session and booking into its ledger."""

    name: str

    def __call__(self, session: PrivacySession, ledger: UsageLedger) -> Brain: ...


class LocalBrainFactory:
    """The planner Brain for every question (the planner is loaded once)."""

    def __init__(self, planner: PlannerModel, beams: int = 3, indicators: int = 1) -> None:
        self.planner, self.beams, self.indicators = planner, beams, indicators
        self.name = f"planner:{planner.prompt.full_id}"

    def __call__(self, session: PrivacySession, ledger: UsageLedger) -> Brain:
        return LocalBrain(self.planner, self.beams, self.indicators, ledger)


class LLMBrainFactory:
    """An LLM Brain per question over one shared connection pool, rebound to each session's guard;
    every completed Brain call is also appended to ``journal`` (``rg.llm.journal``), when given."""

    def __init__(self, config: LLMConfig, reasks: int = 1, journal: UsageJournal | None = None) -> None:
        self.config, self.reasks, self.journal = config, reasks, journal
        self._client: OpenAICompatibleClient | None = None
        self.name = f"llm:{config.model}"

    def __call__(self, session: PrivacySession, ledger: UsageLedger) -> Brain:
        brain = LLMBrain(self._client if self._client is not None else self.config, session, self.reasks,
                         journal=self.journal)
        if self._client is None:
            self._client = brain.client
        brain.client.ledger = ledger  # the twin books this question's calls apart
        return brain
