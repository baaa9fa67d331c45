"""The Hand deployment: the raw KG, the entity linker and the dual-tower controller.

One replica answers one question per :meth:`HandServer.answer` call with
:meth:`rg.reasoning.dualtower.DualTowerController.aanswer`; its Brain is the BrainProxy
deployment, reached only with sealed payloads (:class:`serve.brain_proxy.RemoteBrainFactory`).
The controller's search limits are the deployment's ``user_config``
(:class:`serve.config.Tunables`): :meth:`HandServer.reconfigure` rebuilds the controller around
the already loaded store, linker and encoder, so α, W1, W_max, D_max and thresholds change
without a redeploy. ``check_health`` probes the store, so a replica whose KG is gone is replaced.
"""

from __future__ import annotations

import hashlib
from typing import Any

from ray import serve
from ray.serve.handle import DeploymentHandle

from rg.graph import KnowledgeGraph
from rg.linking import EntityLinker, load_or_build_index
from rg.linking.names import store_names
from rg.llm.usage import Usage, UsageLedger
from rg.privacy.schema import KGSchema
from rg.reasoning.dualtower import DualTowerController, DualTowerResult, build_controller
from rg.reasoning.dualtower.controller import privacy_tag
from rg.reasoning.dualtower.reading import TunedHand
from rg.retrievers.planner.model import load_planner
from rg.stores.base import KGStore
from rg.stores.config import build_store
from rg.stores.memory import MemoryStore
from rg.text.encoder import TextEncoder
from serve.brain_proxy import UNAVAILABLE, RemoteBrainFactory
from serve.config import ServeConfig, Tunables
from serve.memory_owner import ServeEdges, ServeMemory

SIDES = ("hand", "brain")
BRAIN_DOWN = frozenset({UNAVAILABLE, "connection", "timeout", "server_error", "rate_limited"})
"""Fault reasons that mean the Brain could not be reached (as opposed to a reply it got wrong)."""


def load_kg(config: ServeConfig) -> tuple[KGStore, KGSchema]:
    """The Hand's store and the KG's schema."""
    source = config.kg
    if source.synthetic is not None:
        from rg.data.synthetic import generate

        kg = generate(source.synthetic)
        store: KGStore = MemoryStore(KnowledgeGraph.from_triples(kg.triples, dedup=True))
        schema = KGSchema.build(kg.triples, kg.entity_types)
    else:
        assert source.store is not None  # checked by KGSource
        store = build_store(source.store)
        schema = None
    if source.schema_dir is not None:
        schema = KGSchema.load(source.schema_dir)
    elif schema is None:
        assert isinstance(store, MemoryStore)  # a SPARQL store needs schema_dir (checked by KGSource)
        schema = KGSchema.build(store.kg.triples())
    return store, schema


def load_linker(config: ServeConfig, store: KGStore, encoder: TextEncoder | None) -> EntityLinker | None:
    """The entity linker of ``config.linking`` (its name index built once in ``index_dir``), or None."""
    if config.linking is None:
        return None
    linking = config.linking
    if config.tunables.linking_threshold is not None:
        linking = linking.model_copy(update={"threshold": config.tunables.linking_threshold})
    dense = linking.dense != "off"
    if dense and encoder is None:
        encoder = TextEncoder(linking.encoder)
    key = hashlib.sha256(repr(config.kg.model_dump()).encode()).hexdigest()[:16]
    assert linking.index_dir is not None  # checked by ServeConfig
    index, _ = load_or_build_index(linking.index_dir, lambda: store_names(store, linking.unnamed_pattern),
                                   encoder if dense else None, key)
    return EntityLinker(index, linking, encoder if dense else None)


def brain_status(result: DualTowerResult) -> str:
    """``ok``: every Brain call answered; ``unavailable``: the Brain could not be reached and the Hand
    answered alone; ``fallback``: the Brain replied but some reply was unusable."""
    if not result.faults:
        return "ok"
    if any(f.reason in BRAIN_DOWN for f in result.faults):
        return UNAVAILABLE
    return "fallback"


@serve.deployment
class HandServer:
    """The trusted tower of the endpoint (module docstring).

    Args:
        config: :class:`ServeConfig` as a dict (validated again here, in the replica).
        brain: Handle of the BrainProxy deployment.
        memory: Handle of the MemoryOwner deployment (None without ``memory``).
    """

    def __init__(self, config: dict[str, Any], brain: DeploymentHandle, memory: DeploymentHandle | None = None) -> None:
        self.config = ServeConfig.model_validate(config)
        self.store, self.schema = load_kg(self.config)
        dt = self.config.dualtower
        self.encoder = TextEncoder(self.config.encoder) if dt.needs_encoder else None
        wants_planner = dt.hand.resolve_clusters == "planner" and dt.hand.planner
        self.hand_planner = load_planner(dt.hand.planner) if wants_planner else None  # once, not per reconfigure
        self.linker = load_linker(self.config, self.store, self.encoder)
        self.tuned = TunedHand(dt, self.encoder) if dt.hand.kind == "tuned" else None  # once, not per reconfigure
        self.brains = RemoteBrainFactory(brain, dt.brain.kind, self.config.brain_timeout_s)
        self.memory = self.edges = None
        spec = self.config.memory
        if memory is not None and spec is not None:
            timeout = self.config.memory_timeout_s
            self.memory = ServeMemory(memory, privacy_tag(dt), timeout) if spec.experience is not None else None
            self.edges = ServeEdges(memory, timeout) if spec.edges is not None else None
        self.tunables = self.config.tunables
        self.controller = self._controller(self.tunables)

    def _controller(self, tunables: Tunables) -> DualTowerController:
        return build_controller(self.config.controller_config(tunables), self.schema, store=self.store,
                                linker=self.linker, encoder=self.encoder, brains=self.brains, memory=self.memory,
                                edges=self.edges, hand_planner=self.hand_planner, tuned=self.tuned)

    def reconfigure(self, user_config: dict[str, Any]) -> None:
        """Serve's ``user_config`` hook: new search limits on this running replica."""
        tunables = Tunables.model_validate(user_config or {})
        self.controller = self._controller(tunables)  # fails (replica keeps the old one) on a bad combination
        if self.linker is not None and tunables.linking_threshold is not None:
            self.linker.config = self.linker.config.model_copy(update={"threshold": tunables.linking_threshold})
        self.tunables = tunables

    async def answer(self, question: str, topics: list[str]) -> dict[str, Any]:
        """One question's result (:meth:`DualTowerResult.to_dict`) with ``brain_status``."""
        result = await self.controller.aanswer(question, topics)
        sides = UsageLedger.from_dict(result.usage).by_side() if result.usage.get("stages") else {}
        by_side = {side: sides.get(side, Usage()).to_dict() for side in SIDES}
        return {**result.to_dict(), "brain_status": brain_status(result), "usage_by_side": by_side}

    def settings(self) -> dict[str, Any]:
        """The controller's limits in force (what ``user_config`` set)."""
        c = self.controller.config
        return {"alpha": c.alpha, "w1": c.w1, "w_max": c.w_max, "d_max": c.d_max, "max_failures": c.max_failures,
                "max_steps": c.max_steps}

    def probe(self) -> None:
        """Raise when the store does not answer (a SPARQL endpoint that is gone raises ``StoreError``)."""
        self.store.has_entity("rg:readiness-probe")

    def check_health(self) -> None:
        """Serve's periodic health check."""
        self.probe()
