"""Configuration of an OpenAI-compatible LLM endpoint (OpenAI, vLLM, Ollama, Ray Serve LLM).

One :class:`LLMConfig` describes one endpoint and the calling policy (timeout, bounded retries
with exponential backoff and full jitter, in-flight limit) of a client that uses it. The API key
is never written in a config file: it is read from the environment variable named by
``api_key_env`` (or given programmatically as ``api_key``, a ``SecretStr`` that never prints)::

    cfg = LLMConfig(base_url="http://127.0.0.1:8000/v1", model="Qwen/Qwen2.5-7B-Instruct")
    key = cfg.resolve_api_key()  # $OPENAI_API_KEY, or a placeholder for a loopback endpoint
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Mapping
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, field_validator, model_validator

from rg.config import Config
from rg.llm.usage import Side

LOOPBACK_PLACEHOLDER_KEY = "rg-loopback-no-key"
"""Key sent to a loopback endpoint when none is configured (local servers ignore it)."""

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class MissingAPIKeyError(ValueError):
    """No API key is configured for a non-loopback endpoint; the message names the fix."""


class LLMConfig(Config):
    """One OpenAI-compatible chat-completions endpoint and how a client calls it."""

    base_url: str = Field(
        ...,
        description="Endpoint root including the API prefix, e.g. 'http://127.0.0.1:8000/v1' for a local vLLM.",
    )
    model: str = Field(..., min_length=1, description="Model name sent with every request.")
    api_key_env: str = Field(
        "OPENAI_API_KEY", description="Name of the environment variable that holds the API key."
    )
    api_key: SecretStr | None = Field(
        None, description="The key itself (programmatic use only; never logged). Overrides api_key_env."
    )
    timeout_s: float = Field(60.0, gt=0, description="Deadline of one HTTP attempt, in seconds.")
    max_retries: int = Field(
        3, ge=0, le=10, description="Retries after the first attempt, on 429, 5xx, timeouts and connection errors only."
    )
    backoff_s: float = Field(
        1.0, ge=0, description="Base of the exponential backoff: retry k sleeps uniform(0, backoff_s * 2**k)."
    )
    max_backoff_s: float = Field(30.0, ge=0, description="Upper bound of one backoff sleep (also caps Retry-After).")
    max_concurrency: int = Field(8, ge=1, description="In-flight HTTP requests per client (per event loop).")
    temperature: float = Field(0.0, ge=0, le=2, description="Sampling temperature.")
    max_tokens: int | None = Field(512, gt=0, description="Completion-token limit per call; None sends no limit.")
    side: Side = Field("hand", description="Tower the calls are booked to in the usage ledger: 'hand' or 'brain'.")

    @field_validator("base_url")
    @classmethod
    def _check_base_url(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(
                "base_url must be an http(s) URL with a host, e.g. 'http://127.0.0.1:8000/v1'"
            )
        return value.rstrip("/")

    @field_validator("api_key_env")
    @classmethod
    def _check_env_name(cls, value: str) -> str:
        if not _ENV_NAME.match(value):
            raise ValueError(
                "api_key_env is the *name* of an environment variable (letters, digits, '_'), "
                "e.g. 'OPENAI_API_KEY', not the key itself"
            )
        return value

    @model_validator(mode="after")
    def _check_backoff_bounds(self) -> LLMConfig:
        if self.max_backoff_s < self.backoff_s:
            raise ValueError(
                f"max_backoff_s ({self.max_backoff_s}) is smaller than backoff_s ({self.backoff_s}); "
                "raise max_backoff_s or lower backoff_s"
            )
        return self

    @property
    def is_loopback(self) -> bool:
        """True when ``base_url`` points at this machine (localhost, 127.0.0.0/8, ::1)."""
        host = urlsplit(self.base_url).hostname or ""
        if host == "localhost":
            return True
        try:
            return ipaddress.ip_address(host).is_loopback
        except ValueError:
            return False

    def resolve_api_key(self, environ: Mapping[str, str] | None = None) -> str:
        """The key to send: ``api_key``, else ``$<api_key_env>``, else a loopback placeholder.

        Args:
            environ: Environment to read (default ``os.environ``; tests pass a dict).

        Raises:
            MissingAPIKeyError: If no key is configured and the endpoint is not on loopback.
        """
        if self.api_key is not None and self.api_key.get_secret_value():
            return self.api_key.get_secret_value()
        env = os.environ if environ is None else environ
        value = env.get(self.api_key_env, "")
        if value:
            return value
        if self.is_loopback:
            return LOOPBACK_PLACEHOLDER_KEY
        raise MissingAPIKeyError(
            f"no API key for {self.base_url}: environment variable {self.api_key_env} is unset or empty. "
            f"Fix: export {self.api_key_env}=<key>, or set `api_key_env` to the variable that holds it"
        )


def hand_side_only(llm: LLMConfig, stage: str) -> LLMConfig:
    """Refuse a Brain-side endpoint for a stage whose prompts hold raw KG text.

    Raises:
        ValueError: naming ``llm.side`` and the fix.
    """
    if llm.side == "brain":
        raise ValueError(
            f"llm.side is 'brain', but {stage} sends raw evidence and names to its endpoint, which only a "
            "trusted local model may see. Fix: set `llm.side: hand` and point it at a local model"
        )
    return llm
