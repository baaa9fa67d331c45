"""Build a :class:`DualTowerController` from its typed config (the one place choices are made)."""

from __future__ import annotations

from rg.linking.linker import EntityLinker
from rg.llm.journal import UsageJournal
from rg.privacy.schema import KGSchema
from rg.reasoning.dualtower.config import DualTowerConfig
from rg.reasoning.dualtower.brains import BrainFactory, LLMBrainFactory, LocalBrainFactory
from rg.reasoning.dualtower.controller import DualTowerController
from rg.reasoning.dualtower.hand import Hand
from rg.reasoning.dualtower.memory import ExperienceMemory
from rg.reasoning.dualtower.reading import TunedHand
from rg.reasoning.dualtower.similarity import EncoderSimilarity, HybridSimilarity, LexicalSimilarity, Similarity
from rg.retrievers.planner.model import PlannerModel, load_planner
from rg.stores.base import KGStore
from rg.text.encoder import TextEncoder


def build_controller(config: DualTowerConfig, schema: KGSchema, *, store: KGStore | None = None,
                     linker: EntityLinker | None = None, planner: PlannerModel | None = None,
                     encoder: TextEncoder | None = None, memory: ExperienceMemory | None = None,
                     brains: BrainFactory | None = None, edges=None,
                     journal: UsageJournal | None = None, hand_planner: PlannerModel | None = None,
                     tuned: TunedHand | None = None) -> DualTowerController:
    """The controller ``config`` describes.

    Args:
        config: The settings.
        schema: The KG's schema (types and relation clusters).
        store: The raw KG (None: questions bring their triples).
        linker: Topic-entity linker for questions that come without topics.
        planner: kind ``local``: an already loaded planner (else ``brain.planner`` is loaded).
        encoder: similarity ``encoder`` or ``hybrid``: an already loaded encoder (else the default is loaded).
        memory: The experience memory (none: the memory term is 0); ``rg.memory.PoolMemory`` also gates the Brain.
        brains: Makes each question's Brain instead of ``config.brain`` (e.g. a Brain in another
            process that receives only the sealed payloads, as ``serve/`` deploys it); the Brain
            settings are then not read here.
        edges: The edge memory (``rg.memory.EdgeMemory``; none: no replay).
        journal: An LLM Brain and a Hand LLM append each completed call to this usage journal
            (``rg.llm.journal``).
        hand_planner: ``hand.resolve_clusters: planner``: an already loaded raw-relation planner for the Hand
            (else ``hand.planner`` is loaded).
        tuned: ``hand.kind: tuned``: the already loaded tuned reader and retriever (else loaded here, with
            ``encoder``).

    Raises:
        ValueError: for a local Brain with neither ``planner`` nor ``brain.planner``, or a Hand resolving clusters
            with its planner and neither ``hand_planner`` nor ``hand.planner``, naming the fix.
    """
    if brains is None:
        brains = brain_factory(config, planner, journal)
    similarity: Similarity
    if config.similarity == "encoder":
        similarity = EncoderSimilarity(encoder if encoder is not None else TextEncoder())
    elif config.similarity == "hybrid":
        similarity = HybridSimilarity(encoder if encoder is not None else TextEncoder())
    else:
        similarity = LexicalSimilarity()
    if config.hand.resolve_clusters == "planner" and hand_planner is None:
        if config.hand.planner is None:
            raise ValueError("hand.resolve_clusters is 'planner' but hand.planner is not set. Fix: set hand.planner to "
                             "a planner trained on raw relation paths (the plaintext local Brain's) or use "
                             "resolve_clusters: question")
        hand_planner = load_planner(config.hand.planner)
    if config.hand.kind == "tuned" and tuned is None:
        tuned = TunedHand(config, encoder)
    return DualTowerController(config, schema, Hand(config, store, linker, hand_planner), brains, similarity, memory,
                               edges, journal, tuned)


def brain_factory(config: DualTowerConfig, planner: PlannerModel | None = None,
                  journal: UsageJournal | None = None) -> BrainFactory:
    """The Brain factory ``config.brain`` describes (the planner is loaded here unless given); an
    LLM Brain appends each completed call to ``journal`` (``rg.llm.journal``), when given.

    Raises:
        ValueError: for a local Brain with neither ``planner`` nor ``brain.planner``, naming the fix.
    """
    if config.brain.kind == "local":
        if planner is None:
            if config.brain.planner is None:
                raise ValueError("brain.kind is 'local' but brain.planner is not set. Fix: set brain.planner to a "
                                 "planner checkpoint folder (jobs.train with a planner config writes one)")
            planner = load_planner(config.brain.planner)
        return LocalBrainFactory(planner, config.brain.beams, config.brain.indicators)
    assert config.brain.llm is not None  # checked by BrainConfig
    return LLMBrainFactory(config.brain.llm, config.brain.reasks, journal)
