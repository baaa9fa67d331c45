"""rg as a question-answering endpoint on Ray Serve: Ingress → Hand → BrainProxy (issue 22).

Three deployments composed with :class:`~ray.serve.handle.DeploymentHandle` s::

    Ingress (FastAPI) ──answer──▶ HandServer (KG, linker, controller) ──sealed payloads──▶ BrainProxy
                                        └──anonymised traces, edge vectors──▶ MemoryOwner (optional)

Run it (the commands and config fields are in docs/serve.md)::

    RAY_AUTH_MODE=disabled serve run configs/serve_demo.yaml          # http://127.0.0.1:8000/
    RAY_AUTH_MODE=disabled serve deploy configs/serve_demo.yaml       # on a running cluster

Routes: ``POST /v1/answer`` (question, optional topics and options → answers, evidence paths,
what the Brain saw, usage per side, exposure), ``POST /v1/chat/completions`` (OpenAI-compatible:
the last user message is the question), ``GET /v1/models``, ``GET /healthz`` (this replica),
``GET /readyz`` (the Hand and its store, the BrainProxy and, with ``memory``, the MemoryOwner
answer; the memory's record counts), ``GET /`` (the web page),
``GET /docs`` (OpenAPI). Bad input or an unknown option → 422 naming the field; a body over
``max_body_bytes`` → 413; past ``request_timeout_s`` → 504; a full queue → 503 with
``Retry-After``; a Hand replica that dies under a question → the question is sent again (at most
``hand_retries`` times, within the deadline; header ``X-RG-Hand-Attempts``), then 503 with
``Retry-After`` (:mod:`serve.hand_call`). A Brain that cannot be reached gives a Hand-only answer
with ``brain: unavailable``.
"""


import asyncio
import json
import time
import uuid
from pathlib import Path
from typing import Any, Literal

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field
from ray import serve
from ray.exceptions import RayActorError, RayTaskError
from ray.serve.config import AutoscalingConfig, BackpressureConfig
from ray.serve.exceptions import RayServeException
from ray.serve.handle import DeploymentHandle

from rg.config import ConfigError, validate_config
from rg.data.paths import resolve_data_path
from rg.kgedits import EditBatch, EditLogError, read_log
from rg.memory.keys import MemoryKeyError, load_key
from rg.stores.config import MemoryStoreConfig
from serve.auth import Authenticator, require
from serve.brain_proxy import BrainProxy
from serve.config import DeploymentSettings, ServeConfig
from serve.hand import HandServer
from serve.hand_call import ask_hand
from serve.kg_edit_owner import KGEditOwner
from serve.memory_owner import MemoryOwner

PAGE = Path(__file__).with_name("page.html")
READY_TIMEOUT_S = 5.0
ATTEMPTS_HEADER = "X-RG-Hand-Attempts"
"""Response header: calls to the Hand this answer took (2 or more: its replica died and the question was retried)."""

api = FastAPI(title="rg question answering",
              description="PrivGemo-style Hand/Brain answers over a knowledge graph; the Brain sees only "
                          "anonymised, egress-guarded payloads.")


def no_answer_text(fallback: str | None) -> str:
    """The chat reply when the Hand found no answer, naming why."""
    why = fallback or "the verified evidence names no answer"
    return f"No answer found in the knowledge graph ({why})."

class AnswerOptions(BaseModel):
    """Per-request options; any other key is a 422."""

    model_config = ConfigDict(extra="forbid")
    include_tree: bool = Field(False, description="Return the reasoning tree (anonymised indicators and candidates).")
    include_timings: bool = Field(True, description="Return seconds per stage.")


class AnswerBody(BaseModel):
    """``POST /v1/answer``."""

    model_config = ConfigDict(extra="forbid")
    question: str = Field(min_length=1, description="The question in natural language.")
    topics: list[str] = Field(default_factory=list, max_length=16,
                              description="Topic entities as the KG names them; empty: the Hand links them.")
    options: AnswerOptions = Field(default_factory=AnswerOptions)


