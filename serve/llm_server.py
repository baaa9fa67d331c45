"""A local OpenAI-compatible chat server on Ray Serve: the offline stand-in for a hosted LLM.

Every LLM path of rg (refinement's path selector, the LLM reader, later the Brain) speaks the
OpenAI chat-completions wire; this app serves a local model on that wire, so those paths run
for real with no network::

    RAY_AUTH_MODE=disabled serve run serve/configs/llm_local.yaml        # http://127.0.0.1:8000/v1
    RAY_AUTH_MODE=disabled serve run serve.llm_server:build_app base=smollm2-135m max_batch_size=1

Routes: ``POST /v1/chat/completions`` (``messages``, ``max_tokens``, ``temperature``, ``stop``,
``n=1``; ``usage`` counted with the model's tokenizer), ``GET /v1/models``, ``GET /healthz``.
Concurrent requests are batched into one ``generate`` call by ``@serve.batch`` (size and wait
from the config; size 1 turns batching off). A bad request gets 422 naming the field; a full
queue gets 503 with ``Retry-After`` from Serve's backpressure (``max_queued_requests``).
"""


import asyncio
import time
import uuid
from typing import Any, Literal

import torch
from fastapi import FastAPI, HTTPException
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field
from ray import serve
from ray.serve.config import AutoscalingConfig, BackpressureConfig

from rg.config import validate_config
from rg.models.chat import ChatRequest, ChatResult, LocalChatModel, PromptTooLongError
from rg.models.config import ChatServerConfig

api = FastAPI(title="rg local LLM", description="OpenAI-compatible chat completions from a local model.")


class Message(BaseModel):
    """One chat message."""

    model_config = ConfigDict(extra="forbid")
    role: Literal["system", "user", "assistant"]
    content: str


class ChatCompletionBody(BaseModel):
    """The accepted subset of OpenAI's chat-completions request; anything else is a 422."""

    model_config = ConfigDict(extra="forbid")
    model: str | None = Field(None, description="Must name the served model when given.")
    messages: list[Message] = Field(..., min_length=1)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1, description="Newer name of max_tokens.")
    temperature: float = Field(1.0, ge=0, le=2)
    stop: str | list[str] | None = None
    n: Literal[1] = 1
    stream: Literal[False] = False
    user: str | None = Field(None, description="Accepted and ignored.")

    def to_request(self, default_max_tokens: int, limit: int) -> ChatRequest:
        max_tokens = self.max_completion_tokens or self.max_tokens or default_max_tokens
        if max_tokens > limit:
            raise HTTPException(422, detail=f"max_tokens {max_tokens} exceeds this server's limit of {limit}; "
                                            "lower `max_tokens`")
        stops = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        if len(stops) > 4 or any(not s for s in stops):
            raise HTTPException(422, detail="`stop` takes up to 4 non-empty strings")
        return ChatRequest(messages=[m.model_dump() for m in self.messages], max_tokens=max_tokens,
                           temperature=self.temperature, stop=tuple(stops))


@serve.deployment
@serve.ingress(api)
class LocalLLMServer:
    """One replica: a :class:`LocalChatModel` behind the OpenAI routes, with request batching."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = ChatServerConfig.model_validate(config)
        torch.set_num_threads(max(1, round(self.config.num_cpus)))
        self.model = LocalChatModel.load(self.config.base, self.config.adapter, cache_dir=self.config.models_dir,
                                         name=self.config.model_name)
        self._generate.set_max_batch_size(self.config.max_batch_size)
        self._generate.set_batch_wait_timeout_s(self.config.batch_wait_timeout_s)
        self.created = int(time.time())

    @serve.batch(max_batch_size=8, batch_wait_timeout_s=0.05)
    async def _generate(self, requests: list[ChatRequest]) -> list[ChatResult]:
        # In a worker thread, so the replica keeps accepting requests for the next batch.
        return await asyncio.to_thread(self.model.generate, requests)

    @api.post("/v1/chat/completions")
    async def chat_completions(self, body: ChatCompletionBody) -> JSONResponse:
        if body.model is not None and body.model != self.model.name:
            return JSONResponse(status_code=404, content={"error": {
                "message": f"model {body.model!r} is not served here; GET /v1/models lists {self.model.name!r}",
                "type": "invalid_request_error", "param": "model"}})
        request = body.to_request(self.config.default_max_tokens, self.config.max_tokens_limit)
        try:
            self.model.checked_prompt(request)
        except PromptTooLongError as err:
            raise HTTPException(422, detail=str(err)) from err
        result = await self._generate(request)
        return JSONResponse({
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.model.name,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": result.text},
                         "finish_reason": result.finish_reason}],
            "usage": {"prompt_tokens": result.prompt_tokens, "completion_tokens": result.completion_tokens,
                      "total_tokens": result.prompt_tokens + result.completion_tokens},
        })

    @api.get("/v1/models")
    async def models(self) -> dict[str, Any]:
        return {"object": "list", "data": [{"id": self.model.name, "object": "model", "created": self.created,
                                             "owned_by": "rg"}]}

    @api.get("/healthz")
    async def healthz(self) -> dict[str, str]:
        return {"status": "ok", "model": self.model.name}


def deployment(config: ChatServerConfig) -> serve.Application:
    """The bound app for ``config``: replicas, autoscaling, backpressure and resources applied."""
    return LocalLLMServer.options(
        max_ongoing_requests=config.max_ongoing_requests,
        max_queued_requests=config.max_queued_requests,
        backpressure_config=BackpressureConfig(status_code=503, retry_after_s=config.retry_after_s),
        autoscaling_config=AutoscalingConfig(min_replicas=config.min_replicas, max_replicas=config.max_replicas,
                                             initial_replicas=max(1, config.min_replicas),
                                             target_ongoing_requests=config.target_ongoing_requests),
        ray_actor_options={"num_cpus": config.num_cpus, "num_gpus": config.num_gpus},
    ).bind(config.model_dump())


def build_app(args: dict[str, Any]) -> serve.Application:
    """Typed app builder for ``serve run serve.llm_server:build_app key=value ...`` and Serve configs.

    ``args`` are :class:`ChatServerConfig` fields (command-line strings are typed by pydantic); they
    are validated here, before any replica starts, so a bad key fails ``serve run`` naming it.
    """
    return deployment(validate_config(dict(args), ChatServerConfig, source="serve.llm_server args"))

