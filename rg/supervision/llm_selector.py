"""LLM path selection for supervision refinement (ReG stage S(I)).

The LLM sees the question, its gold answers and the numbered, compressed candidate paths, and
names the paths that are real evidence as ``ans: Path i`` lines (ReG, Zou et al. 2025). The
template and its parser live here, once; the template's ``full_id`` is stored with every label
it produces. A reply that cannot be parsed, names a path that does not exist, or a call that
keeps failing becomes a failed :class:`Selection` with a reason, and the caller falls back to
the weak labels — the question is never lost.
"""

from __future__ import annotations

import re

from pydantic import Field, field_validator

from rg.config import Config
from rg.data.sample import Sample
from rg.llm.client import LLMClient, LLMError, OpenAICompatibleClient
from rg.llm.config import LLMConfig, hand_side_only
from rg.llm.prompts import PromptTemplate
from rg.supervision.candidates import CandidatePool
from rg.supervision.selectors import EMPTY_POOL, Selection

STAGE = "refine"

SELECT_PATHS = PromptTemplate(
    id="select_paths",
    version=1,
    system="You decide which knowledge-graph paths are evidence for the answer to a question.",
    instructions="""
        You get a question, its correct answers, and numbered candidate paths from a knowledge
        graph. A path is written `entity → [relation] → entity`; `←` means the relation is
        followed backwards. Choose every path that a careful reader needs to get from the
        entities named in the question to the answers: the reasoning chain itself, and facts
        that check a constraint of the question (a date, a type, a comparison). Leave out
        paths that only happen to touch an answer by a relation the question is not about.
        Reply with one line `ans: Path <number>` per chosen path and nothing else.
    """,
    example="""
        Question: Where was the director of Glass Harbour born?
        Answers: Lisbon
        Paths:
        Path 1: Glass Harbour → [film.film.directed_by] → Ines Rocha → [people.person.place_of_birth] → Lisbon
        Path 2: Glass Harbour → [film.film.written_by] → Ines Rocha → [people.person.place_of_birth] → Lisbon
        Path 3: Glass Harbour → [film.film.release_date] → 2004-05-01
        Path 4: Lisbon ← [film.film.featured_locations] ← Glass Harbour
        Reply:
        ans: Path 1
    """,
    task_format="Question: {question}\nAnswers: {answers}\nPaths:\n{paths}\nReply:",
)

_ANS = re.compile(r"^\s*ans\s*:\s*path\s*(\d+)\b", re.IGNORECASE | re.MULTILINE)
UNPARSEABLE = "unparseable"
OUT_OF_RANGE = "out_of_range"


def parse_selection(reply: str, n_paths: int) -> tuple[int, ...] | str:
    """Parse ``ans: Path i`` lines (1-based) into sorted 0-based positions.

    Returns:
        The positions, or a failure reason: ``unparseable`` when no such line exists,
        ``out_of_range`` when a line names a path number outside ``1..n_paths``.
    """
    numbers = [int(m) for m in _ANS.findall(reply)]
    if not numbers:
        return UNPARSEABLE
    if any(not 1 <= n <= n_paths for n in numbers):
        return OUT_OF_RANGE
    return tuple(sorted({n - 1 for n in numbers}))


class LLMSelectorConfig(Config):
    """Configuration of :class:`LLMPathSelector`."""

    llm: LLMConfig
    max_paths: int = Field(80, ge=1, description="Candidates listed in one prompt (pool order: sp, q, a).")
    max_answers: int = Field(10, ge=1, description="Gold answers shown in the prompt.")

    @field_validator("llm")
    @classmethod
    def _hand_side(cls, llm: LLMConfig) -> LLMConfig:
        return hand_side_only(llm, "the LLM path selector of refinement")


class LLMPathSelector:
    """Selects evidence paths with an LLM behind any OpenAI-compatible endpoint.

    Args:
        config: Endpoint and prompt limits.
        client: An existing client; by default one is created on first use (inside the
            process that calls, e.g. a Ray actor).
    """

    def __init__(self, config: LLMSelectorConfig, client: LLMClient | None = None) -> None:
        self.config = config
        self.name = f"llm:{config.llm.model}"
        self._client = client

    @property
    def client(self) -> LLMClient:
        if self._client is None:
            self._client = OpenAICompatibleClient(self.config.llm)
        return self._client

    def messages(self, sample: Sample, pool: CandidatePool) -> list[dict[str, str]]:
        """The chat messages for one question (the listing numbers paths from 1)."""
        shown = pool.candidates[: self.config.max_paths]
        listing = "\n".join(f"Path {i + 1}: {c.text()}" for i, c in enumerate(shown))
        answers = ", ".join(sample.answers[: self.config.max_answers])
        return SELECT_PATHS.render(question=sample.question, answers=answers, paths=listing)

    async def select(self, sample: Sample, pool: CandidatePool) -> Selection:
        if not pool.candidates:
            return Selection(prompt_id=SELECT_PATHS.full_id, failure=EMPTY_POOL)
        shown = pool.candidates[: self.config.max_paths]
        try:
            reply = await self.client.complete(
                self.messages(sample, pool), stage=STAGE, prompt_id=SELECT_PATHS.full_id
            )
        except LLMError as err:
            return Selection(prompt_id=SELECT_PATHS.full_id, failure=f"llm_{err.reason}")
        tokens = {"prompt_tokens": reply.prompt_tokens, "completion_tokens": reply.completion_tokens}
        parsed = parse_selection(reply.text, len(shown))
        if isinstance(parsed, str):
            return Selection(prompt_id=SELECT_PATHS.full_id, failure=parsed, **tokens)
        return Selection(indices=tuple(shown[i].index for i in parsed), prompt_id=SELECT_PATHS.full_id, **tokens)