class Message(BaseModel):
    """One chat message."""

    model_config = ConfigDict(extra="forbid")
    role: Literal["system", "user", "assistant"]
    content: str


class ChatBody(BaseModel):
    """The accepted subset of OpenAI's chat-completions request; anything else is a 422."""

    model_config = ConfigDict(extra="forbid")
    model: str | None = Field(None, description="Must name the served model when given.")
    messages: list[Message] = Field(..., min_length=1)
    max_tokens: int | None = Field(None, ge=1, description="Accepted; answers are short.")
    temperature: float = Field(1.0, ge=0, le=2, description="Accepted; answering is deterministic.")
    n: Literal[1] = 1
    stream: Literal[False] = False
    user: str | None = Field(None, description="Accepted and ignored.")


@api.middleware("http")
async def body_limit(request: Request, call_next):
    """413 for a body over the replica's ``max_body_bytes`` (411 when a POST does not say its length)."""
    limit = request.app.state.max_body_bytes
    if request.url.path.endswith("/v1/kg/edits"):
        limit = request.app.state.max_edit_body_bytes
    if request.method == "POST":
        length = request.headers.get("content-length")
        if length is None:
            return JSONResponse(status_code=411, content={"detail": "send a Content-Length header"})
        if not length.isdigit() or int(length) > limit:
            return JSONResponse(status_code=413, content={"detail": f"body of {length} bytes is over this "
                                                                    f"endpoint's limit of {limit} (max_body_bytes)"})
    return await call_next(request)


async def _resolve(response: Any) -> Any:
    return await response


