"""From one question's retrieved triples to evidence lines (ReG stage S(II)).

:func:`build_evidence` runs the whole stage: BFS walks from the topic entities
(:mod:`rg.evidence.expand`; with ``through_topics: drop``, none passing through another topic),
multi-answer merging, unanchored one-step chains for the triples no walk used, multi-entity
merging (:mod:`rg.evidence.merge`), and orders the lines for a prompt.
:func:`triple_evidence` is the baseline without any of it: one line per retrieved triple, in
retrieval order (the input SubgraphRAG gives its reader). Both return an :class:`Evidence`,
which readers take, and its :class:`EvidenceStats` say how many lines the triples became::

    triples, scores = top_k_triples(sample.triples, retriever_scores, k=100)
    evidence = build_evidence(triples, scores, sample.q_entities, EvidenceConfig(max_length=3))
    prompt_block = evidence.text()
    evidence.stats.triples_in, evidence.stats.chains_out
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Sequence

import numpy as np

from rg.data.sample import Triple
from rg.evidence.chains import EvidenceChain, EvidenceItem, Walk, item_chains, item_sort_key
from rg.evidence.config import EvidenceConfig
from rg.evidence.expand import adjacency, check_scores, drop_detours, expand_walks, unused_triples
from rg.evidence.merge import merge_answers, merge_entities, triple_walk, unanchored_chains


@dataclass(frozen=True)
class EvidenceStats:
    """Counts of one question's evidence construction.

    Attributes:
        triples_in: Retrieved triples given.
        topics: Topic entities found among them (the BFS sources).
        walks: BFS walks, one per ``(topic, reached entity)`` pair (mirrored topic-to-topic
            walks dropped).
        triples_chained: Distinct triples on at least one walk.
        unanchored: Triples kept as unanchored one-step chains.
        dropped: Triples in no line (unused by walks, with ``keep_unanchored`` off).
        chains: Chains after multi-answer merging (anchored and unanchored), before grouping.
        groups: Multi-entity groups.
        chains_out: Evidence lines: chains and groups after all merging (a group is one line).
        walk_source: Where the walks came from: ``bfs`` (:func:`build_evidence`), ``planned``
            (a planner's decoded paths, :mod:`rg.evidence.planned`), ``bfs_fallback`` (planned
            walks were asked for but the decoded paths reach no entity besides the topics), or
            ``none`` (raw triple lines).
    """

    triples_in: int
    topics: int
    walks: int
    triples_chained: int
    unanchored: int
    dropped: int
    chains: int
    groups: int
    chains_out: int
    walk_source: str = "bfs"

    def to_dict(self) -> dict[str, int | str]:
        return asdict(self)


@dataclass(frozen=True)
class Evidence:
    """The evidence of one question, as readers take it.

    Attributes:
        triples: The retrieved triples; every walk's triple ids index them.
        scores: Their retriever scores, aligned with ``triples``.
        topics: Topic entities found in ``triples``, in question order.
        items: The evidence lines (chains and groups), in prompt order.
        stats: Counts of the construction.
    """

    triples: tuple[Triple, ...]
    scores: tuple[float, ...]
    topics: tuple[str, ...]
    items: tuple[EvidenceItem, ...]
    stats: EvidenceStats

    def lines(self) -> tuple[str, ...]:
        """One rendered line per item (see :mod:`rg.evidence.chains` for the notation)."""
        return tuple(item.render() for item in self.items)

    def text(self, max_lines: int | None = None) -> str:
        """The first ``max_lines`` lines (all when None), newline-separated."""
        lines = self.lines()
        return "\n".join(lines if max_lines is None else lines[:max_lines])

    def chains(self) -> tuple[EvidenceChain, ...]:
        """Every chain, group members included, in item order."""
        return tuple(c for item in self.items for c in item_chains(item))

    def ends(self) -> tuple[str, ...]:
        """Distinct chain ends (the answer candidates) in item order."""
        return tuple(dict.fromkeys(e for c in self.chains() for e in c.ends))

    def supporting(self, entity: str) -> tuple[EvidenceChain, ...]:
        """The chains that end at ``entity``, each restricted to its walks ending there."""
        restricted = (c.restrict((entity,)) for c in self.chains())
        return tuple(c for c in restricted if c is not None)


def _resolve_topics(topics: Sequence[str], triples: Sequence[Triple]) -> tuple[str, ...]:
    entities = {e for h, _r, t in triples for e in (h, t)}
    return tuple(e for e in dict.fromkeys(topics) if e in entities)


def build_evidence(
    triples: Sequence[Triple],
    scores: Sequence[float] | np.ndarray | None,
    topics: Sequence[str],
    config: EvidenceConfig | None = None,
) -> Evidence:
    """Reorganise one question's retrieved triples into evidence chains (ReG stage S(II)).

    Args:
        triples: Retrieved ``(head, relation, tail)`` triples, usually a retriever's top K.
        scores: Their retriever scores (higher is more relevant); None scores every triple 0,
            so ties fall to triple order.
        topics: The question's topic entities (``Sample.q_entities``); those absent from
            ``triples`` are ignored.
        config: Chain length and merging switches (defaults when None).

    Returns:
        The evidence; lines are ordered by :func:`rg.evidence.chains.item_sort_key` with ``config.order``.

    Raises:
        ValueError: If ``scores`` does not match ``triples`` or holds NaN.
    """
    config = config if config is not None else EvidenceConfig()
    triples = tuple(tuple(t) for t in triples)  # type: ignore[misc]
    values = check_scores(triples, scores)
    found = _resolve_topics(topics, triples)
    walks = expand_walks(triples, values, found, config.max_length, adjacency(triples))
    if config.through_topics == "drop":
        walks = drop_detours(walks, found)
    return assemble_evidence(triples, values, found, walks, config)


def assemble_evidence(
    triples: tuple[Triple, ...],
    values: tuple[float, ...],
    found: tuple[str, ...],
    walks: Sequence[Walk],
    config: EvidenceConfig,
    walk_source: str = "bfs",
) -> Evidence:
    """Merge walks from the topic entities into evidence lines (the part of :func:`build_evidence`
    after the walks are found; :mod:`rg.evidence.planned` finds them another way).

    Args:
        triples: The triples the walks' triple ids index.
        values: Their scores.
        found: Topic entities present in ``triples``.
        walks: Walks from those topics.
        config: Merging switches and ``keep_unanchored``.
        walk_source: Recorded in the stats (``bfs`` or ``planned``).
    """
    unused = unused_triples(len(triples), walks)
    anchored = merge_answers(walks, anchored=True, merge=config.merge_answers)
    loose = unanchored_chains(triples, values, unused, merge=config.merge_answers) if config.keep_unanchored else []
    items: list[EvidenceItem] = merge_entities(anchored) if config.merge_entities else list(anchored)
    items.extend(loose)
    items.sort(key=lambda item: item_sort_key(item, config.order))
    stats = EvidenceStats(
        triples_in=len(triples),
        topics=len(found),
        walks=len(walks),
        triples_chained=len(triples) - len(unused),
        unanchored=len(unused) if config.keep_unanchored else 0,
        dropped=0 if config.keep_unanchored else len(unused),
        chains=len(anchored) + len(loose),
        groups=sum(1 for item in items if not isinstance(item, EvidenceChain)),
        chains_out=len(items),
        walk_source=walk_source,
    )
    return Evidence(triples=triples, scores=values, topics=found, items=tuple(items), stats=stats)


def triple_evidence(
    triples: Sequence[Triple], scores: Sequence[float] | np.ndarray | None = None, topics: Sequence[str] = ()
) -> Evidence:
    """The raw baseline: one unanchored line ``h → [r] → t`` per triple, in input order.

    Args:
        triples: Retrieved triples (keep the retriever's rank order; it is the line order).
        scores: Their scores (None: all 0).
        topics: Topic entities (recorded, so readers can exclude them from answers).
    """
    triples = tuple(tuple(t) for t in triples)  # type: ignore[misc]
    values = check_scores(triples, scores)
    items = tuple(EvidenceChain((triple_walk(triples, values, i),), anchored=False) for i in range(len(triples)))
    n = len(triples)
    found = _resolve_topics(topics, triples)
    stats = EvidenceStats(
        triples_in=n, topics=len(found), walks=0, triples_chained=0, unanchored=n, dropped=0, chains=n, groups=0,
        chains_out=n, walk_source="none",
    )
    return Evidence(triples=triples, scores=values, topics=found, items=items, stats=stats)


def top_k_triples(
    triples: Sequence[Triple], scores: Sequence[float] | np.ndarray, k: int | None, min_score: float | None = None
) -> tuple[tuple[Triple, ...], tuple[float, ...]]:
    """The ``k`` best-scored triples and their scores, best first (equal scores keep input order).

    Args:
        triples: All triples of a question's subgraph.
        scores: One score per triple.
        k: How many to keep; None keeps all (ranked).
        min_score: Also drop triples scoring below this (None: no floor).

    Raises:
        ValueError: On a length mismatch, NaN scores, or ``k < 0``.

    Shapes:
        scores: (T,) -> top scores (min(k, T),)
    """
    values = np.asarray(check_scores(triples, scores), dtype=np.float64)  # (T,)
    if k is not None and k < 0:
        raise ValueError(f"k must be >= 0 or None, got {k}")
    order = np.argsort(-values, kind="stable")[:k]  # (min(k, T),)
    if min_score is not None:
        order = order[values[order] >= min_score]
    return tuple(tuple(triples[i]) for i in order), tuple(float(values[i]) for i in order)  # type: ignore[misc]
