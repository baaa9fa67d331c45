"""The only way to build a Brain-side LLM client: bound to a privacy session's egress guard."""

from __future__ import annotations

from rg.llm.client import OpenAICompatibleClient
from rg.llm.config import LLMConfig
from rg.llm.journal import UsageJournal
from rg.llm.usage import UsageLedger
from rg.privacy.session import PrivacySession


def brain_client(
    config: LLMConfig | OpenAICompatibleClient, session: PrivacySession, ledger: UsageLedger | None = None,
    journal: UsageJournal | None = None,
) -> OpenAICompatibleClient:
    """A client for a ``side: brain`` endpoint whose every request passes ``session.guard`` first.

    Pass a config to build a new client, or an existing Brain-side client to rebind it to the
    next question's session (the connection pool, ledger and usage journal are shared). A new
    client appends each completed call to ``journal`` (``side: brain``), when given.

    In ``plaintext`` mode the session guards nothing (the baseline the privacy modes are measured
    against); in ``utility`` and ``privacy`` modes a request holding any raw string the session
    has seen fails with ``egress_refused`` and is never sent.

    Raises:
        ValueError: if ``config.side`` is not ``brain`` (Hand-side endpoints need no guard).
    """
    settings = config.config if isinstance(config, OpenAICompatibleClient) else config
    if settings.side != "brain":
        raise ValueError(f"brain_client is for side: brain endpoints; {settings.base_url} has side: {settings.side}")
    if isinstance(config, OpenAICompatibleClient):
        return config.with_guard(session.guard)
    return OpenAICompatibleClient(config, ledger=ledger, guard=session.guard, journal=journal)
