"""Tests for the untrained baseline scorers of rg.evaluation.scorers on tiny hand-made graphs."""

from __future__ import annotations

import socket
from typing import Iterator

import numpy as np
import pytest

from rg.data.sample import Sample
from rg.evaluation import (
    CosineScorer,
    HopDistanceScorer,
    TripleScorer,
    is_unnamed,
    rank_triples,
    topic_distances,
    triple_text,
)
from rg.graph import KnowledgeGraph
from rg.text.encoder import EncoderConfig, TextEncoder


def _sample(triples: list[tuple[str, str, str]], q_entities: tuple[str, ...], question: str = "q") -> Sample:
    return Sample(
        id="s", question=question, answers=(), q_entities=q_entities, a_entities=(), triples=tuple(triples)
    )


# Two topics T1 and T2; distances from the nearest topic (ignoring direction):
# T1 = T2 = 0, x = u = 1, y = v = 2, z = 3; w and q are not reachable.
TWO_TOPICS = [
    ("T1", "r", "x"),  # 0: touches T1            -> 0
    ("x", "r", "y"),  # 1: x at 1                -> -1
    ("y", "r", "z"),  # 2: y at 2                -> -2
    ("u", "r", "T2"),  # 3: touches T2 (as tail)  -> 0
    ("u", "r", "v"),  # 4: u at 1                -> -1
    ("w", "r", "q"),  # 5: unreachable           -> -inf
    ("v", "r", "y"),  # 6: v and y at 2          -> -2
]


class TestHopDistanceScorer:
    def test_scores_are_negative_topic_distances(self) -> None:
        sample = _sample(TWO_TOPICS, ("T1", "T2", "not in graph"))
        [scores] = HopDistanceScorer().score([sample])
        assert scores.tolist() == [0.0, -1.0, -2.0, 0.0, -1.0, -np.inf, -2.0]

    def test_exact_ranking_ties_in_triple_order(self) -> None:
        [scores] = HopDistanceScorer().score([_sample(TWO_TOPICS, ("T1", "T2"))])
        assert rank_triples(scores).tolist() == [0, 3, 1, 4, 2, 6, 5]

    def test_one_topic_only(self) -> None:
        [scores] = HopDistanceScorer().score([_sample(TWO_TOPICS, ("T2",))])
        # T2 = 0, u = 1, v = 2, y = 3, x = z = 4; T1 = 5.
        assert scores.tolist() == [-4.0, -3.0, -3.0, 0.0, -1.0, -np.inf, -2.0]

    def test_no_topic_in_graph_and_empty_graph(self) -> None:
        scorer = HopDistanceScorer()
        no_topic, empty = scorer.score([_sample(TWO_TOPICS, ("absent",)), _sample([], ("T1",))])
        assert np.isneginf(no_topic).all() and no_topic.shape == (7,)
        assert empty.shape == (0,)

    def test_parallel_relations_score_alike(self) -> None:
        [scores] = HopDistanceScorer().score([_sample([("T", "a", "x"), ("T", "b", "x"), ("x", "c", "y")], ("T",))])
        assert scores.tolist() == [0.0, 0.0, -1.0]

    def test_topic_distances(self) -> None:
        kg = KnowledgeGraph.from_triples(TWO_TOPICS)
        distance = topic_distances(kg, ["T1", "T2"])
        by_name = {name: distance[kg.entity_id(name)] for name in ["T1", "T2", "x", "u", "y", "v", "z", "w"]}
        assert by_name == {"T1": 0, "T2": 0, "x": 1, "u": 1, "y": 2, "v": 2, "z": 3, "w": np.inf}
        assert np.isinf(topic_distances(kg, [])).all()

    def test_name_and_protocol(self) -> None:
        scorer = HopDistanceScorer()
        assert scorer.name == "hop_distance"
        assert isinstance(scorer, TripleScorer)


class TestTripleText:
    def test_relation_in_words_and_unnamed_nodes(self) -> None:
        triple = ("Jamaica", "location.country.languages_spoken", "m.01428y")
        assert triple_text(triple) == "Jamaica location country languages spoken unnamed"
        assert triple_text(("g.11b6ddx2lh", "directed_by", "Ridley Scott")) == "unnamed directed by Ridley Scott"

    @pytest.mark.parametrize(
        ("entity", "unnamed"),
        [("m.0abc_1", True), ("g.11b6", True), ("m.", False), ("Mr. Smith", False), ("m.Oscar", False), ("1999", False)],
    )
    def test_is_unnamed(self, entity: str, unnamed: bool) -> None:
        assert is_unnamed(entity) is unnamed


def _refuse_connection(*args: object, **kwargs: object) -> None:
    raise OSError("network disabled in tests")


@pytest.fixture(scope="module")
def encoder() -> Iterator[TextEncoder]:
    """The packaged MiniLM encoder, loaded once with the network blocked."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(socket.socket, "connect", _refuse_connection)
        yield TextEncoder(EncoderConfig())


class TestCosineScorer:
    TRIPLES = [
        ("Paris", "location.location.containedby", "France"),
        ("m.0k3p", "sports.sports_team_roster.player", "Michael Jordan"),
        ("Inception", "film.film.directed_by", "Christopher Nolan"),
        ("Inception", "film.film.release_date", "2010"),
    ]

    def test_obviously_relevant_triple_ranks_first(self, encoder: TextEncoder) -> None:
        scorer = CosineScorer(encoder)
        sample = _sample(self.TRIPLES, ("Inception",), question="who directed the film Inception?")
        [scores] = scorer.score([sample])
        assert scores.shape == (4,) and scores.dtype == np.float32
        assert rank_triples(scores)[0] == 2
        assert np.all(scores <= 1.0 + 1e-5) and np.all(scores >= -1.0 - 1e-5)

    def test_scores_are_cosines_of_question_and_triple_text(self, encoder: TextEncoder) -> None:
        question = "where is Paris?"
        [scores] = CosineScorer(encoder).score([_sample(self.TRIPLES[:2], ("Paris",), question=question)])
        vectors = encoder.encode([question, triple_text(self.TRIPLES[0]), triple_text(self.TRIPLES[1])])
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        np.testing.assert_allclose(scores, vectors[1:] @ vectors[0], atol=1e-5)

    def test_several_samples_and_empty_subgraphs(self, encoder: TextEncoder) -> None:
        scorer = CosineScorer(encoder)
        first = _sample(self.TRIPLES, ("Inception",), question="who directed the film Inception?")
        empty = _sample([], ("Paris",), question="where is Paris?")
        second = _sample(self.TRIPLES[:2], ("Paris",), question="which country is Paris in?")
        out = scorer.score([first, empty, second])
        assert [a.shape for a in out] == [(4,), (0,), (2,)]
        np.testing.assert_allclose(out[0], scorer.score([first])[0], atol=1e-6)
        assert rank_triples(out[2])[0] == 0
        [alone] = scorer.score([empty])
        assert alone.shape == (0,)
        assert scorer.score([]) == []

    def test_name_names_the_encoder(self, encoder: TextEncoder) -> None:
        scorer = CosineScorer(encoder)
        assert scorer.name == f"cosine:{encoder.model_id}"
        assert isinstance(scorer, TripleScorer)
