"""Reasoning: readers that answer a question from its evidence (LLM or retriever scores)."""

from rg.reasoning.base import Answer, Reader, Reading, link_answers
from rg.reasoning.llm_reader import (
    FOLLOW_UP,
    NO_ANSWER_LINE,
    READ_ANSWERS,
    LLMReader,
    LLMReaderConfig,
    parse_answers,
)
from rg.reasoning.retriever_reader import (
    NO_CANDIDATES,
    RetrieverReader,
    RetrieverReaderConfig,
    aggregate,
    walk_value,
)

__all__ = [
    "FOLLOW_UP",
    "NO_ANSWER_LINE",
    "NO_CANDIDATES",
    "READ_ANSWERS",
    "Answer",
    "LLMReader",
    "LLMReaderConfig",
    "Reader",
    "Reading",
    "RetrieverReader",
    "RetrieverReaderConfig",
    "aggregate",
    "link_answers",
    "parse_answers",
    "walk_value",
]
