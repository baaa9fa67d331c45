"""LoRA relation-path planner (RoG, Luo et al., 2024; ReG@Path): a LLaMA-architecture causal LM
with a peft LoRA adapter writes relation paths, decoded by beam search (optionally constrained by
a trie of the paths in the question's graph) and grounded on the graph.

    planner = PlannerModel.build(PlannerConfig(tiny={"hidden": 64}), questions, relations)
    ... train with rg.training.planner_loop.fit_planner, then planner.save("ckpt/") ...
    plans = plan_questions(load_planner("ckpt/"), samples, DecodeConfig(beam_width=5))
    plans[0].reasoning_paths      # ((Path, score), ...); plans[0].triple_ids index sample.triples

Modules: ``config`` (PlannerConfig, DecodeConfig), ``prompt`` (the prompt template and path
markers), ``tokenizer`` (offline tokenizer, PathVocab), ``model`` (PlannerModel, checkpoints),
``trie`` (relation-path tries), ``decode`` (beam search through ``generate``, the trie as a logits processor), ``plan`` (decoding +
grounding), ``evaluate`` (path exact match, answer recall, groundability, speed).
"""

from rg.retrievers.planner.config import (
    DecodeConfig,
    LoraSettings,
    PlannerConfig,
    TinyLlamaConfig,
    TokenizerConfig,
)
from rg.retrievers.planner.decode import Beam, TrieConstraint, beam_search
from rg.retrievers.planner.evaluate import PlannerScores, evaluate_planner, score_plans
from rg.retrievers.planner.model import Example, PlanEncoder, PlannerModel, load_planner, read_planner_meta
from rg.retrievers.planner.plan import Plan, PlannedPath, ground_path, plan_questions
from rg.retrievers.planner.prompt import PLAN_RELATION_PATHS, PLANNER_PROMPTS, PlanPrompt, planner_prompt
from rg.retrievers.planner.tokenizer import PathVocab, relation_labels, train_tokenizer
from rg.retrievers.planner.trie import GraphTrie, RelationTrie, TrieStats, graph_trie, relation_trie, token_trie

__all__ = [
    "PLANNER_PROMPTS",
    "PLAN_RELATION_PATHS",
    "Beam",
    "DecodeConfig",
    "Example",
    "GraphTrie",
    "LoraSettings",
    "PathVocab",
    "Plan",
    "PlanPrompt",
    "PlannedPath",
    "PlannerConfig",
    "PlanEncoder",
    "PlannerModel",
    "PlannerScores",
    "RelationTrie",
    "TinyLlamaConfig",
    "TokenizerConfig",
    "TrieConstraint",
    "TrieStats",
    "beam_search",
    "evaluate_planner",
    "graph_trie",
    "ground_path",
    "load_planner",
    "plan_questions",
    "planner_prompt",
    "read_planner_meta",
    "relation_labels",
    "relation_trie",
    "score_plans",
    "token_trie",
    "train_tokenizer",
]
