"""Relation paths whose ends match a question's answers: weak path targets chosen by answer F1.

Shortest topic→answer paths are a poor relation-path target when an answer is also reachable by
a shorter, unrelated route. MetaQA's 3-hop question "the movies that share directors with X are
written by who" asks for ``directed_by → directed_by^-1 → written_by``, but X's own writers are
among the answers and one ``written_by`` step away, so shortest paths label them with
``written_by``; other answers get detours through ``has_tags^-1`` or ``has_genre^-1`` that
happen to be as short. A relation path stands for the *set* of entities it reaches, so this
module scores each relation path of up to ``max_len`` steps from the topic entities by the F1
between that set and the answer set, and keeps the best: the path that reaches all the answers
and little else. Topic entities are left out of both sets (a reader never answers with one).

With ``WeakConfig.kb`` (or ``WeakConfig.kg``, a KG store: :mod:`rg.supervision.store_paths`)
the paths are searched on the whole KG rather than the question's subgraph: a subgraph cut to a triple budget can lose the answers of the right path and let a
wrong path score best, while on the whole KG the set a path reaches is exact (MetaQA's 129k
triples take about 10 ms per 3-hop question). Triple labels still come from the walks of the
chosen paths inside the subgraph.

The paths are enumerated by expanding entity sets label by label
(:func:`rg.graph.search.relation_steps`), the same enumeration as the planner's constrained
decoding trie, so every returned path grounds from a topic entity. This reads gold answers: it
is supervision, for training targets and evaluation references only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from rg.data.sample import Sample
from rg.data.sources import load_kb
from rg.graph.kg import KnowledgeGraph
from rg.graph.search import relation_steps
from rg.graph.path import Path
from rg.supervision.scored_paths import ScoredPath, best_first, scored_path
from rg.supervision.weak import WeakConfig, answer_entities, topic_entities

if TYPE_CHECKING:
    from rg.stores.base import KGStore

DEFAULT_MAX_LEN = 3
"""Relations per path searched when ``WeakConfig.max_path_len`` is None."""


def score_relation_paths(
    kg: KnowledgeGraph, topics: Sequence[str], answers: Sequence[str], max_len: int
) -> list[ScoredPath]:
    """Every relation path of 1..``max_len`` steps from the topics that reaches an answer, scored.

    Args:
        kg: The question's graph.
        topics: Topic entity names (those absent from ``kg`` are ignored).
        answers: Answer entity names (those absent from ``kg`` or among the topics are ignored).
        max_len: Most relations per path.

    Returns:
        The paths reaching at least one answer, best F1 first; ties: fewer relations first, then
        enumeration order (forward labels before inverse ones, by relation id).
    """
    starts = np.array(sorted({kg.entity_id(t) for t in topics if kg.has_entity(t)}), dtype=np.int64)
    wanted = np.setdiff1d(kg.entity_ids([a for a in answers if kg.has_entity(a)]), starts)
    if starts.size == 0 or wanted.size == 0:
        return []
    found: list[ScoredPath] = []

    def visit(prefix: tuple[str, ...], frontier: np.ndarray) -> None:
        for label, reached in relation_steps(kg, frontier):
            path = (*prefix, label)
            ends = np.setdiff1d(reached, starts, assume_unique=True)
            hits = int(np.isin(ends, wanted, assume_unique=True).sum())
            if hits:
                found.append(scored_path(path, hits, int(ends.size), int(wanted.size)))
            if len(path) < max_len:
                visit(path, reached)

    visit((), starts)
    return best_first(found)


def search_kb(weak: WeakConfig) -> "KnowledgeGraph | KGStore | None":
    """The whole KG that ``weak.kb`` or ``weak.kg`` names, opened once per job (None when neither is set).

    ``kb`` and ``kg: {kind: memory}`` load the graph into this process; ``kg: {kind: sparql}``
    returns a :class:`~rg.stores.sparql.SparqlStore` the search queries.
    """
    if weak.kg is not None:
        from rg.stores.build import build_store
        from rg.stores.config import SparqlStoreConfig

        return build_store(weak.kg) if isinstance(weak.kg, SparqlStoreConfig) else load_kb(weak.kg.kb)[0]
    return None if weak.kb is None else load_kb(weak.kb)[0]


def answer_f1_paths(
    sample: Sample,
    max_len: int = DEFAULT_MAX_LEN,
    tolerance: float = 0.0,
    kg: KnowledgeGraph | None = None,
    kb: "KnowledgeGraph | KGStore | None" = None,
) -> tuple[tuple[str, ...], ...]:
    """The relation paths of a question whose reached set best matches its answers.

    Args:
        sample: A question with its subgraph and answers.
        max_len: Most relations per path.
        tolerance: Keep every path whose F1 is within this of the best (0: ties with the best).
        kg: The graph of ``sample.triples`` when the caller has it already.
        kb: Search on this whole KG instead of the question's subgraph (:func:`search_kb`): the
            in-memory graph, or a KG store (:func:`rg.supervision.store_paths.score_store_paths`).

    Returns:
        Relation paths, best first (empty when no path from a topic entity reaches an answer).
    """
    if kb is not None and not isinstance(kb, KnowledgeGraph):
        from rg.supervision.store_paths import score_store_paths

        scored = score_store_paths(kb, sample.q_entities, sample.a_entities or sample.answers, max_len)
    else:
        graph = kb if kb is not None else kg if kg is not None else KnowledgeGraph.from_triples(sample.triples)
        scored = score_relation_paths(graph, topic_entities(sample, graph), answer_entities(sample, graph), max_len)
    if not scored:
        return ()
    floor = scored[0].f1 - tolerance
    return tuple(p.relation_path for p in scored if p.f1 >= floor)


@dataclass(frozen=True)
class AnswerPathLabels:
    """Triple labels from the best answer-F1 relation paths of one question.

    Attributes:
        relation_paths: The chosen relation paths, best first.
        positive_triples: Triple ids (indices into ``sample.triples``) on any complete walk of
            them from a topic entity, sorted and unique (all walks, not a capped sample).
        walks: Up to ``max_walks`` of those walks, for display.
    """

    relation_paths: tuple[tuple[str, ...], ...]
    positive_triples: tuple[int, ...]
    walks: tuple[Path, ...]


def answer_f1_labels(
    sample: Sample, config: WeakConfig | None = None, max_walks: int = 32, kb: KnowledgeGraph | None = None
) -> AnswerPathLabels:
    """Weak triple labels by the ``answer_f1`` rule: the triples on the walks of the best paths.

    Args:
        sample: A question with its subgraph and answers.
        config: ``max_path_len`` bounds the search (None: :data:`DEFAULT_MAX_LEN`).
        max_walks: Walks kept for display (the positives are always complete).
        kb: Choose the paths on this whole KG (:func:`search_kb`); their walks in the subgraph
            are the labels, so a path with no walk there labels nothing.
    """
    config = config or WeakConfig()
    kg = KnowledgeGraph.from_triples(sample.triples)
    max_len = config.max_path_len if config.max_path_len is not None else DEFAULT_MAX_LEN
    return path_labels(sample, answer_f1_paths(sample, max_len, kg=kg, kb=kb), max_walks, kg)


def path_labels(
    sample: Sample, paths: Sequence[Sequence[str]], max_walks: int = 32, kg: KnowledgeGraph | None = None
) -> AnswerPathLabels:
    """Triple labels of a question from given relation paths: the triples on their walks.

    Args:
        sample: A question with its subgraph.
        paths: Relation paths from the topic entities (``r^-1`` marks a backward step).
        max_walks: Walks kept for display (the positives are always complete).
        kg: The graph of ``sample.triples`` when the caller has it already.
    """
    kg = kg if kg is not None else KnowledgeGraph.from_triples(sample.triples)
    topics = topic_entities(sample, kg)
    positives = sorted({int(t) for path in paths for t in kg.path_triples(topics, path)})
    walks = [w for path in paths for topic in topics for w in kg.ground(topic, path, max_walks)][:max_walks]
    return AnswerPathLabels(tuple(tuple(p) for p in paths), tuple(positives), tuple(walks))
