"""The planner as a triple scorer: ReG@Path retrieval in the shape of the other retrievers.

The planner decodes ``k`` relation paths per question with their log-probabilities. To plug
its output into the evidence chains and readers like the MLP and PNA retrievers, every triple
of the question's graph gets a score from the decoded paths:

1. the beams' log-probabilities are normalised over the ``k`` beams (a softmax), giving each
   decoded path a share ``p_i`` of the planner's belief (a path that fails to ground, possible
   only in unconstrained mode, keeps its share, which is then lost);
2. a triple's *end mass* ``e_t`` is the sum of ``p_i`` over the paths whose complete walks
   from a topic entity take it as their last step (:func:`rg.graph.search.path_step_triples`)
   and end at an entity other than a topic: the planner's probability that the answer is
   reached through it (a co-star walk X → film → X back to the topic gives no answer, and
   crediting its last triple would credit the film). Its *path mass* ``m_t`` sums ``p_i``
   over the paths it lies on at any step;
3. a triple that ends a decoded path scores the log-odds ``log((e_t + ε) / (1 − e_t + ε))``;
   one that only carries walks towards their last step scores ``log(ε (1 + m_t) / (1 + ε))``,
   just above the triples on no decoded path, which score ``log(ε / (1 + ε))`` and keep graph
   order.

So the ranking puts the triples that reach answers first (most believed first), then the
triples that lead to them, then the rest; and with the reader's ``walk_score: last`` rule
(:class:`rg.reasoning.RetrieverReader`) a candidate's value is the log-odds of the paths that
end at it, whether or not the best path holds most of the belief, and an intermediate entity
(the film of "the films directed by X's director") cannot outrank the answers. Gold answers
are never read.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from rg.data.sample import Sample
from rg.graph.kg import KnowledgeGraph
from rg.graph.path import split_relation
from rg.retrievers.planner.config import DecodeConfig
from rg.retrievers.planner.decode import Decoder, beam_search
from rg.retrievers.planner.model import load_planner, read_planner_meta
from rg.retrievers.planner.plan import Plan, plan_questions
from rg.supervision.weak import topic_entities

EPSILON = 1e-4
"""ε of the log-odds: bounds scores to about ±9.2."""


def path_shares(plan: Plan) -> np.ndarray:
    """Softmax of the decoded paths' log-probabilities (``(k,)``, empty for no paths)."""
    scores = np.array([p.score for p in plan.paths], dtype=np.float64)
    if scores.size == 0:
        return scores
    weights = np.exp(scores - scores.max())
    return weights / weights.sum()


def path_mass(plan: Plan, kg: KnowledgeGraph, topics: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """Per triple of ``kg``: the summed share of the decoded paths that end with it (at an
    entity other than a topic), and of those it lies on at any step.

    Shapes:
        -> (T,) end mass, (T,) path mass; float64 in [0, 1]
    """
    end = np.zeros(kg.num_triples, dtype=np.float64)
    anywhere = np.zeros(kg.num_triples, dtype=np.float64)
    topic_ids = np.array([kg.entity_id(t) for t in topics if kg.has_entity(t)], dtype=np.int64)
    for share, planned in zip(path_shares(plan), plan.paths):
        if planned.relation_path is None:
            continue
        steps = kg.path_step_triples(topics, planned.relation_path)
        last = steps[-1]
        forward = split_relation(planned.relation_path[-1])[1]
        far = kg.tail[last] if forward else kg.head[last]
        end[last[~np.isin(far, topic_ids)]] += share
        anywhere[np.unique(np.concatenate(steps))] += share
    return np.minimum(end, 1.0), np.minimum(anywhere, 1.0)


def log_odds(mass: np.ndarray, epsilon: float = EPSILON) -> np.ndarray:
    """``log((m + ε) / (1 − m + ε))``, elementwise."""
    return np.log(mass + epsilon) - np.log(1.0 - mass + epsilon)


def triple_scores(end: np.ndarray, anywhere: np.ndarray, epsilon: float = EPSILON) -> np.ndarray:
    """Log-odds of the end mass where it is positive, else ``log(ε (1 + m) / (1 + ε))``.

    Shapes:
        end, anywhere: (T,) -> (T,)
    """
    carrying = np.log(epsilon * (1.0 + anywhere)) - np.log(1.0 + epsilon)
    return np.where(end > 0, log_odds(end, epsilon), carrying)


class PlannerScorer:
    """Scores every triple of a question by the planner's decoded relation paths.

    Args:
        directory: A planner checkpoint folder (``jobs.train`` with a planner config exports one).
        decode: Beam width, constrained or unconstrained decoding, batch size (defaults when None).
        search: The beam search (:func:`~rg.retrievers.planner.decode.beam_search`; a benchmark
            passes another one to compare).

    Attributes:
        name: ``planner:<label source>`` (``planner:<label source>:unconstrained`` for RoG's decoding).
        plans: The plans of the last :meth:`score` call, in order (for reports and debugging).
    """

    def __init__(self, directory: str | Path, decode: DecodeConfig | None = None, search: Decoder = beam_search) -> None:
        self.planner = load_planner(directory)
        self.search = search
        self.decode = decode if decode is not None else DecodeConfig()
        meta = read_planner_meta(directory)
        suffix = "" if self.decode.mode == "constrained" else f":{self.decode.mode}"
        self.name = f"planner:{meta.label_source or 'unknown'}{suffix}"
        self.plans: list[Plan] = []

    def decoded_paths(self, question_id: str) -> list[tuple[tuple[str, ...], float]]:
        """The relation paths decoded for ``question_id`` by the last :meth:`score` call, with
        their shares (:func:`path_shares`; malformed paths left out).

        Raises:
            KeyError: if the last call did not score that question.
        """
        for plan in self.plans:
            if plan.id == question_id:
                return [(p.relation_path, float(share)) for share, p in zip(path_shares(plan), plan.paths)
                        if p.relation_path is not None]
        raise KeyError(f"question {question_id!r} was not planned by the last score() call")

    def score(self, samples: Sequence[Sample]) -> list[np.ndarray]:
        """Each triple's score from the decoded paths (see the module docstring).

        Shapes:
            samples: Q samples with T_i triples each -> Q float32 arrays of shape (T_i,)
        """
        samples = list(samples)
        self.plans = plan_questions(self.planner, samples, self.decode, self.search)
        out = []
        for sample, plan in zip(samples, self.plans):
            kg = KnowledgeGraph.from_triples(sample.triples)
            out.append(triple_scores(*path_mass(plan, kg, topic_entities(sample, kg))).astype(np.float32))
        return out
