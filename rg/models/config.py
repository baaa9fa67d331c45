"""Configuration of the local OpenAI-compatible chat server (``serve/llm_server.py``).

The same :class:`ChatServerConfig` is the ``args`` block of the Serve config file
(``serve/configs/llm_local.yaml``), the ``key=value`` arguments of
``serve run serve.llm_server:build_app``, and what tests and ``bench.models`` build in code.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from rg.config import Config


class ChatServerConfig(Config):
    """A local chat model behind ``/v1/chat/completions``, its batching and its limits."""

    base: str = Field("smollm2-135m", description="Registered base model name or local model folder.")
    adapter: str | None = Field(None, description="A LoRA adapter folder trained on `base`, merged at load.")
    served_name: str | None = Field(
        None, description="Model name clients send and /v1/models lists (default: `base`, plus `+adapter`)."
    )
    models_dir: str | None = Field(None, description="Models cache (default $RG_MODELS_DIR or ~/.cache/rg/models).")
    max_batch_size: int = Field(8, ge=1, le=256, description="Requests per generate call; 1 turns batching off.")
    batch_wait_timeout_s: float = Field(
        0.05, ge=0, le=5, description="How long a batch waits to fill before it runs, in seconds."
    )
    max_tokens_limit: int = Field(512, ge=1, description="Largest `max_tokens` a request may ask for.")
    default_max_tokens: int = Field(256, ge=1, description="`max_tokens` of a request that sends none.")
    max_ongoing_requests: int = Field(16, ge=1, description="Requests one replica holds at once (≥ max_batch_size).")
    max_queued_requests: int = Field(
        64, ge=1, description="Requests waiting for a replica before new ones get 503 (backpressure)."
    )
    retry_after_s: float = Field(1.0, ge=0, description="Retry-After sent with a 503.")
    min_replicas: int = Field(1, ge=0, description="Autoscaling lower bound.")
    max_replicas: int = Field(1, ge=1, description="Autoscaling upper bound.")
    target_ongoing_requests: float = Field(8.0, gt=0, description="Autoscaling target per replica.")
    num_cpus: float = Field(1.0, gt=0, description="CPUs reserved per replica (also its torch threads, rounded).")
    num_gpus: float = Field(0.0, ge=0, description="GPUs per replica.")
    route_prefix: str = Field("/", description="HTTP prefix of the app; the API is at <prefix>/v1.")
    backend: Literal["transformers"] = Field(
        "transformers", description="Generation backend; on GPU nodes use Ray Serve LLM (see docs/models.md)."
    )

    @model_validator(mode="after")
    def _check_limits(self) -> "ChatServerConfig":
        if self.default_max_tokens > self.max_tokens_limit:
            raise ValueError(f"default_max_tokens ({self.default_max_tokens}) exceeds max_tokens_limit "
                             f"({self.max_tokens_limit}); lower it or raise max_tokens_limit")
        if self.max_ongoing_requests < self.max_batch_size:
            raise ValueError(f"max_ongoing_requests ({self.max_ongoing_requests}) < max_batch_size "
                             f"({self.max_batch_size}): a batch could never fill. Fix: raise max_ongoing_requests")
        if self.min_replicas > self.max_replicas:
            raise ValueError(f"min_replicas ({self.min_replicas}) > max_replicas ({self.max_replicas})")
        return self

    @property
    def model_name(self) -> str:
        """The name clients use for this model."""
        if self.served_name:
            return self.served_name
        if self.adapter is None:
            return self.base
        return f"{self.base}+{self.adapter.rstrip('/').rsplit('/', 1)[-1]}"
