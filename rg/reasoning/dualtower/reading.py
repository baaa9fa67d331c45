"""The Hand's answer step over the verified raw evidence (PrivGemo §4.3, "answer").

``hand.kind: local`` reads with :class:`~rg.reasoning.retriever_reader.RetrieverReader` (the
Brain's ranking as walk values). ``hand.kind: llm`` asks a trusted local model behind an
OpenAI-compatible endpoint (``side: hand``: it sees raw names, so a Brain-side endpoint is refused
at load time) with the LLM reader's prompt. The Hand LLM is asked only when there is verified
evidence; when its call fails for good or its replies carry no answer line, the local reader
answers instead and the reason is returned, so no question is lost. Its calls are booked in the
question's ledger (stage ``read``, side ``hand``).
"""

from __future__ import annotations

import dataclasses

from rg.evidence import Evidence
from rg.llm.client import OpenAICompatibleClient
from rg.llm.journal import UsageJournal
from rg.llm.usage import UsageLedger
from rg.reasoning.base import Reading
from rg.reasoning.dualtower.config import DualTowerConfig
from rg.reasoning.llm_reader import LLMReader, LLMReaderConfig
from rg.reasoning.retriever_reader import RetrieverReader

LOCAL_FALLBACK = "local_reader"
"""What answers when the Hand LLM gave no answer (the fault's ``fallback``)."""


class HandReader:
    """The Hand's reader (module docstring).

    Args:
        config: The controller's settings (``hand`` and ``reader``).
        client: An existing Hand-side client (tests); by default one is created on first use, in
            the process that reads, and shared by every question's twin.
        journal: The created client appends each completed call here (``rg.llm.journal``).
    """

    def __init__(self, config: DualTowerConfig, client: OpenAICompatibleClient | None = None,
                 journal: UsageJournal | None = None) -> None:
        self.local = RetrieverReader(config.reader)
        hand = config.hand
        self.llm_config = (
            None if hand.kind == "local"
            else LLMReaderConfig(llm=hand.llm, max_lines=hand.max_lines, follow_up=hand.follow_up)
        )
        self._client = client
        self.journal = journal
        self.name = f"llm:{hand.llm.model}" if hand.llm is not None else "local"

    def _reader(self, ledger: UsageLedger) -> LLMReader:
        assert self.llm_config is not None
        if self._client is None:
            self._client = OpenAICompatibleClient(self.llm_config.llm, journal=self.journal)
        return LLMReader(self.llm_config, self._client.with_ledger(ledger))  # one pool; this question's ledger

    async def read(self, question: str, evidence: Evidence, ledger: UsageLedger) -> tuple[Reading, str | None]:
        """The reading and, when the Hand LLM gave no answer, why (else None)."""
        if self.llm_config is None or not evidence.chains():
            return await self.local.read(question, evidence), None
        reading = await self._reader(ledger).read(question, evidence)
        if reading.ok:
            return reading, None
        local = await self.local.read(question, evidence)
        return dataclasses.replace(local, usage=reading.usage + local.usage), str(reading.fallback)
