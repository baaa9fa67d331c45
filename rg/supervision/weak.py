"""Weak labels: shortest paths between topic entities and answers (ReG's starting point).

ReG (Zou et al. 2025, "Weak-to-Strong GraphRAG") starts from the heuristic supervision used by
RoG and SubgraphRAG: the triples on the shortest paths from each topic entity to each answer.
These *weak* labels are noisy (spurious shortcuts, missing evidence), which is what the LLM
refinement stage S(I) corrects; they are also the fallback whenever refinement fails.

The search here follows stored triples in their direction, in both orientations:

* q→a: shortest paths from the topic along head → tail (``r`` steps);
* a→q: shortest paths from the answer along head → tail, reversed so that they read from the
  topic (every step becomes ``r^-1``).

The shorter orientation wins; on a tie both are kept. Many MetaQA and Freebase questions walk
edges both ways along one path (``X ←[starred_actors]← film →[starred_actors]→ Y``), which no
directed search finds, so when neither orientation connects the pair the search falls back to
mixed-direction shortest paths. Each pair reports which mode produced its paths. Parallel
relations between one pair of entities are distinct triples and so give distinct paths.

The label triple ids are indices into ``sample.triples``: the graph is built with
:meth:`KnowledgeGraph.from_triples`, whose triple ids follow input order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Literal

from pydantic import Field, model_validator

from rg.config import Config
from rg.data.sample import Sample
from rg.data.sources import KBSource
from rg.stores.config import StoreConfig
from rg.graph import KnowledgeGraph, Path

WeakMode = Literal["directed", "mixed", "none"]
WEAK_MODES: tuple[WeakMode, ...] = ("directed", "mixed", "none")


class WeakConfig(Config):
    """How weak labels are searched."""

    max_paths_per_pair: int | None = Field(
        32,
        gt=0,
        description=(
            "At most this many shortest paths per (topic, answer) pair (q→a paths first, then a→q; "
            "enumeration order is deterministic). None keeps all of them."
        ),
    )
    mixed_fallback: bool = Field(
        True,
        description=(
            "When no directed path connects a pair in either orientation, search shortest paths whose "
            "steps may follow triples either way (needed by co-star style questions). False leaves "
            "such pairs unlabelled (mode 'none')."
        ),
    )
    max_path_len: int | None = Field(
        None,
        gt=0,
        description="Ignore paths longer than this many triples; None means no limit (rule 'answer_f1': 3).",
    )
    rule: Literal["shortest", "answer_f1"] = Field(
        "shortest",
        description=(
            "'shortest': shortest topic-answer paths (this module; RoG and SubgraphRAG's weak labels). "
            "'answer_f1': the walks of the relation paths whose reached entity set best matches the answer set "
            "(rg.supervision.answer_paths), which keeps multi-hop questions from being labelled with shortcuts "
            "to some of their answers."
        ),
    )
    kb: KBSource | None = Field(
        None,
        description=(
            "Rule 'answer_f1' only: choose the relation paths on this whole KG instead of each question's "
            "subgraph, whose size cap can cut answers off the right path and make a wrong one score best; the "
            "chosen paths' walks inside the subgraph stay the triple labels. Example: "
            "{path: '@shared/metaqa/kb_reconstructed.txt.gz', format: metaqa}."
        ),
    )

    kg: StoreConfig | None = Field(
        None,
        description=(
            "Like `kb`, through a KG store (rg.stores): {kind: memory, kb: {...}} or {kind: sparql, endpoint: "
            "http://127.0.0.1:8890/sparql, graph: ...}, so the whole KG can stay in a triple store."
        ),
    )

    @model_validator(mode="after")
    def _kb_needs_answer_f1(self) -> "WeakConfig":
        for key in ("kb", "kg"):
            if getattr(self, key) is not None and self.rule != "answer_f1":
                raise ValueError(f"`{key}` is read by rule 'answer_f1' only; set rule: answer_f1 or remove {key}")
        if self.kb is not None and self.kg is not None:
            raise ValueError("set `kb` or `kg`, not both (kg: {kind: memory, kb: ...} reads the same file)")
        return self


@dataclass(frozen=True)
class PairPaths:
    """The weak paths of one (topic, answer) pair.

    Attributes:
        topic: Topic entity name (every path starts here).
        answer: Answer entity name (every path ends here).
        paths: The shortest paths, q→a orientation first, each sorted by triple ids.
        mode: ``directed`` (found along triple directions), ``mixed`` (fallback search with
            steps either way) or ``none`` (not connected).
    """

    topic: str
    answer: str
    paths: tuple[Path, ...]
    mode: WeakMode


@dataclass(frozen=True)
class WeakLabels:
    """Weak labels of one question.

    Attributes:
        positive_triples: Triple ids (indices into ``sample.triples``) on any weak path, sorted
            and unique.
        pairs: One entry per (topic, answer) pair with both ends in the graph, in the order of
            ``sample.q_entities`` then the answers.
    """

    positive_triples: tuple[int, ...]
    pairs: tuple[PairPaths, ...]

    @property
    def paths(self) -> tuple[Path, ...]:
        """All weak paths, pair by pair."""
        return tuple(p for pair in self.pairs for p in pair.paths)

    @property
    def mode_counts(self) -> dict[str, int]:
        """Number of pairs per search mode (every mode present, possibly 0)."""
        counts = dict.fromkeys(WEAK_MODES, 0)
        for pair in self.pairs:
            counts[pair.mode] += 1
        return counts


def topic_entities(sample: Sample, kg: KnowledgeGraph) -> tuple[str, ...]:
    """The sample's topic entities that are in ``kg``, each once, in question order."""
    return tuple(e for e in dict.fromkeys(sample.q_entities) if kg.has_entity(e))