@serve.deployment
@serve.ingress(api)
class Ingress:
    """The HTTP surface (module docstring).

    Args:
        config: :class:`ServeConfig` as a dict.
        hand: Handle of the Hand deployment.
        brain: Handle of the BrainProxy deployment (for readiness only; answers go through the Hand).
        memory: Handle of the MemoryOwner deployment (for readiness only), None without memory.
        kg_owner: Handle of the KGEditOwner deployment, None without ``kg_edits``.
    """

    def __init__(self, config: dict[str, Any], hand: DeploymentHandle, brain: DeploymentHandle,
                 memory: DeploymentHandle | None = None, kg_owner: DeploymentHandle | None = None) -> None:
        self.config = ServeConfig.model_validate(config)
        self.hand, self.brain, self.memory, self.kg_owner = hand, brain, memory, kg_owner
        api.state.max_body_bytes = self.config.max_body_bytes  # this replica's app (one process per replica)
        api.state.max_edit_body_bytes = self.config.max_edit_body_bytes
        assert self.config.auth is not None  # required by ServeConfig
        api.state.auth = Authenticator(self.config.auth)  # tokens read in this replica's process
        self.page = PAGE.read_text(encoding="utf-8")
        self.created = int(time.time())

    async def _answer(self, question: str, topics: list[str], response: Response) -> dict[str, Any]:
        if len(question) > self.config.max_question_chars:
            raise HTTPException(422, detail=[{"loc": ["body", "question"], "type": "string_too_long",
                                              "msg": f"question has {len(question)} characters; the limit is "
                                                     f"{self.config.max_question_chars} (max_question_chars)"}])
        result, attempts = await ask_hand(lambda: self.hand.answer.remote(question, topics),
                                          timeout_s=self.config.request_timeout_s, retries=self.config.hand_retries,
                                          retry_after_s=self.config.retry_after_s)
        response.headers[ATTEMPTS_HEADER] = str(attempts)
        return result

    @api.post("/v1/answer", dependencies=[Depends(require("ask"))])
    async def answer(self, body: AnswerBody, response: Response) -> dict[str, Any]:
        """Answer one question: answers, evidence, what the Brain saw, usage per side, exposure."""
        result = await self._answer(body.question, body.topics, response)
        out = {
            "question": result["question"], "answers": result["answers"], "evidence": result["evidence"],
            "support": result["support"], "topics": result["topics"], "fallback": result["fallback"],
            "brain": result["brain_status"], "brain_name": result["brain"], "brain_calls": result["brain_calls"],
            "brain_saw": [json.loads(p) for p in result["brain_payloads"]],
            "usage": result["usage_by_side"], "usage_ledger": result["usage"], "exposure": result["exposure"],
            "exposure_totals": result["exposure_totals"],
            "faults": result["faults"], "memory": result["memory"],
            "kg_version": result["kg_version"], "kg_sync": result["kg_sync"],
            "answer_touches_edits": result["answer_touches_edits"],
        }
        if body.options.include_timings:
            out["timings"] = result["timings"]
        if body.options.include_tree:
            out["tree"] = result["tree"]
        return out

    @api.post("/v1/chat/completions", dependencies=[Depends(require("ask"))])
    async def chat_completions(self, body: ChatBody, response: Response) -> JSONResponse:
        """OpenAI-compatible: the last user message is the question; the answers are the reply."""
        if body.model is not None and body.model != self.config.model_name:
            return JSONResponse(status_code=404, content={"error": {
                "message": f"model {body.model!r} is not served here; GET /v1/models lists "
                           f"{self.config.model_name!r}", "type": "invalid_request_error", "param": "model"}})
        users = [m.content for m in body.messages if m.role == "user"]
        if not users or not users[-1].strip():
            raise HTTPException(422, detail=[{"loc": ["body", "messages"], "type": "value_error",
                                              "msg": "messages need a non-empty user message (the question)"}])
        result = await self._answer(users[-1].strip(), [], response)
        answers = result["answers"]
        text = "; ".join(answers) if answers else no_answer_text(result["fallback"])
        brain = result["usage_by_side"]["brain"]
        return JSONResponse({
            "id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
            "model": self.config.model_name,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": brain["prompt_tokens"], "completion_tokens": brain["completion_tokens"],
                      "total_tokens": brain["total_tokens"]},
            "rg": {"answers": answers, "evidence": result["evidence"], "brain": result["brain_status"],
                   "kg_version": result["kg_version"]},
        }, headers={ATTEMPTS_HEADER: response.headers[ATTEMPTS_HEADER]})

    @api.post("/v1/kg/edits", dependencies=[Depends(require("edit"))])
    async def kg_edits(self, body: EditBatch) -> JSONResponse:
        """Apply a batch of ``add``/``delete`` triples (by name or ``{"id": ...}``), all or none: 200 with the KG
        version it made once the batch is durable in the edit log; 422 naming each bad edit and the reason."""
        if self.kg_owner is None:
            raise HTTPException(404, detail="KG edits are off on this endpoint. Fix: set kg_edits "
                                            "(kg_edits.log_path) in the app's config")
        try:
            reply = await asyncio.wait_for(_resolve(self.kg_owner.edit.remote(body.model_dump(mode="json"))),
                                           self.config.request_timeout_s)
        except asyncio.TimeoutError:
            raise HTTPException(504, detail=f"the edit owner gave no reply within {self.config.request_timeout_s} s; "
                                            "the batch may or may not be applied: GET /v1/kg/version") from None
        except (RayServeException, RayActorError, RayTaskError) as err:
            raise HTTPException(503, detail=f"the edit owner is not reachable ({type(err).__name__}); nothing was "
                                            "acknowledged", headers={"Retry-After": str(self.config.retry_after_s)}
                                ) from None
        if "rejected" in reply:
            return JSONResponse(status_code=422, content={"detail": reply["rejected"]})
        record = reply["record"]
        return JSONResponse({
            "version": record["version"], "added": len(record["adds"]), "deleted": len(record["deletes"]),
            "new_entities": record["new_entities"], "new_relations": record["new_relations"],
            "unchanged": record["unchanged"], "memory_forgotten": reply.get("memory_forgotten")})

    @api.get("/v1/kg/version", dependencies=[Depends(require("ask"))])
    async def kg_version(self) -> dict[str, Any]:
        """The KG's newest version (the edit log's), and the edit log's state (a torn record cut on open)."""
        if self.kg_owner is None:
            return {"version": 0, "edits": "off"}
        return {**await _resolve(self.kg_owner.status.remote()), "edits": "on"}

    @api.get("/v1/models", dependencies=[Depends(require("ask"))])
    async def models(self) -> dict[str, Any]:
        return {"object": "list", "data": [{"id": self.config.model_name, "object": "model", "created": self.created,
                                             "owned_by": "rg"}]}

    @api.get("/healthz")
    async def healthz(self) -> dict[str, str]:
        """Liveness of this ingress replica."""
        return {"status": "ok"}

    @api.get("/readyz")
    async def readyz(self) -> Response:
        """503 unless the Hand (and its store), the BrainProxy and the MemoryOwner (when configured) answer
        within a few seconds; ``memory_stats`` gives the memory's record and edge counts."""
        checks = {"hand": self.hand.probe.remote(), "brain": self.brain.name.remote()}
        if self.memory is not None:
            checks["memory"] = self.memory.stats.remote()
        if self.kg_owner is not None:
            checks["kg_edits"] = self.kg_owner.version.remote()
        status: dict[str, Any] = {}
        for name, response in checks.items():
            try:
                value = await asyncio.wait_for(_resolve(response), READY_TIMEOUT_S)
                status[name] = "ok"
                if name == "memory":
                    status["memory_stats"] = value
            except (asyncio.TimeoutError, RayServeException, RayActorError, RayTaskError) as err:
                response.cancel()
                status[name] = f"unavailable: {type(err).__name__}"
        ready = all(status[name] == "ok" for name in checks)
        return JSONResponse(status_code=200 if ready else 503, content={"ready": ready, **status})

    @api.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def page(self) -> HTMLResponse:
        """The web page: ask, see the answer, the evidence and what the Brain saw."""
        return HTMLResponse(self.page)


