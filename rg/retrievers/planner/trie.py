"""Tries of the relation paths that exist in a question's graph, for constrained decoding.

RoG decodes relation paths freely and discards those that do not ground; rg restricts every
next-token choice to continuations that exist in the question's graph, so every path the
planner returns can be walked from a topic entity. The relation paths of length ≤ L that start
at the topic entities are enumerated by expanding *sets* of entities: the frontier of a relation
prefix is every entity some walk with that prefix reaches, and each (relation, direction) out of
the frontier gives one child. Parallel relations give distinct children; a step against a
triple's direction is the label ``r^-1``. The walk semantics match
:meth:`rg.graph.kg.KnowledgeGraph.ground` (walks may revisit entities), so a path is in the trie
exactly when it grounds from at least one topic entity.

The token-level trie mirrors the path grammar ``r1 <SEP> r2 ... </PATH>``: a node is a mapping
from allowed token id to the next node, and the node after ``</PATH>`` is empty.
:func:`relation_trie` / :func:`token_trie` build the whole trie (for analysis and tests);
decoding uses :func:`graph_trie`, the same trie expanded only where the beams go.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np

from rg.graph.kg import KnowledgeGraph
from rg.graph.search import relation_steps
from rg.retrievers.planner.tokenizer import PathVocab

TokenTrie = Mapping[int, "TokenTrie"]
"""Allowed token id → the trie after it; empty once the path is complete."""

DONE: TokenTrie = MappingProxyType({})
"""The (empty, read-only) node after ``</PATH>``."""


@dataclass(frozen=True)
class RelationTrie:
    """Relation paths from a set of start entities, prefix-closed.

    Attributes:
        children: Relation-path label → the trie of its continuations.
    """

    children: dict[str, "RelationTrie"]

    def paths(self) -> list[tuple[str, ...]]:
        """Every path in the trie (each prefix is itself a path), depth first."""
        out: list[tuple[str, ...]] = []
        for label, child in self.children.items():
            out.append((label,))
            out.extend((label, *rest) for rest in child.paths())
        return out

    def __len__(self) -> int:
        """Number of paths (trie nodes below the root)."""
        return sum(1 + len(child) for child in self.children.values())

    def __contains__(self, path: Sequence[str]) -> bool:
        node = self
        for label in path:
            if label not in node.children:
                return False
            node = node.children[label]
        return len(path) > 0


def relation_trie(kg: KnowledgeGraph, topics: Sequence[str], max_len: int) -> RelationTrie:
    """The relation paths of 1..``max_len`` steps that ground from at least one topic entity.

    Args:
        kg: The question's graph.
        topics: Topic entity names (those absent from ``kg`` are ignored).
        max_len: Most relations per path.
    """
    starts = np.array(sorted({kg.entity_id(t) for t in topics if kg.has_entity(t)}), dtype=np.int64)

    def expand(frontier: np.ndarray, depth: int) -> RelationTrie:
        if depth == max_len or frontier.size == 0:
            return RelationTrie({})
        return RelationTrie({label: expand(nxt, depth + 1) for label, nxt in relation_steps(kg, frontier)})

    return expand(starts, 0)


def token_trie(trie: RelationTrie, vocab: PathVocab) -> tuple[TokenTrie, int]:
    """The token-level trie of ``trie`` under ``vocab``'s path grammar.

    Relations without a token cannot be written and are left out with their continuations.

    Returns:
        ``(root, skipped)``: the trie entered after ``<PATH>`` and the number of relation-trie
        edges dropped for lack of a token.
    """
    skipped = 0

    def after_start(node: RelationTrie) -> TokenTrie:
        nonlocal skipped
        out: dict[int, TokenTrie] = {}
        for label, child in node.children.items():
            if not vocab.has(label):
                skipped += 1
                continue
            out[vocab.label_to_id[label]] = after_relation(child)
        return out

    def after_relation(node: RelationTrie) -> TokenTrie:
        out: dict[int, TokenTrie] = {vocab.end: DONE}
        deeper = after_start(node)
        if deeper:
            out[vocab.sep] = deeper
        return out

    return after_start(trie), skipped


@dataclass
class TrieStats:
    """What a lazy :class:`GraphTrie` expanded (shared by all its nodes).

    Attributes:
        expanded: Nodes expanded (one ``incident`` lookup each for relation nodes).
        skipped: Relation edges met whose label has no token (they cannot be written).
    """

    expanded: int = 0
    skipped: int = 0


class GraphTrie(Mapping[int, TokenTrie]):
    """A node of the token trie of a graph's relation paths, expanded on first access.

    The same trie as ``token_trie(relation_trie(kg, topics, max_len), vocab)``, but a node's
    children are computed only when beam search reaches it, so the cost follows the beams
    (about k nodes per step) rather than the number of paths in the graph, which grows quickly
    with the relation vocabulary and the depth.

    Args:
        kg: The question's graph.
        vocab: The planner's path vocabulary.
        frontier: Entity ids reached by the relation prefix of this node (the topic entities at the root).
        depth: Relations written so far.
        max_len: Most relations per path.
        after_relation: True for the node right after a relation token (``</PATH>`` or ``<SEP>``
            next), False where a relation token comes next.
        stats: Counters shared by the whole trie.
    """

    __slots__ = ("_kg", "_vocab", "_frontier", "_depth", "_max_len", "_after_relation", "_stats", "_children")

    def __init__(self, kg: KnowledgeGraph, vocab: PathVocab, frontier: np.ndarray, depth: int, max_len: int,
                 after_relation: bool, stats: TrieStats) -> None:
        self._kg, self._vocab, self._frontier = kg, vocab, frontier
        self._depth, self._max_len, self._after_relation = depth, max_len, after_relation
        self._stats = stats
        self._children: dict[int, TokenTrie] | None = None

    def _expand(self) -> dict[int, TokenTrie]:
        if self._children is None:
            self._stats.expanded += 1
            self._children = self._after_relation_children() if self._after_relation else self._relation_children()
        return self._children

    def _relation_children(self) -> dict[int, TokenTrie]:
        if self._depth >= self._max_len or self._frontier.size == 0:
            return {}
        out: dict[int, TokenTrie] = {}
        for label, nxt in relation_steps(self._kg, self._frontier):
            token = self._vocab.label_to_id.get(label)
            if token is None:
                self._stats.skipped += 1
                continue
            out[token] = GraphTrie(self._kg, self._vocab, nxt, self._depth + 1, self._max_len, True, self._stats)
        return out

    def _after_relation_children(self) -> dict[int, TokenTrie]:
        out: dict[int, TokenTrie] = {self._vocab.end: DONE}
        deeper = GraphTrie(self._kg, self._vocab, self._frontier, self._depth, self._max_len, False, self._stats)
        if len(deeper):
            out[self._vocab.sep] = deeper
        return out

    def __getitem__(self, token: int) -> TokenTrie:
        return self._expand()[token]

    def __iter__(self) -> Iterator[int]:
        return iter(self._expand())

    def __len__(self) -> int:
        return len(self._expand())


def graph_trie(kg: KnowledgeGraph, topics: Sequence[str], vocab: PathVocab, max_len: int) -> tuple[GraphTrie, TrieStats]:
    """The lazily expanded token trie of the relation paths (1..``max_len`` relations) that ground
    from at least one topic entity (those absent from ``kg`` are ignored); entered after ``<PATH>``.

    Returns:
        The root and the counters it updates as beam search expands it.
    """
    starts = np.array(sorted({kg.entity_id(t) for t in topics if kg.has_entity(t)}), dtype=np.int64)
    stats = TrieStats()
    return GraphTrie(kg, vocab, starts, 0, max_len, False, stats), stats
