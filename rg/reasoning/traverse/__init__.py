"""ReMindRAG's LLM-guided KG traversal as a reasoner (node exploration / exploitation, memory replay).

``Traverser(TraverseConfig(kind="local"|"llm"), edges=EdgeMemory(...))`` answers a question from
its subgraph by growing S from the seed entities (see :mod:`rg.reasoning.traverse.traverser`);
``evaluate_qa`` runs it with ``reasoner: traverse`` (:mod:`rg.evaluation.traverse_qa`).
"""

from rg.reasoning.traverse.config import TraverseConfig
from rg.reasoning.traverse.guides import Answered, LLMGuide, LocalGuide, Tally
from rg.reasoning.traverse.prompts import ANSWER, EXPLOIT, EXPLORE, PROMPTS
from rg.reasoning.traverse.subgraph import Candidate, Subgraph
from rg.reasoning.traverse.traverser import TraverseResult, Traverser

__all__ = ["ANSWER", "EXPLOIT", "EXPLORE", "PROMPTS", "Answered", "Candidate", "LLMGuide", "LocalGuide", "Subgraph",
           "Tally", "TraverseConfig", "TraverseResult", "Traverser"]
