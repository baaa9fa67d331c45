"""Typed settings of the question-answering endpoint (:mod:`serve.app`), validated once in ``build_app``.

One :class:`ServeConfig` holds the dual-tower controller's settings, where the raw KG comes from,
optional entity linking, the limits of the HTTP surface (body size, deadline, Retry-After) and,
per deployment (ingress, Hand, BrainProxy), replicas, autoscaling and backpressure. The Hand's
:class:`Tunables` are its Serve ``user_config``: changing them in a redeployed config file
reconfigures running replicas without restarting them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from pydantic import Field, field_validator, model_validator

from rg.config import Config
from rg.data.synthetic import SyntheticConfig
from rg.kgedits.config import KGEditsConfig
from rg.linking.config import LinkingConfig
from rg.memory.config import MemoryConfig
from rg.reasoning.dualtower.config import DualTowerConfig
from rg.stores.config import MemoryStoreConfig, SparqlStoreConfig
from rg.text.encoder import EncoderConfig
from serve.auth import AuthConfig


class DeploymentSettings(Config):
    """Replicas, autoscaling, backpressure and resources of one deployment."""

    min_replicas: int = Field(1, ge=0, le=64, description="Autoscaling floor (0 lets it scale to zero).")
    max_replicas: int = Field(1, ge=1, le=64, description="Autoscaling ceiling.")
    target_ongoing_requests: float = Field(2.0, gt=0, description="Autoscaling target of requests per replica.")
    max_ongoing_requests: int = Field(8, ge=1, le=1000, description="Requests one replica runs at once.")
    max_queued_requests: int = Field(
        32, ge=-1, le=100_000,
        description="Requests waiting for a replica before callers get backpressure (HTTP 503); -1: unbounded.")
    num_cpus: float = Field(1.0, ge=0, description="CPUs reserved per replica (0 for tests on a small machine).")
    upscale_delay_s: float = Field(30.0, ge=0, description="Load must stay above target this long before scaling up.")
    downscale_delay_s: float = Field(600.0, ge=0, description="Load must stay below target this long before "
                                                              "scaling down.")
    look_back_period_s: float = Field(30.0, gt=0, le=3600, description="Window the autoscaler averages the load "
                                                                      "over.")
    metrics_interval_s: float = Field(
        10.0, gt=0, le=600, description="How often load is recorded and pushed to the autoscaler (Ray 2.60 still reads "
                                        "this AutoscalingConfig field, though it marks it deprecated); keep it below "
                                        "look_back_period_s.")

    @model_validator(mode="after")
    def _range(self) -> "DeploymentSettings":
        if self.min_replicas > self.max_replicas:
            raise ValueError(f"min_replicas ({self.min_replicas}) > max_replicas ({self.max_replicas}). "
                             "Fix: raise max_replicas or lower min_replicas")
        if self.metrics_interval_s >= self.look_back_period_s:
            raise ValueError(f"metrics_interval_s ({self.metrics_interval_s}) >= look_back_period_s "
                             f"({self.look_back_period_s}): the autoscaler would average over less than one sample. "
                             "Fix: lower metrics_interval_s or raise look_back_period_s")
        return self


class Tunables(Config):
    """The Hand's ``user_config``: search limits changed on running replicas (``reconfigure``).

    Each field left unset keeps the value of ``dualtower``.
    """

    alpha: Optional[float] = Field(None, ge=0.0, le=1.0, description="α of the pruning score.")
    w1: Optional[int] = Field(None, ge=1, le=5000, description="W1: candidates kept by the fuzzy DRM filter.")
    w_max: Optional[int] = Field(None, ge=1, le=50, description="W_max: candidates kept after Brain selection.")
    d_max: Optional[int] = Field(None, ge=1, le=6, description="D_max: most hops from a topic entity.")
    max_failures: Optional[int] = Field(None, ge=1, le=10, description="Failed verifications before pruning a node.")
    max_steps: Optional[int] = Field(None, ge=1, le=50, description="Verification loops per node.")
    linking_threshold: Optional[float] = Field(
        None, gt=0.0, le=1.0, description="Lowest cosine similarity of a dense entity-linking match.")

    def controller_updates(self) -> dict[str, float | int]:
        """The ``dualtower`` fields these tunables set."""
        return {k: v for k, v in self.model_dump().items() if v is not None and k != "linking_threshold"}


class KGSource(Config):
    """Where the Hand's raw KG comes from: exactly one of ``synthetic`` or ``store``."""

    synthetic: Optional[SyntheticConfig] = Field(
        None, description="Generate the synthetic KG in the Hand (offline, seconds; the demo's KG for the same seed).")
    store: Optional[MemoryStoreConfig | SparqlStoreConfig] = Field(
        None, description="A KG store: `{kind: memory, kb: {path, format}}` or `{kind: sparql, endpoint, ...}`.")
    schema_dir: Optional[str] = Field(
        None, description="Folder of the KG's saved schema (the privacy report writes one); None derives it from "
                          "the KG (memory and synthetic KGs only).")

    @model_validator(mode="after")
    def _one(self) -> "KGSource":
        given = [k for k in ("synthetic", "store") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(f"set exactly one of kg.synthetic, kg.store (got {given or 'none'}). "
                             "Fix: keep the one KG source")
        if isinstance(self.store, SparqlStoreConfig) and self.schema_dir is None:
            raise ValueError("kg.store is a SPARQL endpoint but kg.schema_dir is not set: the schema cannot be "
                             "derived from a remote store. Fix: run the privacy report on the KG and set kg.schema_dir")
        return self


class ServeConfig(Config):
    """The endpoint (:func:`serve.app.build_app`)."""

    dualtower: DualTowerConfig = Field(default_factory=DualTowerConfig, description="The Hand/Brain controller.")
    kg: KGSource = Field(description="The Hand's raw KG.")
    encoder: EncoderConfig = Field(
        default_factory=EncoderConfig, description="The Hand's sentence encoder (the DRM, the tuned Hand's retriever, "
        "dense linking). Its `cache_dir` (e.g. the pipeline's `outputs/encoder_cache`, which holds the KG's names "
        "that training encoded) spares encoding a subgraph's names per question: a second or more each on a CPU."
    )
    linking: Optional[LinkingConfig] = Field(
        None, description="Entity linking for questions sent without topics (needed by /v1/chat/completions); "
                          "`index_dir` must be set. None: questions must bring `topics`.")
    memory: Optional[MemoryConfig] = Field(
        None, description="The experience pool and edge memory (rg.memory.MemoryConfig), owned by one MemoryOwner "
                          "replica that every Hand replica calls; sealed files need the AES-GCM key in the replicas' "
                          "environment (memory.key). None: no memory (the pruning score's memory term is 0).")
    memory_owner: DeploymentSettings = Field(
        default_factory=lambda: DeploymentSettings(max_ongoing_requests=64, max_queued_requests=256, num_cpus=0.1),
        description="The MemoryOwner deployment: exactly one replica (the sealed files have one writer).")
    memory_timeout_s: float = Field(
        5.0, gt=0, le=600, description="Deadline of one memory call from the Hand; then the question goes on without "
                                       "memory (noted in the answer's `memory`).")
    auth: Optional[AuthConfig] = Field(
        None, description="Who may call the endpoint: bearer tokens with scopes (`ask`, `edit`) or, said explicitly, "
                          "`mode: off` (loopback clients only). Required: an endpoint never runs open by default.")
    kg_edits: Optional[KGEditsConfig] = Field(
        None, description="Live KG edits (POST /v1/kg/edits): the edit log, batch limits, new relations. None: the KG "
                          "is read-only and the route answers 404.")
    kg_edit_owner: DeploymentSettings = Field(
        default_factory=lambda: DeploymentSettings(max_ongoing_requests=64, max_queued_requests=256, num_cpus=0.1),
        description="The KGEditOwner deployment (the edit log's one writer): exactly one replica.")
    kg_sync_timeout_s: float = Field(
        2.0, gt=0, le=60, description="Deadline of a Hand's call for the edits it has not applied yet, made before each "
                                      "question; past it the question is answered on the version the replica has "
                                      "(its `kg_sync` says `unavailable`).")
    max_edit_body_bytes: int = Field(1_000_000, ge=256, le=100_000_000,
                                     description="Larger POST /v1/kg/edits bodies get 413.")
    tunables: Tunables = Field(default_factory=Tunables, description="The Hand's user_config (see Tunables).")
    model_name: str = Field("rg-dualtower", min_length=1, description="Model id of /v1/chat/completions.")
    max_body_bytes: int = Field(16_384, ge=256, le=10_000_000, description="Larger request bodies get 413.")
    max_question_chars: int = Field(1_000, ge=1, le=100_000, description="Longer questions get 422.")
    request_timeout_s: float = Field(30.0, gt=0, le=600, description="Deadline of one answer; then 504.")
    brain_timeout_s: float = Field(
        20.0, gt=0, le=600, description="Deadline of one Brain call from the Hand; then the Hand goes on alone.")
    retry_after_s: int = Field(1, ge=0, le=3600, description="Retry-After of a 503 (backpressure).")
    hand_retries: int = Field(
        1, ge=0, le=3, description="Times a question is sent again when its Hand replica died under it (answering is "
                                   "read-only, so a retry is safe), within request_timeout_s; then 503.")
    ingress: DeploymentSettings = Field(
        default_factory=lambda: DeploymentSettings(max_ongoing_requests=64, max_queued_requests=128, num_cpus=0.1),
        description="The FastAPI ingress.")
    hand: DeploymentSettings = Field(default_factory=DeploymentSettings, description="The Hand (KG, linker, controller).")
    brain: DeploymentSettings = Field(default_factory=DeploymentSettings, description="The BrainProxy.")
    brain_max_batch_size: int = Field(
        8, ge=1, le=256, description="Local Brain: most question analyses the BrainProxy decodes together "
                                     "(@serve.batch); 1 turns batching off.")
    brain_batch_wait_s: float = Field(
        0.005, ge=0, le=1, description="Local Brain: how long the first analysis of a batch waits for more.")
    usage_journal: Optional[str] = Field(
        None, description="Usage journal (rg.llm.journal, JSON Lines) the BrainProxy appends each completed LLM "
                          "Brain call to, one run id per replica; on a cluster, a path every Brain node can write "
                          "(a relative one is made absolute where the app is built, e.g. the directory of `serve run`). None: no journal.")

    @field_validator("usage_journal")
    @classmethod
    def _absolute_journal(cls, value: Optional[str]) -> Optional[str]:
        return str(Path(value).resolve()) if value else None  # replicas run in other working directories

    @field_validator("kg_edits")
    @classmethod
    def _absolute_edit_log(cls, value: Optional[KGEditsConfig]) -> Optional[KGEditsConfig]:
        if value is None:
            return None
        return value.model_copy(update={"log_path": str(Path(value.log_path).expanduser().resolve())})

    @field_validator("encoder")
    @classmethod
    def _absolute_encoder_cache(cls, value: EncoderConfig) -> EncoderConfig:
        if value.cache_dir is None:
            return value
        return value.model_copy(update={"cache_dir": str(Path(value.cache_dir).expanduser().resolve())})

    @field_validator("memory")
    @classmethod
    def _absolute_memory(cls, value: Optional[MemoryConfig]) -> Optional[MemoryConfig]:
        """Memory files and the key file made absolute where the app is built (the owner runs elsewhere)."""
        if value is None:
            return None
        parts = {}
        for name in ("experience", "edges"):
            part = getattr(value, name)
            if part is not None and part.path is not None:
                parts[name] = part.model_copy(update={"path": str(Path(part.path).resolve())})
        if value.key.file is not None:
            parts["key"] = value.key.model_copy(update={"file": str(Path(value.key.file).resolve())})
        return value.model_copy(update=parts)

    @model_validator(mode="after")
    def _linking(self) -> "ServeConfig":
        if self.auth is None:
            raise ValueError("auth is not set: the endpoint never runs open by default. Fix: add auth.tokens (e.g. "
                             "[{name: ops, scopes: [ask, edit], env: RG_TOKEN}]) or, for a loopback-only endpoint, "
                             "auth: {mode: off}")
        if self.kg_edit_owner.min_replicas != 1 or self.kg_edit_owner.max_replicas != 1:
            raise ValueError(f"kg_edit_owner runs {self.kg_edit_owner.min_replicas}..{self.kg_edit_owner.max_replicas} "
                             "replicas, but the edit log has exactly one writer. Fix: set kg_edit_owner.min_replicas "
                             "and kg_edit_owner.max_replicas to 1")
        if self.linking is not None and self.linking.index_dir is None:
            raise ValueError("linking is set but linking.index_dir is not. Fix: set linking.index_dir to a folder "
                             "(the Hand builds the name index there once, then reloads it)")
        if self.memory_owner.min_replicas != 1 or self.memory_owner.max_replicas != 1:
            raise ValueError(f"memory_owner runs {self.memory_owner.min_replicas}..{self.memory_owner.max_replicas} "
                             "replicas, but the sealed memory files have exactly one writer. Fix: set "
                             "memory_owner.min_replicas and memory_owner.max_replicas to 1")
        if self.memory is not None and self.memory.rounds != 1:
            raise ValueError("memory.rounds is an evaluate_qa setting (passes over a question file); an endpoint "
                             "answers each question once. Fix: leave memory.rounds out")
        if self.memory is not None and self.memory.baseline:
            raise ValueError("memory.baseline is an evaluate_qa setting (a second pass without memory); an endpoint "
                             "answers each question once. Fix: leave memory.baseline out")
        if self.brain_timeout_s >= self.request_timeout_s:
            raise ValueError(f"brain_timeout_s ({self.brain_timeout_s}) >= request_timeout_s "
                             f"({self.request_timeout_s}): a slow Brain would time the whole request out instead of "
                             "the Hand going on alone. Fix: lower brain_timeout_s")
        return self

    def controller_config(self, tunables: Tunables | None = None) -> DualTowerConfig:
        """``dualtower`` with ``tunables`` (default: the configured ones) applied and re-validated."""
        updates = (tunables or self.tunables).controller_updates()
        return DualTowerConfig.model_validate({**self.dualtower.model_dump(), **updates})
