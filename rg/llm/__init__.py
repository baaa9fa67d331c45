"""LLM client layer: the LLMClient protocol, an OpenAI-compatible client, usage ledger, prompts.

The scripted OpenAI-compatible server the tests and benchmarks run against is ``tests/scripted_server.py``
(not part of the package).
"""

from rg.llm.client import (
    RETRYABLE,
    Completion,
    ErrorReason,
    LLMClient,
    LLMError,
    OpenAICompatibleClient,
    complete_sync,
)
from rg.llm.config import LOOPBACK_PLACEHOLDER_KEY, LLMConfig, MissingAPIKeyError
from rg.llm.prompts import PromptRegistry, PromptTemplate
from rg.llm.usage import SIDES, Side, Usage, UsageLedger

__all__ = [
    "LOOPBACK_PLACEHOLDER_KEY",
    "RETRYABLE",
    "SIDES",
    "Completion",
    "ErrorReason",
    "LLMClient",
    "LLMConfig",
    "LLMError",
    "MissingAPIKeyError",
    "OpenAICompatibleClient",
    "PromptRegistry",
    "PromptTemplate",
    "Side",
    "Usage",
    "UsageLedger",
    "complete_sync",
]
