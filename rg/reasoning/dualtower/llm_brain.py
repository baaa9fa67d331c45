"""The LLM Brain: question analysis and path selection by any OpenAI-compatible endpoint.

Built only through :func:`rg.privacy.brain_client`, so every request passes the session's egress
guard and is booked in its exposure ledger and in the usage ledger as ``side: brain``. HTTP 429,
5xx, timeouts and connection errors are retried by the client (``max_retries``, bounded); a reply
that is not valid JSON of the expected shape is asked again at most ``reasks`` times; then
:class:`~rg.reasoning.dualtower.brain.BrainError` says why, and the controller goes on without the
Brain.
"""

from __future__ import annotations

from pydantic import BaseModel

from rg.llm.client import LLMError, OpenAICompatibleClient
from rg.llm.config import LLMConfig
from rg.llm.journal import UsageJournal
from rg.llm.prompts import PromptTemplate
from rg.llm.usage import UsageLedger
from rg.privacy.session import PrivacySession
from rg.privacy import brain_client
from rg.reasoning.dualtower.brain import Analysis, BrainError, Choice, Indicator
from rg.reasoning.dualtower.payload import SealedPayload, SelectionPayload
from rg.reasoning.dualtower.prompts import ANALYSE, SELECT, AnalysisReply, SelectionReply, parse_json_reply

STAGE_ANALYSE = "brain_analyse"
STAGE_SELECT = "brain_select"


class LLMBrain:
    """An OpenAI-compatible Brain bound to one question's privacy session.

    Args:
        config: The endpoint (``side: brain``).
        session: The question's privacy session (its guard checks every request).
        reasks: Re-asks after a malformed reply.
        ledger: Usage ledger to book calls in (shared across questions by the caller).
        client: An existing Brain client to rebind to ``session`` (shares its connection pool).
        journal: Usage journal a new client appends each completed call to (a rebound client keeps its own).
    """

    def __init__(self, config: LLMConfig | OpenAICompatibleClient, session: PrivacySession, reasks: int = 1,
                 ledger: UsageLedger | None = None, journal: UsageJournal | None = None) -> None:
        self.client = brain_client(config, session, ledger, journal)
        self.reasks = reasks
        self.name = f"llm:{self.client.config.model}"

    async def _ask(self, template: PromptTemplate, payload: SealedPayload, stage: str,
                   reply: type[BaseModel]) -> BaseModel:
        messages = template.render(payload=payload.text)
        problem = ""
        for attempt in range(1, self.reasks + 2):
            try:
                done = await self.client.complete(messages, stage=stage, prompt_id=template.full_id)
            except LLMError as err:
                raise BrainError(err.reason, str(err), attempts=attempt) from None
            try:
                return parse_json_reply(done.text, reply)
            except ValueError as err:
                problem = str(err)
        raise BrainError("malformed", problem, attempts=self.reasks + 1)

    async def analyse(self, payload: SealedPayload) -> Analysis:
        parsed = await self._ask(ANALYSE, payload, STAGE_ANALYSE, AnalysisReply)
        assert isinstance(parsed, AnalysisReply)
        indicators = tuple(Indicator(text=i.text, relations=tuple(i.relations), depth=i.depth,
                                     answer_type=i.answer_type) for i in parsed.indicators)
        return Analysis(tuple(parsed.sub_questions), indicators, parsed.depth)

    async def select(self, payload: SealedPayload) -> Choice:
        shown = payload.open(SelectionPayload)
        known = {c.id for c in shown.candidates}
        parsed = await self._ask(SELECT, payload, STAGE_SELECT, SelectionReply)
        assert isinstance(parsed, SelectionReply)
        ids = tuple(dict.fromkeys(i for i in parsed.ids if i in known))[: shown.keep]
        if not ids:
            raise BrainError("malformed", "the reply names no candidate of the payload")
        return Choice(ids)
