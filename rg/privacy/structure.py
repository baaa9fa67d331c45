"""The structure sanitiser and the structural uniqueness of what the Brain sees (PrivGemo §4.1).

Pseudonyms hide names, but the shape of a view can still single an entity out: a film with
three directors and an Oscar is unique even as ``ent_3f9a2c1d (film)``. This module measures
that and reduces it, on the anonymised working subgraph (view triples from
:meth:`rg.privacy.PrivacySession.anonymise_triples`):

- :func:`structural_uniqueness`: every exposed non-anchor entity gets the 2-hop
  Weisfeiler–Lehman signature of its node (Shervashidze et al., 2011) over public labels (the
  coarse type; never the pseudonym) and relation labels, edges taken in both directions. An
  entity whose signature class holds no other entity is *unique*; ``k`` is the smallest class
  (the view's k-anonymity). A supernode of ``n`` members counts as ``n`` entities in its class.
- :func:`sanitise`: keeps the nodes most tied to the topic anchors by personalised PageRank
  under a budget of exposed nodes and edges, then groups non-anchor entities with the same
  public label and the same set of (direction, relation) pairs into supernodes
  (``ent_group_3 (person ×12)``), pooling the classes too small to hide in by type alone. The
  Hand keeps each group's members, so paths the Brain picks through a group are grounded on the
  raw subgraph afterwards.
- :func:`assess`: both measures before and after, with whether an answer is still reachable
  from an anchor in the view, so the privacy/utility trade-off is a number.
"""

from __future__ import annotations

import functools
import itertools
import math
import re
from collections import Counter, defaultdict, deque
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import pandas as pd
from pydantic import Field

from rg.config import Config
from rg.privacy.kernels import grow_tree, spread_rounds
from rg.privacy.schema import UNKNOWN

Triple = tuple[str, str, str]
VIEW_NODE = re.compile(r"^(?:ent|lit)_[0-9a-f]{4,64} \((?P<label>.*)\)$")
GROUP_NODE = re.compile(r"^ent_group_\d+ \((?P<label>.*) ×(?P<size>\d+)\)$")
ANCHOR_LABEL = "TE"
GENERIC_LABEL = UNKNOWN
"""The label of a supernode pooling entities of types too rare in the view to hide in (a public word)."""


class SanitiserConfig(Config):
    """How the structure sanitiser shrinks the Brain's view.

    ``max_nodes``/``max_edges`` of ``None`` keep everything connected to an anchor.
    """

    group: bool = Field(True, description="Merge entities of one type and relation signature into supernodes.")
    min_group: int = Field(
        2, ge=2, le=1000,
        description="Entities whose (type, relation signature) class is smaller than this are pooled by type alone.",
    )
    max_nodes: Optional[int] = Field(
        None, ge=1, description="Entities whose structure the Brain may see, before grouping (anchors always kept)."
    )
    max_edges: Optional[int] = Field(None, ge=1, description="Exposed edge budget.")
    restart: float = Field(0.15, gt=0.0, lt=1.0, description="Personalised PageRank's jump back to the anchors.")
    iterations: int = Field(40, ge=1, le=1000, description="Personalised PageRank's power iterations.")
    wl_rounds: int = Field(2, ge=1, le=5, description="Weisfeiler–Lehman rounds of the uniqueness signature (hops).")


def public_label(node: str) -> str:
    """What a view node reveals beyond its pseudonym: ``ent_3f9a2c1d (film)`` → ``film``.

    A group keeps its size (``person ×12``); a node shown as-is (a year, a schema type node,
    a plaintext name) is its own label.
    """
    group = GROUP_NODE.match(node)
    if group:
        return f"{group['label']} ×{group['size']}"
    match = VIEW_NODE.match(node)
    return match["label"] if match else node


@dataclass(frozen=True)
class Uniqueness:
    """How identifiable the exposed entities are by structure alone.

    Attributes:
        entities: Exposed non-anchor entities (a supernode counts its members).
        unique: Those whose signature class holds only themselves.
        k: The smallest signature class (k-anonymity of the view); 0 when nothing is exposed.
    """

    entities: int
    unique: int
    k: int

    @property
    def share(self) -> float:
        """Share of exposed entities that are structurally unique (0 when none are exposed)."""
        return self.unique / self.entities if self.entities else 0.0


