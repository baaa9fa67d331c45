"""The dual-tower reasoner inside the QA evaluation (``reasoner: dualtower`` of ``evaluate_qa``).

Each Ray Data actor builds one :class:`DualTowerQA` (the planner and encoder are loaded once) and
answers its batch's inference views concurrently on its event loop (LLM Brain calls overlap).
Every question goes through :meth:`rg.reasoning.dualtower.DualTowerController.aanswer` on its own
subgraph; the result becomes a :class:`rg.evaluation.qa.Prediction` whose usage holds the Brain
calls and tokens, and whose failure says why nothing was verified or which Brain faults sent it
down the Hand-only path. Gold answers never reach the controller.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from rg.data.sample import Sample
from rg.evaluation.qa import Prediction
from rg.graph.path import split_relation
from rg.llm.journal import UsageJournal
from rg.llm.usage import UsageLedger
from rg.privacy.schema import SCHEMA_FILE, KGSchema
from rg.reasoning.dualtower import DualTowerConfig, DualTowerResult, build_controller
from rg.reasoning.dualtower.reading import TunedHand
from rg.retrievers.planner.model import load_planner
from rg.text.encoder import TextEncoder

SCORER = "dualtower"


def load_schema(folder: str | None) -> KGSchema | None:
    """The KG's schema saved in ``folder`` (e.g. a privacy report's output_dir); None when not given.

    Raises:
        FileNotFoundError: naming the key and the fix.
    """
    if folder is None:
        return None
    if not (Path(folder) / SCHEMA_FILE).exists():
        raise FileNotFoundError(f"schema_dir {folder} holds no {SCHEMA_FILE}. Fix: run the privacy report on the "
                                "same KG (it writes one) or set schema_dir: null to derive types per question")
    return KGSchema.load(folder)


def check_brain_view(config: DualTowerConfig, schema_dir: str | None) -> None:
    """Refuse a local Brain whose planner writes other relations than the view it will read.

    A planner trained on the privacy view (``view_schema_dir``) writes the cluster labels of one KG-wide
    schema; it needs ``privacy.mode: privacy`` and that schema, or it ranks labels that never occur. A
    planner trained on raw relations cannot name a cluster. Checkpoints without a recorded view pass.

    Raises:
        ValueError: naming the field and the fix.
    """
    if config.brain.kind != "local" or not config.brain.planner:
        return
    from rg.retrievers.planner.model import read_planner_meta

    folder = config.brain.planner
    extra = read_planner_meta(folder).extra
    view, mode = extra.get("relation_view"), config.privacy.mode
    if view == "privacy" and mode != "privacy":
        raise ValueError(f"dualtower.brain.planner {folder} writes relation clusters (trained with view_schema_dir) but "
                         f"dualtower.privacy.mode is {mode!r}. Fix: set dualtower.privacy.mode=privacy, or use a planner "
                         "trained on raw relations")
    if view == "raw" and mode == "privacy":
        raise ValueError(f"dualtower.brain.planner {folder} writes raw relations, which privacy mode never shows the "
                         "Brain. Fix: train the planner on the cluster view (`--set view_schema_dir=<privacy report "
                         "folder>`, see the header of configs/train_planner_metaqa_kb.yaml) and point "
                         f"dualtower.brain.planner at it")
    if view != "privacy":
        return
    if schema_dir is None:
        raise ValueError(f"dualtower.brain.planner {folder} writes the clusters of a KG-wide schema but schema_dir is "
                         "null, so each question would get clusters of its own. Fix: set schema_dir to the privacy "
                         "report folder the planner was trained with (its view_schema_dir)")
    labels = set(load_schema(schema_dir).clusters.values())
    unknown = sorted({split_relation(r)[0] for r in extra.get("relations", ())} - labels)
    if unknown:
        raise ValueError(f"dualtower.brain.planner {folder} writes {len(unknown)} cluster label(s) that schema_dir "
                         f"{schema_dir} does not have (e.g. {unknown[0]!r}): it was trained on another schema. Fix: set "
                         "schema_dir to the folder the planner was trained with (its view_schema_dir), or retrain it")


class DualTowerQA:
    """Answers inference views with the dual-tower controller.

    Args:
        config: The controller's settings.
        schema_dir: Folder of the KG's saved schema; None derives one from each question's subgraph.
        memory: The ``memory:`` section (``rg.memory.MemoryConfig``); None: no memory.
        memory_actor: Name of the :class:`rg.memory.actor.PoolActor` (namespace ``rg``) that owns the
            memories; the driver creates it (``evaluate_qa``) and every worker uses it.
        journal: An LLM Brain appends each completed call here, as it completes (``rg.llm.journal``).
        planner: An already loaded planner for a local Brain (else ``brain.planner`` is loaded).
        encoder: An already loaded encoder for ``similarity: encoder`` (else the default is loaded).
        hand_planner: An already loaded planner for ``hand.resolve_clusters: planner`` (else ``hand.planner``
            is loaded).
    """

    def __init__(self, config: DualTowerConfig, schema_dir: str | None = None, memory=None,
                 memory_actor: str | None = None, journal: UsageJournal | None = None, planner=None,
                 encoder: TextEncoder | None = None, hand_planner=None) -> None:
        self.config = config
        self.journal = journal
        self.memory = self.edges = None
        if memory is not None:  # rg.memory.MemoryConfig: one named actor owns the memories for every worker
            import ray

            from rg.memory.actor import RemoteEdges, RemotePool
            from rg.reasoning.dualtower.controller import privacy_tag

            actor = ray.get_actor(memory_actor, namespace="rg")
            self.memory = RemotePool(actor, privacy_tag(config)) if memory.experience is not None else None
            self.edges = RemoteEdges(actor) if memory.edges is not None else None
        self.schema = load_schema(schema_dir)
        if planner is None and config.brain.kind == "local" and config.brain.planner:
            planner = load_planner(config.brain.planner)
        self.planner = planner
        hand = config.hand
        if hand_planner is None and hand.resolve_clusters == "planner" and hand.planner:
            hand_planner = load_planner(hand.planner)
        self.hand_planner = hand_planner
        self.encoder = encoder if encoder is not None or not config.needs_encoder else TextEncoder()
        self.tuned = TunedHand(config, self.encoder) if config.hand.kind == "tuned" else None  # loaded once
        self._shared = self._controller(self.schema) if self.schema is not None else None

    def _controller(self, schema: KGSchema):
        return build_controller(self.config, schema, planner=self.planner, encoder=self.encoder, memory=self.memory,
                                edges=self.edges, journal=self.journal, hand_planner=self.hand_planner,
                                tuned=self.tuned)

    async def answer(self, samples: list[Sample]) -> list[Prediction]:
        return list(await asyncio.gather(*(self._one(s) for s in samples)))

    async def _one(self, sample: Sample) -> Prediction:
        started = time.perf_counter()
        controller = self._shared or self._controller(KGSchema.build(sample.triples))
        result = await controller.aanswer(sample.question, sample.q_entities, sample.triples)
        return prediction(sample, result, time.perf_counter() - started)


def prediction(sample: Sample, result: DualTowerResult, seconds: float) -> Prediction:
    """The evaluation's record of one controller result."""
    ledger = UsageLedger.from_dict(result.usage) if result.usage.get("stages") else UsageLedger()
    failure = None
    if not result.answers:
        # unverified / no_topics / ...; verified evidence the reader found no answer in is its own reason
        failure = result.fallback or ("reader_found_nothing" if result.evidence else "no_candidates")
    elif result.faults:
        failure = None  # answered by the Hand alone; the faults are in the usage failures
    return Prediction(id=sample.id, question=sample.question, answers=result.answers,
                      ranked=tuple({"text": a, "score": None} for a in result.answers),
                      reader=f"{SCORER}:{result.brain}", scorer=SCORER, chains=True, failure=failure, usage=ledger.total(), usage_by_side=ledger.by_side(),
                      triples=len(sample.triples), evidence_lines=len(result.evidence),
                      evidence_topics=len(result.topics),
                      evidence_walks=f"{SCORER}:{result.memory['analysis']}" if result.memory else SCORER,
                      seconds=seconds, trace=audit(result), exposure=result.exposure)


def audit(result: DualTowerResult) -> dict[str, Any]:
    """What a prediction records of how the controller answered: its memory notes and, per tree node, the
    indicator, status and kept candidates (anonymised, as the Brain saw them)."""
    nodes = [{k: node.get(k) for k in ("indicator", "status", "mode", "candidates")} for node in result.tree]
    return {"memory": dict(result.memory), "nodes": nodes, "brain_calls": result.brain_calls}
