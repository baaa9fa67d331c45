"""Reasoning at question time: readers that answer from evidence (retriever scores, an LLM, the tuned reader),
the depth predictor (``hops``), the traversal reasoner (``traverse``) and the dual-tower controller of the
Hand and the Brain (``dualtower``; the memories plug into its ports in ``dualtower.memory``)."""

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