@dataclass(frozen=True)
class SanitisedView:
    """The view after sanitisation, and what the Hand needs to ground it.

    Attributes:
        triples: View triples the Brain may be shown (distinct).
        anchors: The topic entities' view nodes.
        groups: Supernode → the view nodes it stands for (kept on the Hand's side).
    """

    triples: tuple[Triple, ...]
    anchors: frozenset[str]
    groups: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def nodes(self) -> set[str]:
        return {n for h, _, t in self.triples for n in (h, t)} | set(self.anchors)

    def node_of(self, member: str) -> str:
        """The exposed node standing for a view node: its group, or itself."""
        for group, members in self.groups.items():
            if member in members:
                return group
        return member

    def weights(self) -> dict[str, int]:
        return {g: len(m) for g, m in self.groups.items()}


@dataclass(frozen=True)
class StructureReport:
    """Uniqueness, size and answer reachability of one question's view, before and after."""

    before: Uniqueness
    after: Uniqueness
    nodes_before: int
    nodes_after: int
    edges_before: int
    edges_after: int
    reachable_before: bool
    reachable_after: bool


SMALL_VIEW = 256
"""Triples under which a view is numbered with dicts: pandas' hash table pays tens of microseconds a call,
which a dict spends on a few hundred values."""


class ViewGraph:
    """A view as integer arrays: its distinct triples, node names, and edges (head, relation id, tail).

    Built once per view and shared by what reads it (the session guards :attr:`names` and prunes the
    same graph: :func:`prune_graph`).
    """

    def __init__(self, triples: Iterable[Triple], extra: Iterable[str] = ()) -> None:
        given, extra = list(triples), list(extra)
        # nodes numbered in order of first appearance (h1, t1, h2, t2, ...), then the extra ones; relations
        # likewise; a repeated triple counts once, where it first appears
        if len(given) < SMALL_VIEW:
            given = list(dict.fromkeys(given))
            nodes: dict[str, int] = {}
            relations: dict[str, int] = {}
            ends = [nodes.setdefault(n, len(nodes))
                    for n in itertools.chain(itertools.chain.from_iterable((h, t) for h, _, t in given), extra)]
            codes = np.array(ends, dtype=np.int64)
            rels = np.array([relations.setdefault(r, len(relations)) for _, r, _ in given], dtype=np.int64)
            self.names: list[str] = list(nodes)
            heads, tails = codes[0:2 * len(given):2], codes[1:2 * len(given):2]
        else:  # pandas' hash table numbers them in C
            m = len(given)
            columns = np.fromiter(itertools.chain.from_iterable(given), dtype=object, count=3 * m).reshape(m, 3)
            rels = pd.factorize(columns[:, 1], sort=False)[0].astype(np.int64)
            codes, names = pd.factorize(np.concatenate([columns[:, ::2].ravel(), np.array(extra, dtype=object)]),
                                        sort=False)
            codes = codes.astype(np.int64)
            heads, tails = codes[0:2 * m:2], codes[1:2 * m:2]
            self.names = names.tolist()
            # a node or relation first appears in a triple's first occurrence, so this numbering is that of
            # the distinct triples: only the repeats are dropped
            key = (heads * (int(rels.max(initial=-1)) + 1) + rels) * len(self.names) + tails
            first = np.unique(key, return_index=True)[1]
            if len(first) < m:
                first.sort()
                heads, rels, tails = heads[first], rels[first], tails[first]
                given = [given[i] for i in first.tolist()]
        self.triples: list[Triple] = given
        self.heads, self.rels, self.tails = heads, rels, tails
        self._extra = dict(zip(extra, codes[len(codes) - len(extra):].tolist()))

    def number(self, node: str) -> int:
        """A node's number (an extra node's without building :attr:`index`, which costs a dict of every node)."""
        found = self._extra.get(node)
        return self.index[node] if found is None else found

    @functools.cached_property
    def index(self) -> dict[str, int]:
        """Node name → number."""
        return dict(zip(self.names, itertools.count()))

    def __len__(self) -> int:
        return len(self.names)

    def incident(self) -> list[list[tuple[int, int, int]]]:
        """Per node: (direction, relation, other end) of every edge, 0 = outgoing, 1 = incoming."""
        out: list[list[tuple[int, int, int]]] = [[] for _ in self.names]
        for h, r, t in zip(self.heads.tolist(), self.rels.tolist(), self.tails.tolist()):
            out[h].append((0, r, t))
            out[t].append((1, r, h))
        return out


