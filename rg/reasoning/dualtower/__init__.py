"""PrivGemo's dual-tower reasoning: a trusted Hand over the raw KG, an untrusted Brain over an
anonymised view (Tan et al., PrivGemo, §4.2–4.3, Algorithms 2–5).

Modules, one purpose each: ``config`` (typed settings), ``payload`` (what the Brain may receive,
sealed by the egress guard), ``brain`` (the protocol and its results), ``prompts`` (the LLM Brain's
templates and reply schemas), ``llm_brain`` / ``local_brain`` (the two Brains), ``hand`` (topics,
subgraph, view, grounding, sufficiency, evidence), ``explore`` (tree-structured BiBFS on the view),
``similarity`` (DRM), ``memory`` (the experience hook), ``prune`` (the fuzzy filter), ``tree`` (the
reasoning tree and its policies), ``phases`` (refine mode's follow-up, predict mode's targets),
``controller`` (``answer(question)``), ``result``, ``build``::

    controller = build_controller(config, schema, store=MemoryStore(kg), planner=load_planner(path))
    result = controller.answer("who directed Heat", topics=["Heat"])
    result.answers, result.evidence, result.brain_payloads, result.usage, result.faults
"""

from rg.reasoning.dualtower.brain import (
    Analysis,
    Brain,
    BrainError,
    Choice,
    ExploringBrain,
    FollowUp,
    Indicator,
    Prediction,
)
from rg.reasoning.dualtower.build import build_controller
from rg.reasoning.dualtower.config import BrainConfig, DualTowerConfig
from rg.reasoning.dualtower.brains import LLMBrainFactory, LocalBrainFactory
from rg.reasoning.dualtower.controller import DualTowerController
from rg.reasoning.dualtower.hand import Hand, HandError
from rg.reasoning.dualtower.llm_brain import LLMBrain
from rg.reasoning.dualtower.local_brain import LocalBrain, view_relation_path
from rg.reasoning.dualtower.memory import ExperienceMemory, NoMemory
from rg.reasoning.dualtower.payload import (
    AnalysisPayload,
    FollowUpPayload,
    PredictionPayload,
    SealedPayload,
    SelectionPayload,
    seal,
)
from rg.reasoning.dualtower.result import BrainFault, DualTowerResult
from rg.reasoning.dualtower.similarity import EncoderSimilarity, LexicalSimilarity, Similarity

__all__ = [
    "Analysis", "AnalysisPayload", "Brain", "BrainConfig", "BrainError", "BrainFault", "Choice", "DualTowerConfig",
    "DualTowerController", "DualTowerResult", "EncoderSimilarity", "ExperienceMemory", "ExploringBrain", "FollowUp",
    "FollowUpPayload", "Hand", "HandError", "Indicator", "LLMBrain", "LLMBrainFactory", "LexicalSimilarity",
    "LocalBrain", "LocalBrainFactory", "NoMemory", "Prediction", "PredictionPayload", "SealedPayload",
    "SelectionPayload", "Similarity", "build_controller", "seal", "view_relation_path",
]
