"""Triple scorers: the common interface of retrievers under evaluation, and two untrained baselines.

A :class:`TripleScorer` gives every triple of a question's subgraph a relevance score (higher is
more relevant); :func:`rg.evaluation.retrieval.evaluate_retrieval` ranks the triples by it. The
trained retrievers (MLP-DDE, PNA, planner) are wrapped into this protocol; the two baselines
here need no training and set the floor they must beat:

* :class:`CosineScorer`: cosine similarity between the question and each triple written as
  text (``"head relation tail"``), as in the retrieval-only baselines of SubgraphRAG
  (Li et al., 2025) and the relevance scoring of PrivGemo.
* :class:`HopDistanceScorer`: structural proximity only; triples touching a topic entity
  first, then those one hop further away, and so on (the order in which a BFS from the
  topic entities meets them, as in the k-hop subgraphs of RoG and GraftNet).

Neither reads gold answers: scorers see the question, its topic entities and its triples.
"""

from __future__ import annotations

from typing import Protocol, Sequence, runtime_checkable

import numpy as np

from rg.data.entities import is_unnamed
from rg.data.sample import Sample, Triple
from rg.graph import KnowledgeGraph
from rg.supervision.selectors import verbalise_relation
from rg.supervision.weak import topic_entities
from rg.text.encoder import TextEncoder

UNNAMED = "unnamed"
"""How an unnamed Freebase node (``m.``/``g.`` id, e.g. a CVT) is written in triple text."""



@runtime_checkable
class TripleScorer(Protocol):
    """Scores every triple of each question's subgraph.

    Attributes:
        name: The method name written into results (e.g. ``cosine:<encoder>``, ``hop_distance``).
    """

    name: str

    def score(self, samples: Sequence[Sample]) -> list[np.ndarray]:
        """One float array per sample, one score per triple of ``sample.triples`` (in order).

        Higher means more relevant; ties are ranked by triple index by the evaluation.

        Shapes:
            samples: Q samples with T_i triples each -> Q arrays of shape (T_i,)
        """
        ...


@runtime_checkable
class PathScorer(TripleScorer, Protocol):
    """A triple scorer that decodes relation paths (the planner), whose groundings can be the
    evidence (``evidence.walks: planned``)."""

    def decoded_paths(self, question_id: str) -> list[tuple[tuple[str, ...], float]]:
        """The relation paths the last :meth:`score` call decoded for a question, with their shares."""
        ...




def entity_text(entity: str) -> str:
    """An entity as written in triple text: its name, or ``unnamed`` for an ``m.``/``g.`` id."""
    return UNNAMED if is_unnamed(entity) else entity


def triple_text(triple: Triple) -> str:
    """A triple as one line of text: ``"head relation tail"``, relation in words.

    ``("Jamaica", "location.country.languages_spoken", "m.01428y")`` →
    ``"Jamaica location country languages spoken unnamed"``.
    """
    head, relation, tail = triple
    return f"{entity_text(head)} {verbalise_relation(relation)} {entity_text(tail)}"


def _unit_rows(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (zero rows stay zero).

    Shapes:
        vectors: (N, D) -> (N, D)
    """
    return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)


class CosineScorer:
    """Untrained baseline: cosine similarity between the question and each triple's text.

    The questions of a call are encoded together, and so are all their triple texts (see
    :func:`triple_text`); the encoder removes duplicates within the call and, when it has an
    on-disk cache, reuses vectors across calls and jobs. Vectors are L2-normalised here, so the
    score is a cosine whatever the encoder's ``normalize`` setting.

    Args:
        encoder: The sentence encoder.

    Attributes:
        name: ``cosine:<encoder model id>``.
    """

    def __init__(self, encoder: TextEncoder) -> None:
        self.encoder = encoder
        self.name = f"cosine:{encoder.model_id}"

    def score(self, samples: Sequence[Sample]) -> list[np.ndarray]:
        """Cosine similarity of each triple's text to its question.

        Shapes:
            samples: Q samples with T_i triples each -> Q float32 arrays of shape (T_i,)
        """
        samples = list(samples)
        if not samples:
            return []
        questions = _unit_rows(self.encoder.encode([s.question for s in samples]))  # (Q, D)
        texts = [triple_text(t) for s in samples for t in s.triples]
        if not texts:
            return [np.zeros(0, dtype=np.float32) for _ in samples]
        triples = _unit_rows(self.encoder.encode(texts))  # (sum T_i, D)
        scores, start = [], 0
        for row, sample in enumerate(samples):
            stop = start + len(sample.triples)
            scores.append((triples[start:stop] @ questions[row]).astype(np.float32))  # (T_i,)
            start = stop
        return scores


def topic_distances(kg: KnowledgeGraph, topics: Sequence[str]) -> np.ndarray:
    """Undirected BFS distance of every entity from the nearest topic entity.

    Args:
        kg: The graph.
        topics: Topic entity names present in ``kg`` (none gives all distances infinite).

    Returns:
        ``(E,)`` float64: 0 for the topics, ``d`` for entities ``d`` triples away ignoring
        triple direction, ``inf`` for entities no topic reaches.
    """
    distance = np.full(kg.num_entities, np.inf)
    frontier = np.unique(kg.entity_ids(list(topics))) if topics else np.zeros(0, dtype=np.int64)
    distance[frontier] = 0.0
    hop = 0
    while frontier.size:
        hop += 1
        _, others, _ = kg.incident(frontier, "both")
        frontier = np.unique(others[np.isinf(distance[others])])
        distance[frontier] = hop
    return distance


class HopDistanceScorer:
    """Untrained baseline: triples nearer to a topic entity score higher.

    The score of a triple is ``-min(d(head), d(tail))`` with ``d`` the undirected BFS distance
    from the nearest topic entity (:func:`topic_distances`): 0 for triples touching a topic,
    -1 one hop further out, and so on; ``-inf`` for triples no topic reaches (or every triple
    when no topic entity is in the subgraph). Within one distance the evaluation keeps triple
    order (stable ranking), so the ranking is deterministic.

    Attributes:
        name: ``hop_distance``.
    """

    def __init__(self) -> None:
        self.name = "hop_distance"

    def score(self, samples: Sequence[Sample]) -> list[np.ndarray]:
        """Negative topic distance of each triple.

        Shapes:
            samples: Q samples with T_i triples each -> Q float64 arrays of shape (T_i,)
        """
        return [self.score_one(sample) for sample in samples]

    def score_one(self, sample: Sample) -> np.ndarray:
        """Negative topic distance of each triple of one sample.

        Shapes:
            sample with T triples -> (T,)
        """
        if not sample.triples:
            return np.zeros(0, dtype=np.float64)
        kg = KnowledgeGraph.from_triples(sample.triples)  # triple id i = sample.triples[i]
        distance = topic_distances(kg, topic_entities(sample, kg))  # (E,)
        return -np.minimum(distance[kg.head], distance[kg.tail])  # (T,)