def wl_colours(graph: ViewGraph, labels: Sequence[str], rounds: int) -> list[int]:
    """Weisfeiler–Lehman colours after ``rounds`` refinements of ``labels`` (directed, relation-labelled)."""
    palette: dict[object, int] = {}
    colour = [palette.setdefault(("label", label), len(palette)) for label in labels]
    incident = graph.incident()
    for _ in range(rounds):
        colour = [
            palette.setdefault((colour[v], tuple(sorted((d, r, colour[u]) for d, r, u in incident[v]))), len(palette))
            for v in range(len(graph))
        ]
    return colour


def pseudonymous(node: str) -> bool:
    """Whether a view node stands for hidden entities (a pseudonym or a supernode), not a public word."""
    return bool(VIEW_NODE.match(node) or GROUP_NODE.match(node))


def structural_uniqueness(
    triples: Iterable[Triple],
    anchors: Collection[str],
    weights: Mapping[str, int] | None = None,
    rounds: int = 2,
    counted: Callable[[str], bool] = pseudonymous,
) -> Uniqueness:
    """How many exposed non-anchor entities a ``rounds``-hop WL signature singles out (module docstring).

    Args:
        triples: The view as the Brain sees it.
        anchors: The topic entities' view nodes (labelled as anchors, not counted).
        weights: Entities behind a node (supernodes); 1 where absent.
        rounds: Hops of the signature.
        counted: Which nodes are entities to protect: by default pseudonyms and supernodes; schema
            words and coarse literals (``Person``, ``year 1987``) shape the signatures but are
            public values, not entities. Pass ``lambda n: True`` for a plaintext view.
    """
    graph = ViewGraph(triples)
    labels = [ANCHOR_LABEL if n in anchors else public_label(n) for n in graph.names]
    colours = wl_colours(graph, labels, rounds)
    weights = weights or {}
    members = [(colours[i], weights.get(n, 1)) for i, n in enumerate(graph.names)
               if n not in anchors and counted(n)]
    size: Counter[int] = Counter()
    for colour, weight in members:
        size[colour] += weight
    entities = sum(w for _, w in members)
    unique = sum(w for c, w in members if size[c] == 1)
    return Uniqueness(entities=entities, unique=unique, k=min(size.values(), default=0))


def personalised_pagerank(graph: ViewGraph, seeds: Sequence[int], restart: float, iterations: int) -> np.ndarray:
    """Personalised PageRank from ``seeds`` over the undirected view (Jeh & Widom, 2003).

    Shapes:
        returns: ``[nodes]``, summing to at most 1 (mass at a dangling node is not spread).
    """
    n = len(graph)
    if n == 0 or not seeds:
        return np.zeros(n)
    src = np.concatenate([graph.heads, graph.tails])
    dst = np.concatenate([graph.tails, graph.heads])
    degree = np.bincount(src, minlength=n).astype(np.float64)
    jump = np.zeros(n)
    jump[list(seeds)] = 1.0 / len(seeds)
    score = jump.copy()
    share = np.divide(1.0, degree, out=np.zeros(n), where=degree > 0)[src]  # per edge: 1 / its source's degree
    # score = restart * jump + (1 - restart) * spread(score), each round's spread summed in edge order
    return spread_rounds(src, dst, share, restart * jump, score, restart, iterations)


