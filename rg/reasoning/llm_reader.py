"""LLM reader: answer a question from evidence chains with any OpenAI-compatible model.

The reader of ReG stage S(II) (Zou et al. 2025) and SubgraphRAG (Li et al. 2025): the LLM gets
the question and the evidence lines (chains from :func:`rg.evidence.build_evidence`, or one
line per triple from :func:`rg.evidence.triple_evidence`) and names its answers as
``ans: <answer>`` lines. The template :data:`READ_ANSWERS` and its parser
:func:`parse_answers` live here, once.

Per question the reader makes at most two calls (a bounded repair, never a loop):

1. the prompt; if the reply has an ``ans:`` line with an answer, done;
2. otherwise the reply is appended with :data:`FOLLOW_UP`, which asks for the format again.

If the second reply has no answer either, or a call fails for good (:class:`LLMError`, after
the client's own bounded retries), the :class:`Reading` carries no answers and the reason
(``no_answer_line`` or ``llm_<reason>``); the question is never lost and nothing is raised.
Answers are mapped back to the chain ends they name, so each carries its supporting chains.
"""

from __future__ import annotations

import re

from pydantic import Field, field_validator

from rg.config import Config
from rg.evidence import Evidence
from rg.llm.client import Completion, LLMClient, LLMError, OpenAICompatibleClient
from rg.llm.config import LLMConfig, hand_side_only
from rg.llm.journal import UsageJournal
from rg.llm.prompts import PromptTemplate
from rg.llm.usage import Usage
from rg.metrics import normalize_answer
from rg.reasoning.base import Reading, link_answers

STAGE = "read"
"""Ledger stage of reader calls."""

NO_ANSWER_LINE = "no_answer_line"
"""Fallback reason: no reply (after the follow-up, if enabled) had a usable ``ans:`` line."""

NO_EVIDENCE = "(no evidence was retrieved)"
"""Shown in place of the evidence lines when there are none."""

READ_ANSWERS = PromptTemplate(
    id="read_answers",
    version=1,
    system="You answer questions from facts retrieved from a knowledge graph.",
    instructions="""
        You get a question and evidence from a knowledge graph, one chain of facts per line,
        the most relevant first. `A → [relation] → B` states that A has that relation to B;
        `B ← [relation] ← A` states the same fact read from B's side. `{X | Y}` stands for
        several entities reached by the same relations, and `&` joins chains that start from
        different entities of the question and reach the same entities. Work out which
        entities answer the question; rely on the evidence and use your own knowledge only
        when the evidence does not cover the question. Give every answer on its own line as
        `ans: <answer>`, with entity names copied exactly as the evidence writes them, and
        write nothing else.
    """,
    example="""
        Question: Who acted in the films that Ines Rocha directed?
        Evidence:
        Ines Rocha ← [directed_by] ← {Glass Harbour | Tin Moon}
        Ines Rocha ← [directed_by] ← {Glass Harbour | Tin Moon} → [starred_actors] → {Ana Prado | Rui Costa}
        Ines Rocha ← [written_by] ← Paper Coast
        Paper Coast → [starred_actors] → Leo Marsh
        Reply:
        ans: Ana Prado
        ans: Rui Costa
    """,
    task_format="Question: {question}\nEvidence:\n{evidence}\nReply:",
)

FOLLOW_UP = (
    "Your reply has no line in the required format. Reply again with only the answers, "
    "one per line, each written as `ans: <answer>`."
)
"""The second-turn message, sent after the first reply. It belongs to :data:`READ_ANSWERS`:
change it only together with the template's version."""

_ANS_LINE = re.compile(
    r"^[\s>*•·+\-]*(?:\d+[.)]\s*)?[*_`]*\s*ans\s*[*_`]*\s*[:：]\s*(?P<value>.*)$", re.IGNORECASE
)
_EDGE = " \t*_`'\"“”‘’.,;"


def _clean(value: str) -> str:
    """Strip markdown emphasis, quotes and trailing punctuation around one answer."""
    return value.strip(_EDGE).strip()


