"""The only way to build a Brain-side LLM client: bound to a privacy session's egress guard."""

from __future__ import annotations

from rg.llm.client import OpenAICompatibleClient
from rg.llm.config import LLMConfig
from rg.llm.usage import UsageLedger
from rg.privacy.session import PrivacySession


def brain_client(config: LLMConfig, session: PrivacySession, ledger: UsageLedger | None = None) -> OpenAICompatibleClient:
    """A client for a ``side: brain`` endpoint whose every request passes ``session.guard`` first.

    In ``plaintext`` mode the session guards nothing (the baseline the privacy modes are measured
    against); in ``utility`` and ``privacy`` modes a request holding any raw string the session
    has seen fails with ``egress_refused`` and is never sent.

    Raises:
        ValueError: if ``config.side`` is not ``brain`` (Hand-side endpoints need no guard).
    """
    if config.side != "brain":
        raise ValueError(f"brain_client is for side: brain endpoints; {config.base_url} has side: {config.side}")
    return OpenAICompatibleClient(config, ledger=ledger, guard=session.guard)