def connected(graph: ViewGraph, seeds: Sequence[int]) -> bytearray:
    """Which nodes are connected to a seed, edges taken in both directions (1 per node that is).

    A search in Python over the edge list: it serves views small enough to keep whole, where numpy's
    per-call cost would exceed the work.
    """
    neighbours: list[list[int]] = [[] for _ in range(len(graph))]
    for h, t in zip(graph.heads.tolist(), graph.tails.tolist()):
        neighbours[h].append(t)
        neighbours[t].append(h)
    reached = bytearray(len(graph))
    stack = list(seeds)
    for seed in stack:
        reached[seed] = 1
    while stack:
        for other in neighbours[stack.pop()]:
            if not reached[other]:
                reached[other] = 1
                stack.append(other)
    return reached


def group_nodes(
    triples: Sequence[Triple], anchors: Collection[str], min_group: int = 2
) -> tuple[list[Triple], dict[str, tuple[str, ...]]]:
    """Merge non-anchor nodes of one public label and (direction, relation) set into supernodes.

    A generalisation in three levels (as in k-anonymity): classes of fewer than ``min_group``
    nodes are pooled with the other small classes of their label, so a node whose relations
    alone would single it out hides among the others of its type; pseudonymous nodes of a type
    still too rare are pooled under the generic label ``entity``. Nodes shown as-is (schema
    words, coarse literals) are only ever grouped with their own label. Groups are numbered in
    order of first appearance in ``triples``; a node left alone stays as it is.
    """
    signature: dict[str, set[tuple[int, str]]] = defaultdict(set)
    order: dict[str, None] = {}
    for h, r, t in triples:
        signature[h].add((0, r))
        signature[t].add((1, r))
        order.setdefault(h)
        order.setdefault(t)
    classes: dict[tuple[str, frozenset[tuple[int, str]]], list[str]] = defaultdict(list)
    for node in order:
        if node not in anchors:
            classes[(public_label(node), frozenset(signature[node]))].append(node)
    by_type: dict[tuple[str, frozenset[tuple[int, str]]], list[str]] = defaultdict(list)
    for (label, relations), members in classes.items():
        by_type[(label, relations) if len(members) >= min_group else (label, frozenset())].extend(members)
    pooled: dict[tuple[str, frozenset[tuple[int, str]]], list[str]] = defaultdict(list)
    for (label, relations), members in by_type.items():
        pseudonymous = all(VIEW_NODE.match(m) for m in members)
        small = len(members) < min_group and pseudonymous
        pooled[(GENERIC_LABEL, frozenset()) if small else (label, relations)].extend(members)
    rename: dict[str, str] = {}
    groups: dict[str, tuple[str, ...]] = {}
    for (label, _), members in pooled.items():
        if len(members) > 1:
            name = f"ent_group_{len(groups) + 1} ({label} ×{len(members)})"
            groups[name] = tuple(members)
            rename.update({m: name for m in members})
    merged = dict.fromkeys((rename.get(h, h), r, rename.get(t, t)) for h, r, t in triples)
    return list(merged), groups


def prune(triples: Sequence[Triple], anchors: frozenset[str], config: SanitiserConfig) -> list[Triple]:
    """The part of the view most tied to the anchors, grown best-first under the budgets.

    Nodes join one at a time from the frontier of what is kept, the one personalised PageRank
    ranks highest first (ties: first appearance in ``triples``), each by the edge that reached
    it, so everything kept stays connected to an anchor; then the other edges among the kept
    nodes, strongest first, fill the edge budget. Nodes not connected to an anchor are never
    kept: they only expose. Duplicate triples count once.
    """
    return prune_graph(ViewGraph(triples, extra=sorted(anchors)), anchors, config)