def answer_entities(sample: Sample, kg: KnowledgeGraph) -> tuple[str, ...]:
    """The sample's answer entities that are in ``kg``, each once, in sample order.

    These are ``sample.a_entities`` (the RoG ``a_entity`` column: answers as KG entities); a
    sample that lists none falls back to its ``answers`` strings that name graph entities.
    """
    names = sample.a_entities or sample.answers
    return tuple(e for e in dict.fromkeys(names) if kg.has_entity(e))


def weak_paths(
    kg: KnowledgeGraph,
    topic: str,
    answer: str,
    config: WeakConfig | None = None,
) -> tuple[list[Path], WeakMode]:
    """All shortest paths between a topic entity and an answer, read from the topic.

    Directed search in both orientations (q→a along triples from the topic, a→q along triples
    from the answer, reversed); the shorter orientation is kept, both when they tie. When
    neither connects and ``config.mixed_fallback`` is set, shortest paths whose steps may go
    either way are returned with mode ``mixed``.

    Args:
        kg: The graph (both names must be entities of it).
        topic: Topic entity name.
        answer: Answer entity name.
        config: Search settings; defaults to :class:`WeakConfig`.

    Returns:
        ``(paths, mode)``: paths start at ``topic`` and end at ``answer`` (q→a ones first, at
        most ``config.max_paths_per_pair``); mode is ``directed``, ``mixed`` or ``none``. A
        topic that is itself the answer has no connecting triple: ``([], "none")``.
    """
    config = config or WeakConfig()
    if topic == answer:
        return [], "none"
    cap, max_len = config.max_paths_per_pair, config.max_path_len
    q_to_a = kg.shortest_paths(topic, answer, "out", max_len=max_len, max_paths=cap)
    a_to_q = [p.reversed() for p in kg.shortest_paths(answer, topic, "out", max_len=max_len, max_paths=cap)]
    if q_to_a and a_to_q:
        best = min(len(q_to_a[0]), len(a_to_q[0]))
        kept = [p for p in q_to_a + a_to_q if len(p) == best]
        return kept[:cap], "directed"
    if q_to_a or a_to_q:
        return (q_to_a or a_to_q)[:cap], "directed"
    if config.mixed_fallback:
        mixed = kg.shortest_paths(topic, answer, "both", max_len=max_len, max_paths=cap)
        if mixed:
            return mixed, "mixed"
    return [], "none"


def weak_labels(
    sample: Sample, config: WeakConfig | None = None, kg: KnowledgeGraph | None = None
) -> WeakLabels:
    """Weak labels of a question: the union of weak paths over every (topic, answer) pair.

    Args:
        sample: The question and its subgraph.
        config: Search settings; defaults to :class:`WeakConfig`.
        kg: ``KnowledgeGraph.from_triples(sample.triples)`` when the caller already built it
            (triple ids must be indices into ``sample.triples``).

    Returns:
        The positive triple ids and the paths per pair. Pairs whose topic or answer is absent
        from the graph are skipped (they are not counted in ``mode_counts``).
    """
    kg = kg if kg is not None else KnowledgeGraph.from_triples(sample.triples)
    pairs = []
    for topic in topic_entities(sample, kg):
        for answer in answer_entities(sample, kg):
            paths, mode = weak_paths(kg, topic, answer, config)
            pairs.append(PairPaths(topic=topic, answer=answer, paths=tuple(paths), mode=mode))
    positives = union_triples(p for pair in pairs for p in pair.paths)
    return WeakLabels(positive_triples=positives, pairs=tuple(pairs))


def union_triples(paths: Iterable[Path]) -> tuple[int, ...]:
    """Sorted unique triple ids over ``paths``."""
    return tuple(sorted({t for p in paths for t in p.triple_ids}))
