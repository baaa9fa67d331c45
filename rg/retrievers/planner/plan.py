"""Plan relation paths for questions and ground them on each question's graph.

:func:`plan_questions` is the planner's inference entry point (ReG@Path retrieval): for each
question it builds the graph of ``sample.triples``, in constrained mode the (lazily expanded)
trie of relation paths from the topic entities, decodes ``k`` relation paths by beam search and walks each one
from every topic entity along stored triples, respecting their direction
(:meth:`KnowledgeGraph.ground`). The result is a :class:`Plan` per question: scored reasoning
paths (:class:`rg.graph.path.Path`) with their triple ids, which index ``sample.triples``.
Gold answers are never read here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rg.data.sample import Sample
from rg.graph.kg import KnowledgeGraph
from rg.graph.path import Path
from rg.retrievers.planner.config import DecodeConfig
from rg.retrievers.planner.decode import Beam, Decoder, beam_search
from rg.retrievers.planner.model import PlannerModel
from rg.retrievers.planner.trie import graph_trie
from rg.supervision.weak import topic_entities


@dataclass(frozen=True)
class PlannedPath:
    """One decoded relation path and its walks in the question's graph.

    Attributes:
        relation_path: The labels (``r^-1`` for a backward step); None when the planner wrote
            a malformed sequence (unconstrained mode only).
        score: Log-probability of the sequence under the planner.
        groundings: Walks from the topic entities that follow the path (empty: not groundable).
        tokens: The token ids written after ``<PATH>``.
    """

    relation_path: tuple[str, ...] | None
    score: float
    groundings: tuple[Path, ...]
    tokens: tuple[int, ...]

    @property
    def grounded(self) -> bool:
        return bool(self.groundings)


@dataclass(frozen=True)
class Plan:
    """The planner's output for one question.

    Attributes:
        id: The question id.
        mode: ``constrained`` or ``unconstrained``.
        paths: The decoded paths, best score first.
        skipped_relations: Constrained mode: relation edges met while decoding whose relation has
            no planner token, so they could not be written (None in unconstrained mode).
    """

    id: str
    mode: str
    paths: tuple[PlannedPath, ...]
    skipped_relations: int | None = None

    @property
    def relation_paths(self) -> tuple[tuple[str, ...] | None, ...]:
        """The decoded relation paths, best first (None for malformed ones)."""
        return tuple(p.relation_path for p in self.paths)

    @property
    def reasoning_paths(self) -> tuple[tuple[Path, float], ...]:
        """Every grounded walk with the score of its relation path, best path first."""
        return tuple((walk, p.score) for p in self.paths for walk in p.groundings)

    @property
    def triple_ids(self) -> tuple[int, ...]:
        """Sorted unique ids (indices into ``sample.triples``) of the triples on any walk."""
        return tuple(sorted({t for walk, _ in self.reasoning_paths for t in walk.triple_ids}))

    @property
    def answers(self) -> tuple[str, ...]:
        """Entities the walks end at, each once, in the order of the best path reaching them."""
        return tuple(dict.fromkeys(walk.end for walk, _ in self.reasoning_paths))


def ground_path(
    kg: KnowledgeGraph, topics: Sequence[str], relation_path: Sequence[str], max_groundings: int | None
) -> tuple[Path, ...]:
    """Walks of ``relation_path`` from each topic entity (in topic order), directions respected."""
    return tuple(walk for topic in topics for walk in kg.ground(topic, relation_path, max_groundings))


def _plan_batch(planner: PlannerModel, samples: Sequence[Sample], config: DecodeConfig, search: Decoder) -> list[Plan]:
    graphs = [KnowledgeGraph.from_triples(s.triples) for s in samples]
    topics = [topic_entities(s, kg) for s, kg in zip(samples, graphs)]
    tries, stats = None, [None] * len(samples)
    if config.mode == "constrained":
        built = [graph_trie(kg, topic, planner.vocab, planner.config.max_path_len) for kg, topic in zip(graphs, topics)]
        tries, stats = [trie for trie, _ in built], [counts for _, counts in built]
    prompts = planner.prompt_ids([planner.prompt_question(s.question, s.q_entities) for s in samples])
    beams = search(planner, prompts, config.beam_width, tries)
    plans = []
    for sample, kg, topic, found, counts in zip(samples, graphs, topics, beams, stats):
        paths = tuple(_grounded(kg, topic, beam, config.max_groundings) for beam in found)
        skipped = None if counts is None else counts.skipped
        plans.append(Plan(sample.id, config.mode, paths, skipped))
    return plans


def _grounded(kg: KnowledgeGraph, topics: Sequence[str], beam: Beam, max_groundings: int | None) -> PlannedPath:
    walks = () if beam.relation_path is None else ground_path(kg, topics, beam.relation_path, max_groundings)
    return PlannedPath(beam.relation_path, beam.score, walks, beam.tokens)


def plan_questions(planner: PlannerModel, samples: Sequence[Sample], config: DecodeConfig | None = None,
                   search: Decoder = beam_search) -> list[Plan]:
    """Decode and ground ``config.beam_width`` relation paths for each question.

    Args:
        planner: A planner in eval mode (:func:`~rg.retrievers.planner.model.load_planner`).
        samples: Questions with their subgraphs (``question``, ``q_entities`` and ``triples`` are read).
        config: Beam width, constrained or unconstrained mode, batch size, grounding cap.
        search: The beam search (:func:`~rg.retrievers.planner.decode.beam_search`; a benchmark
            passes another one to compare).

    Returns:
        One :class:`Plan` per sample, in order.
    """
    config = config or DecodeConfig()
    plans: list[Plan] = []
    for start in range(0, len(samples), config.questions_per_batch):
        plans.extend(_plan_batch(planner, samples[start : start + config.questions_per_batch], config, search))
    return plans
