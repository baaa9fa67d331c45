"""The LLM Brain: question analysis, path selection, refine mode's follow-up and predict mode's
predictions by any OpenAI-compatible endpoint.

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
from rg.reasoning.dualtower.brain import Analysis, BrainError, Choice, FollowUp, Indicator, Prediction
from rg.reasoning.dualtower.payload import PredictionPayload, SealedPayload, SelectionPayload
from rg.reasoning.dualtower.prompts import (
    ANALYSE,
    FOLLOW_UP,
    PREDICT,
    SELECT,
    AnalysisReply,
    FollowUpReply,
    IndicatorReply,
    PredictionReply,
    SelectionReply,
    parse_json_reply,
)

STAGE_ANALYSE = "brain_analyse"
STAGE_SELECT = "brain_select"
STAGE_FOLLOW_UP = "brain_follow_up"
STAGE_PREDICT = "brain_predict"


def _indicator(reply: IndicatorReply) -> Indicator:
    return Indicator(text=reply.text, relations=tuple(reply.relations), depth=reply.depth,
                     answer_type=reply.answer_type)


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
        indicators = tuple(_indicator(i) for i in parsed.indicators)
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

    async def follow_up(self, payload: SealedPayload) -> FollowUp:
        parsed = await self._ask(FOLLOW_UP, payload, STAGE_FOLLOW_UP, FollowUpReply)
        assert isinstance(parsed, FollowUpReply)
        return FollowUp(parsed.missing, _indicator(parsed.indicator))

    async def predict(self, payload: SealedPayload) -> Prediction:
        shown = payload.open(PredictionPayload)
        parsed = await self._ask(PREDICT, payload, STAGE_PREDICT, PredictionReply)
        assert isinstance(parsed, PredictionReply)
        targets = tuple(dict.fromkeys(p.target.strip() for p in parsed.predictions))[: shown.keep]
        indicator = _indicator(parsed.indicator) if parsed.indicator is not None else None
        return Prediction(targets, indicator)