def _metrics_interval(settings: DeploymentSettings) -> dict[str, float]:
    # passed only when changed: Ray warns that the field is deprecated, yet 2.60's routers and replicas still push
    # their load every metrics_interval_s (the replacement environment variables are not read yet)
    default = AutoscalingConfig.model_fields["metrics_interval_s"].default
    return {} if settings.metrics_interval_s == default else {"metrics_interval_s": settings.metrics_interval_s}


def _options(settings: DeploymentSettings, retry_after_s: int) -> dict[str, Any]:
    return {
        "max_ongoing_requests": settings.max_ongoing_requests,
        "max_queued_requests": settings.max_queued_requests,
        "autoscaling_config": AutoscalingConfig(min_replicas=settings.min_replicas,
                                                max_replicas=settings.max_replicas,
                                                initial_replicas=max(1, settings.min_replicas),
                                                target_ongoing_requests=settings.target_ongoing_requests,
                                                upscale_delay_s=settings.upscale_delay_s,
                                                downscale_delay_s=settings.downscale_delay_s,
                                                look_back_period_s=settings.look_back_period_s,
                                                **_metrics_interval(settings)),
        "ray_actor_options": {"num_cpus": settings.num_cpus},
    }


def deployment(config: ServeConfig) -> serve.Application:
    """The bound app: BrainProxy and Hand bound into the Ingress, each with its replicas and backpressure."""
    # tunables travel only as the Hand's user_config: changing them is a lightweight update (reconfigure on the
    # running replicas), while any change to the bound args restarts replicas
    data = config.model_dump(exclude={"tunables"})
    brain = BrainProxy.options(**_options(config.brain, config.retry_after_s)).bind(
        config.dualtower.model_dump(), config.usage_journal, config.brain_max_batch_size, config.brain_batch_wait_s)
    memory = kg_owner = None
    if config.memory is not None:
        memory = MemoryOwner.options(**_options(config.memory_owner, config.retry_after_s)).bind(
            config.memory.model_dump())
    if config.kg_edits is not None:
        kg_owner = KGEditOwner.options(**_options(config.kg_edit_owner, config.retry_after_s)).bind(data, memory)
    hand = HandServer.options(**_options(config.hand, config.retry_after_s),
                              user_config=config.tunables.model_dump(exclude_none=True)).bind(
        data, brain, memory, kg_owner)
    return Ingress.options(
        **_options(config.ingress, config.retry_after_s),
        backpressure_config=BackpressureConfig(status_code=503, retry_after_s=config.retry_after_s),
    ).bind(data, hand, brain, memory, kg_owner)


