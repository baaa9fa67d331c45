"""Answer-F1 relation paths searched through a KG store (``labels.weak.kg: {kind: sparql, ...}``).

The same search as :func:`rg.supervision.answer_paths.score_relation_paths` (every relation path
of up to ``max_len`` steps from the topic entities, scored by the F1 between the set it reaches
and the answer set, topics left out of both) with entity sets expanded by
:meth:`KGStore.neighbours` instead of the in-memory incidence index, so the whole KG can stay in
a triple store. Labels are enumerated forward first, then inverse, each by relation name (the
in-memory search goes by relation id), so paths tied on F1 and length may come in another order;
the scored set is the same. Each distinct frontier is fetched once per question.

This reads gold answers: it is supervision, for training targets and evaluation references only.
"""

from __future__ import annotations

from collections.abc import Sequence

from rg.subgraphs.store import store_ids
from rg.graph.path import INVERSE_SUFFIX
from rg.stores.base import KGStore
from rg.supervision.scored_paths import ScoredPath, best_first, scored_path


def store_relation_steps(store: KGStore, frontier: frozenset[str]) -> list[tuple[str, frozenset[str]]]:
    """Every relation label leaving ``frontier`` with the set of entities it reaches (forward labels
    first, then ``r^-1`` labels, each sorted by relation name)."""
    reached: dict[tuple[bool, str], set[str]] = {}
    for head, relation, tail in store.neighbours(sorted(frontier), "both"):
        if head in frontier:
            reached.setdefault((False, relation), set()).add(tail)
        if tail in frontier:
            reached.setdefault((True, relation), set()).add(head)
    return [(relation + (INVERSE_SUFFIX if inverse else ""), frozenset(ends))
            for (inverse, relation), ends in sorted(reached.items())]


def score_store_paths(store: KGStore, topics: Sequence[str], answers: Sequence[str],
                      max_len: int) -> list[ScoredPath]:
    """Every relation path of 1..``max_len`` steps from the topics that reaches an answer, scored.

    Args:
        store: The KG store.
        topics: Topic entities, by store id or by name (every id of the name is a start).
        answers: Answer entities, likewise (those not in the store or among the topics are ignored).
        max_len: Most relations per path.

    Returns:
        The paths reaching at least one answer, best F1 first; ties: fewer relations first, then
        enumeration order.
    """
    starts = frozenset(i for t in dict.fromkeys(topics) for i in store_ids(store, t))
    wanted = frozenset(i for a in dict.fromkeys(answers) for i in store_ids(store, a)) - starts
    if not starts or not wanted:
        return []
    found: list[ScoredPath] = []
    steps: dict[frozenset[str], list[tuple[str, frozenset[str]]]] = {}

    def visit(prefix: tuple[str, ...], frontier: frozenset[str]) -> None:
        if frontier not in steps:
            steps[frontier] = store_relation_steps(store, frontier)
        for label, reached in steps[frontier]:
            path = (*prefix, label)
            ends = reached - starts
            hits = len(ends & wanted)
            if hits:
                found.append(scored_path(path, hits, len(ends), len(wanted)))
            if len(path) < max_len:
                visit(path, reached)

    visit((), starts)
    return best_first(found)