def prune_graph(graph: ViewGraph, anchors: frozenset[str], config: SanitiserConfig) -> list[Triple]:
    """:func:`prune` on a view already built, whose nodes include ``anchors``.

    A view whose nodes all fit the node budget, without an edge budget, keeps every edge connected to
    an anchor, in its own order: then no score can change what is kept, and none is computed.
    """
    triples = graph.triples
    seeds = [graph.number(a) for a in sorted(anchors)]
    if config.max_edges is None and (config.max_nodes is None or len(graph) <= max(config.max_nodes, len(seeds))):
        reached = connected(graph, seeds)
        return [triple for triple, head in zip(triples, graph.heads.tolist()) if reached[head]]
    score = personalised_pagerank(graph, seeds, config.restart, config.iterations)
    src = np.concatenate([graph.heads, graph.tails])
    order = np.argsort(src, kind="stable")  # each node's edges, in edge order
    neighbours = np.concatenate([graph.tails, graph.heads])[order]
    vias = np.concatenate([np.arange(len(triples))] * 2)[order]
    starts = np.searchsorted(src[order], np.arange(len(graph) + 1))
    node_budget = math.inf if config.max_nodes is None else max(0, config.max_nodes - len(seeds))
    edge_budget = math.inf if config.max_edges is None else config.max_edges
    limit = min(node_budget, edge_budget, len(graph))  # a node joins once: never more than the nodes
    tree = grow_tree(starts, neighbours, vias, -score, seeds, int(limit)).tolist()
    kept_nodes = np.zeros(len(graph), dtype=bool)
    kept_nodes[seeds] = True
    kept_nodes[graph.heads[tree]] = kept_nodes[graph.tails[tree]] = True  # a tree edge's ends are both kept
    others = np.flatnonzero(kept_nodes[graph.heads] & kept_nodes[graph.tails])
    others = others[~np.isin(others, tree)]
    room = len(others) if math.isinf(edge_budget) else max(0, int(edge_budget) - len(tree))
    weakest_end = np.minimum(score[graph.heads[others]], score[graph.tails[others]])
    extra = others[np.lexsort((others, -weakest_end))][:room]
    return [triples[e] for e in sorted([*tree, *extra.tolist()])]


def sanitise(triples: Iterable[Triple], anchors: Collection[str], config: SanitiserConfig) -> SanitisedView:
    """Prune the view to the budgets (:func:`prune`), then group what is left (:func:`group_nodes`).

    Pruning first keeps the cost in the budget, not in the subgraph: the node budget bounds the
    entities whose structure the Brain sees at all, and grouping then hides them among each other.
    """
    anchors = frozenset(anchors)
    view = prune(list(triples), anchors, config)
    groups: dict[str, tuple[str, ...]] = {}
    if config.group:
        view, groups = group_nodes(view, anchors, config.min_group)
    return SanitisedView(tuple(view), anchors, groups)


def reachable(triples: Iterable[Triple], anchors: Collection[str], targets: Collection[str]) -> bool:
    """Whether any of ``targets`` is connected to an anchor in the view (edges in either direction)."""
    neighbours: dict[str, set[str]] = defaultdict(set)
    for h, _, t in triples:
        neighbours[h].add(t)
        neighbours[t].add(h)
    wanted = set(targets)
    seen = set(anchors)
    queue = deque(seen)
    while queue:
        node = queue.popleft()
        if node in wanted:
            return True
        for other in neighbours[node] - seen:
            seen.add(other)
            queue.append(other)
    return False


def assess(
    triples: Sequence[Triple],
    anchors: Collection[str],
    answers: Collection[str],
    config: SanitiserConfig,
    counted: Callable[[str], bool] = pseudonymous,
) -> tuple[SanitisedView, StructureReport]:
    """Sanitise one question's view and measure it before and after.

    Args:
        triples: The anonymised view.
        anchors: The topic entities' view nodes.
        answers: The answers' view nodes (evaluation only: gold answers never steer the sanitiser).
        config: Grouping and budgets.
        counted: Which nodes are entities to protect (see :func:`structural_uniqueness`).
    """
    distinct = list(dict.fromkeys(triples))
    before = structural_uniqueness(distinct, anchors, rounds=config.wl_rounds, counted=counted)
    view = sanitise(distinct, anchors, config)
    after = structural_uniqueness(view.triples, anchors, view.weights(), rounds=config.wl_rounds, counted=counted)
    nodes_before = len({n for h, _, t in distinct for n in (h, t)} | set(anchors))
    report = StructureReport(
        before=before,
        after=after,
        nodes_before=nodes_before,
        nodes_after=len(view.nodes),
        edges_before=len(distinct),
        edges_after=len(view.triples),
        reachable_before=reachable(distinct, anchors, answers),
        reachable_after=reachable(view.triples, anchors, {view.node_of(a) for a in answers}),
    )
    return view, report
