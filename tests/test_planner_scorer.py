"""The planner as a triple scorer (rg.retrievers.planner.scorer): exact end and path mass and the
scores on a hand-made graph, and what the retriever-score reader answers from them."""

from __future__ import annotations

import asyncio
import math

import numpy as np
import pytest

from rg.data.sample import Sample
from rg.evaluation.qa import answer_questions
from rg.graph import KnowledgeGraph
from rg.reasoning import RetrieverReader, RetrieverReaderConfig
from rg.retrievers.planner.plan import Plan, PlannedPath
from rg.retrievers.planner.scorer import EPSILON, path_mass, path_shares, triple_scores

TRIPLES = (
    ("X", "directed_by", "D"),  # 0
    ("F2", "directed_by", "D"),  # 1
    ("X", "written_by", "W1"),  # 2
    ("F2", "written_by", "W2"),  # 3
    ("X", "has_genre", "Drama"),  # 4
    ("F9", "written_by", "W9"),  # 5: no topic walk reaches it
)
THREE_HOP = ("directed_by", "directed_by^-1", "written_by")


def planned(path, probability):
    return PlannedPath(path, math.log(probability), (), ())


def test_end_and_path_mass_sum_the_shares_of_the_paths_through_each_triple():
    plan = Plan("q", "constrained", (planned(THREE_HOP, 0.3), planned(("written_by",), 0.1)))
    assert path_shares(plan) == pytest.approx([0.75, 0.25])
    kg = KnowledgeGraph.from_triples(TRIPLES)
    end, anywhere = path_mass(plan, kg, ["X"])
    # THREE_HOP: X→D, then D←F2 and D←X (back to the topic), then the writers of X and F2;
    # the one-step path ends with X's writer too
    assert end == pytest.approx([0.0, 0.0, 1.0, 0.75, 0.0, 0.0])
    # the two-step prefix ends at F2, and its walk X → D → X back to the topic credits nothing
    prefix = Plan("q", "constrained", (planned(THREE_HOP[:2], 1.0),))
    assert path_mass(prefix, kg, ["X"])[0] == pytest.approx([0.0, 1.0, 0.0, 0.0, 0.0, 0.0])
    assert anywhere == pytest.approx([0.75, 0.75, 1.0, 0.75, 0.0, 0.0])
    scores = triple_scores(end, anywhere)
    assert scores[3] == pytest.approx(math.log((0.75 + EPSILON) / (0.25 + EPSILON)))
    assert scores[0] == pytest.approx(math.log(EPSILON * 1.75 / (1 + EPSILON)))
    assert scores[4] == scores[5] == pytest.approx(math.log(EPSILON / (1 + EPSILON)))
    assert scores[2] > scores[3] > 0 > scores[0] > scores[4]  # ends, then carriers, then the rest


def test_an_ungrounded_path_keeps_its_share_and_an_empty_plan_scores_nothing():
    plan = Plan("q", "unconstrained", (planned(("written_by",), 0.5), planned(None, 0.5)))
    end, anywhere = path_mass(plan, KnowledgeGraph.from_triples(TRIPLES), ["X"])
    assert end == pytest.approx([0, 0, 0.5, 0, 0, 0]) and anywhere == pytest.approx(end)
    end, anywhere = path_mass(Plan("q", "constrained", ()), KnowledgeGraph.from_triples(TRIPLES), ["X"])
    assert not end.any() and not anywhere.any()


class FixedPlans:
    """Scores from fixed plans, as PlannerScorer computes them after decoding (no model)."""

    name = "planner:fixed"

    def __init__(self, plan):
        self.plan = plan

    def score(self, samples):
        out = []
        for sample in samples:
            kg = KnowledgeGraph.from_triples(sample.triples)
            out.append(triple_scores(*path_mass(self.plan, kg, sample.q_entities)).astype(np.float32))
        return out


@pytest.mark.parametrize(
    ("shares", "expected"),
    [((0.45, 0.3, 0.25), ("W1", "W2")), ((0.2, 0.7, 0.1), ("W1",))],
)
def test_the_reader_answers_at_the_end_of_the_likelier_path(shares, expected):
    """THREE_HOP reaches W1 and W2, the one-step path only W1, a two-step prefix the film F2: the
    reader ranks the ends of the likelier path first even when no path holds half the belief,
    and never an intermediate entity (D, F2) above them."""
    paths = (planned(THREE_HOP, shares[0]), planned(("written_by",), shares[1]), planned(THREE_HOP[:2], shares[2]))
    sample = Sample("q", "the movies that share directors with X are written by who", (), ("X",), (), TRIPLES)
    reader = RetrieverReader(RetrieverReaderConfig(walk_score="last"))
    [prediction] = asyncio.run(answer_questions([sample], FixedPlans(Plan("q", "constrained", paths)), reader, top_k=10))
    assert prediction.failure is None
    ranked = [r["text"] for r in prediction.ranked]
    assert ranked[0] == "W1" and set(ranked[: len(expected)]) == set(expected)
    assert ranked.index("W2") < ranked.index("F2") and "D" not in ranked[:3]
