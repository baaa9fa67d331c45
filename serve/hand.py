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

import asyncio
import hashlib
from contextlib import nullcontext
from typing import Any

from ray import serve
from ray.serve.handle import DeploymentHandle

from rg.kgedits import EditRecord
from rg.kgedits.editor import editable_store
from rg.linking import EntityLinker, load_or_build_index
from rg.linking.names import NamedEntity, store_names
from rg.llm.usage import Usage, UsageLedger
from rg.reasoning.dualtower import DualTowerController, DualTowerResult, build_controller
from rg.reasoning.dualtower.controller import privacy_tag
from rg.reasoning.dualtower.reading import TunedHand
from rg.retrievers.planner.model import load_planner
from rg.stores.base import KGStore
from rg.text.encoder import TextEncoder
from serve.brain_proxy import UNAVAILABLE, RemoteBrainFactory
from serve.config import ServeConfig, Tunables
from serve.kg_source import load_kg
from serve.memory_owner import UNREACHABLE, ServeEdges, ServeMemory

SIDES = ("hand", "brain")
BRAIN_DOWN = frozenset({UNAVAILABLE, "connection", "timeout", "server_error", "rate_limited"})
"""Fault reasons that mean the Brain could not be reached (as opposed to a reply it got wrong)."""


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


async def _settle(response: Any) -> Any:
    return await response


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
        kg_owner: Handle of the KGEditOwner deployment (None without ``kg_edits``): before each question the
            replica applies the edits it has not applied yet, in order, and answers on one pinned version.
    """

    def __init__(self, config: dict[str, Any], brain: DeploymentHandle, memory: DeploymentHandle | None = None,
                 kg_owner: DeploymentHandle | None = None) -> None:
        self.config = ServeConfig.model_validate(config)
        self.store, self.schema = load_kg(self.config)
        self.kg_owner = kg_owner
        if self.config.kg_edits is not None:
            self.store = editable_store(self.store, writer=False)  # the owner alone writes a shared triple store
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
        """One question's result (:meth:`DualTowerResult.to_dict`) with ``brain_status``, answered on one KG
        version (``kg_version``) after catching up with the edit log (``kg_sync``)."""
        sync = await self.sync()
        pin = self.store.pin() if hasattr(self.store, "pin") else nullcontext(None)
        with pin as snapshot:
            result = await self.controller.aanswer(question, topics)
        sides = UsageLedger.from_dict(result.usage).by_side() if result.usage.get("stages") else {}
        by_side = {side: sides.get(side, Usage()).to_dict() for side in SIDES}
        # drift: an answer that is an end of a triple added since version 0 may rest on a fact the retrievers and
        # the planner never saw (an upper bound: that entity may also be answered through an old fact)
        added = snapshot.added_names if snapshot is not None else frozenset()
        return {**result.to_dict(), "brain_status": brain_status(result), "usage_by_side": by_side,
                "kg_version": snapshot.version if snapshot is not None else 0, "kg_sync": sync,
                "answer_touches_edits": any(a in added for a in result.answers)}

    async def sync(self) -> str:
        """Apply the edits this replica has not applied yet, in order: ``ok``, ``static`` (no edits configured) or
        ``unavailable: ...`` (the owner did not answer within ``kg_sync_timeout_s``; the replica's version stands)."""
        if self.kg_owner is None:
            return "static"
        response = self.kg_owner.since.remote(self.store.version)
        try:
            records = await asyncio.wait_for(_settle(response), self.config.kg_sync_timeout_s)
        except asyncio.TimeoutError:
            response.cancel()
            return f"unavailable: no reply within {self.config.kg_sync_timeout_s} s"
        except UNREACHABLE as err:
            return f"unavailable: {type(err).__name__}"
        for data in records:
            record = EditRecord.from_dict(data)
            if self.store.apply(record) and record.new_entities and self.linker is not None:
                self.linker.learn([NamedEntity(i, n) for i, n in sorted(record.new_entities.items())])
        return "ok"

    def kg_version(self) -> int:
        """The newest KG version this replica has applied."""
        return getattr(self.store, "version", 0)

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