def parse_answers(reply: str) -> tuple[str, ...]:
    """The answers of the ``ans: <answer>`` lines of a reply, in reply order.

    Tolerates case (``ANS:``), whitespace, list markers (``-``, ``*``, ``1.``), markdown
    emphasis and quotes around the answer, a trailing full stop, and a copied entity set
    (``ans: {a | b}`` gives ``a`` and ``b``). Duplicates (equal after
    :func:`rg.metrics.normalize_answer`, or after case-folding for answers that normalise to
    nothing) are dropped, keeping the first spelling.

    Returns:
        The answers; empty when no line has the format or every such line is empty.
    """
    answers: dict[str, str] = {}
    for line in reply.splitlines():
        match = _ANS_LINE.match(line)
        if match is None:
            continue
        value = _clean(match.group("value"))
        if value.startswith("{") and value.endswith("}"):
            value = value[1:-1]
        parts = value.split("|") if "|" in value else [value]
        for part in (_clean(p) for p in parts):
            key = normalize_answer(part) or part.casefold()
            if part and key not in answers:
                answers[key] = part
    return tuple(answers.values())


class LLMReaderConfig(Config):
    """Settings of :class:`LLMReader`."""

    llm: LLMConfig = Field(..., description="The endpoint and calling policy.")
    max_lines: int = Field(
        200, ge=1, description="Evidence lines shown in the prompt (the first ones, in evidence order)."
    )
    follow_up: bool = Field(
        True, description="When the first reply has no `ans:` line, ask once more for the format (a second call)."
    )

    @field_validator("llm")
    @classmethod
    def _hand_side(cls, llm: LLMConfig) -> LLMConfig:
        return hand_side_only(llm, "the LLM reader")


def _usage(done: Completion) -> Usage:
    return Usage(
        prompt_tokens=done.prompt_tokens,
        completion_tokens=done.completion_tokens,
        total_tokens=done.prompt_tokens + done.completion_tokens,
        calls=1,
        retries=done.retries,
        latency_s=done.latency_s,
    )


def _failed(err: LLMError) -> Usage:
    return Usage(calls=1, retries=err.attempts - 1, failures=1)


class LLMReader:
    """Reads answers with an LLM behind any OpenAI-compatible endpoint.

    Args:
        config: Endpoint and prompt limits.
        client: An existing client (its ledger books the calls under stage ``read``); by
            default one is created on first use, inside the process that calls (e.g. an actor).
        journal: The usage journal the default client appends each completed call to
            (:mod:`rg.llm.journal`); unused when ``client`` is given.

    Attributes:
        name: ``llm:<model>``.
    """

    def __init__(self, config: LLMReaderConfig, client: LLMClient | None = None,
                 journal: UsageJournal | None = None) -> None:
        self.config = config
        self.name = f"llm:{config.llm.model}"
        self._client = client
        self.journal = journal

    @property
    def client(self) -> LLMClient:
        if self._client is None:
            self._client = OpenAICompatibleClient(self.config.llm, journal=self.journal)
        return self._client

    def messages(self, question: str, evidence: Evidence) -> list[dict[str, str]]:
        """The first-turn chat messages for one question."""
        text = evidence.text(self.config.max_lines) or NO_EVIDENCE
        return READ_ANSWERS.render(question=question, evidence=text)

    async def read(self, question: str, evidence: Evidence) -> Reading:
        """Ask the LLM, repair the format once if needed, and link the answers to chains."""
        prompt_id = READ_ANSWERS.full_id
        messages = self.messages(question, evidence)
        usage = Usage()
        answers: tuple[str, ...] = ()
        for _turn in range(2 if self.config.follow_up else 1):
            try:
                done = await self.client.complete(messages, stage=STAGE, prompt_id=prompt_id)
            except LLMError as err:
                return Reading(self.name, usage=usage + _failed(err), prompt_id=prompt_id, fallback=f"llm_{err.reason}")
            usage = usage + _usage(done)
            answers = parse_answers(done.text)
            if answers:
                break
            messages = messages + [
                {"role": "assistant", "content": done.text},
                {"role": "user", "content": FOLLOW_UP},
            ]
        if not answers:
            return Reading(self.name, usage=usage, prompt_id=prompt_id, fallback=NO_ANSWER_LINE)
        linked = link_answers(answers, evidence)
        return Reading(self.name, ranked=linked, selected=linked, usage=usage, prompt_id=prompt_id)