def build_app(args: dict[str, Any]) -> serve.Application:
    """Typed app builder for ``serve run configs/serve_demo.yaml`` and ``serve deploy``.

    ``args`` are :class:`ServeConfig` fields, validated here before any replica starts, so a bad
    key fails ``serve run`` naming it and the fix.
    """
    config = validate_config(dict(args), ServeConfig, source="serve.app args")
    check_artifacts(config)
    return deployment(config)


def check_artifacts(config: ServeConfig) -> None:
    """Files the replicas will load exist, so ``serve run`` stops here, naming the key and how to make them.

    Raises:
        ConfigError: for a missing planner, tuned reader or retriever checkpoint, KB file or memory key.
    """
    brain = config.dualtower.brain
    if brain.kind == "local" and (brain.planner is None or not Path(brain.planner).is_dir()):
        raise ConfigError(
            f"dualtower.brain.planner {brain.planner!r} is not a planner checkpoint folder. Fix: train it first — for "
            "configs/serve_demo.yaml run `python -m jobs.pipeline --config configs/demo.yaml` (its plan stage writes "
            "outputs/demo/plan/planner); otherwise `python -m jobs.train` with a planner config — or use an LLM "
            "Brain (dualtower.brain.kind: llm)")
    hand = config.dualtower.hand
    for key, folder, stage in (("reader", hand.reader, "read/reader"), ("retriever", hand.retriever, "train/retriever")):
        if hand.kind == "tuned" and folder is not None and not Path(folder).is_dir():
            raise ConfigError(
                f"dualtower.hand.{key} {folder!r} is not a checkpoint folder. Fix: train it first — for "
                f"configs/serve_demo.yaml run `python -m jobs.pipeline --config configs/demo.yaml` (it writes "
                f"outputs/demo/{stage}) — or use the local reader (dualtower.hand.kind: local)")
    if config.memory is not None and config.memory.persistent:
        try:
            load_key(config.memory.key)  # the owner reads it again in its own process
        except MemoryKeyError as err:
            raise ConfigError(f"{err} (the MemoryOwner replica reads the key from the same place: on a cluster, pass "
                              "the variable with --runtime-env-json or put the key file on every node)") from None
    assert config.auth is not None  # required by ServeConfig
    Authenticator(config.auth)  # every token resolves (the Ingress replica reads them again in its process)
    if config.kg_edits is not None:
        try:
            read_log(config.kg_edits.log_path)  # damage before the end stops serve run here, naming it
        except EditLogError as err:
            raise ConfigError(f"kg_edits.log_path: {err}") from None
    store = config.kg.store
    if isinstance(store, MemoryStoreConfig) and not resolve_data_path(store.kb.path).exists():
        raise ConfigError(f"kg.store.kb.path {store.kb.path!r} does not exist (resolved: "
                          f"{resolve_data_path(store.kb.path)}). Fix: point it at the KB file; `@shared/` is the "
                          "shared data folder ($RG_SHARED_DATA)")
