"""Evidence exploration on the anonymised view (PrivGemo §4.3.1, Algorithm 4 TreeBiBFS).

The Hand explores the Brain's view — view triples over pseudonyms, never raw names — from all
topic entities at once. Each anchor grows walks one hop per round (both edge directions, never through an
anchor; by default no node twice except a supernode, or with :class:`Walking` ``trails`` no edge twice); after every
round the walks of an anchor are cut to the ``width`` best by the pruning score (RelevantPruning), the walks that
follow the node's indicator first (:class:`Walking` ``follow``). Walks of different anchors that end at the
same node (the *hub*, IntersectMatch) join into one tree-shaped candidate with one branch per
topic entity, so every candidate covers all topic entities and its hub is the answer it proposes.
For ``m`` topic entities and depth ``D`` a candidate's total length lies in ``(m(D−1), mD]``
(:func:`band`); a single topic thus gives walks of exactly ``D`` hops.

Prediction-driven exploration (:func:`explore_via`) starts from T_aug = T(Q) ∪ Ẽ_pred: the Brain's
predicted targets (view nodes on the paths it was shown) become auxiliary anchors, and each topic's
branch through one of them is its shown walk to the target grown up to ``depth`` more hops past it.
:func:`extend` is the Hand's own fallback when the Brain predicts nothing usable: the hubs of the
candidates that failed verification become the auxiliary anchors.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from rg.graph.path import INVERSE_SUFFIX
from rg.privacy.structure import GROUP_NODE, public_label

Triple = tuple[str, str, str]
Scorer = Callable[[Sequence[str]], np.ndarray]
"""Pruning score of texts (higher is better): :meth:`rg.reasoning.dualtower.prune.PruneScorer.__call__`."""
Labeller = Callable[[str], str]
"""What a view node shows in a pattern: :func:`rg.privacy.structure.public_label`, or a session's
:meth:`~rg.privacy.session.PrivacySession.pattern_label` (types for plaintext names, no group sizes)."""


@dataclass(frozen=True)
class ViewWalk:
    """A walk over the view from an anchor.

    Attributes:
        nodes: View nodes visited, the anchor first.
        labels: Relation labels per step as shown, ``r^-1`` for a step against the triple.
    """

    nodes: tuple[str, ...]
    labels: tuple[str, ...]

    def __len__(self) -> int:
        return len(self.labels)

    @property
    def end(self) -> str:
        return self.nodes[-1]

    def render(self, tag: str, typed: bool = False, label: Labeller = public_label) -> str:
        """``TE_1 → [r] → ent_x (film) ← [s] ← ...``; with ``typed``, nodes by ``label`` (their type) only."""
        parts = [tag]
        for relation, node in zip(self.labels, self.nodes[1:]):
            shown = f"({label(node)})" if typed else node
            if relation.endswith(INVERSE_SUFFIX):
                parts.append(f"← [{relation[: -len(INVERSE_SUFFIX)]}] ← {shown}")
            else:
                parts.append(f"→ [{relation}] → {shown}")
        return " ".join(parts)


@dataclass(frozen=True)
class Candidate:
    """One anonymised candidate: a branch per topic entity (in topic order), all ending at ``hub``."""

    branches: tuple[ViewWalk, ...]
    tags: tuple[str, ...]

    @property
    def hub(self) -> str:
        return self.branches[0].end

    def __len__(self) -> int:
        return sum(len(b) for b in self.branches)

    @property
    def relation_paths(self) -> tuple[tuple[str, ...], ...]:
        return tuple(b.labels for b in self.branches)

    def text(self) -> str:
        """As the Brain is shown it (pseudonyms and types)."""
        return " & ".join(b.render(tag) for b, tag in zip(self.branches, self.tags))

    def pattern(self, label: Labeller = public_label) -> str:
        """Relations and types only: what DRM compares with the indicator."""
        return " & ".join(b.render(tag, True, label) for b, tag in zip(self.branches, self.tags))


@dataclass(frozen=True)
class Walking:
    """How walks grow and are cut.

    Attributes:
        follow: The indicator's relation path (one topic). A walk whose labels begin it (round by round) or,
            at the last cut, equal it is kept before any other at every cut: the pruning score's memory term
            weighs exemplars of other questions and can otherwise rank every walk of the Brain's own path out.
        trails: Let a walk pass a node again, never by an edge it took already. Relation paths over a KG are
            walked as trails (MetaQA's answers: *the directors of the films written by the writer of X* reaches
            its writer-director again through the writer's other films). False (the default): no node twice.
    """

    follow: tuple[str, ...] = ()
    trails: bool = False

    def on_path(self, labels: Sequence[str]) -> bool:
        """Whether walk ``labels`` begin the followed path."""
        return bool(self.follow) and tuple(labels) == self.follow[:len(labels)]


def protected_order(scores: np.ndarray, first: Sequence[bool]) -> np.ndarray:
    """Indices by score, best first (ties: input order), those flagged ``first`` ahead of the rest."""
    order = np.argsort(-scores, kind="stable")
    flags = np.asarray(first, dtype=bool)
    if not flags.any():
        return order
    return np.concatenate([order[flags[order]], order[~flags[order]]])


def edge(node: str, label: str, other: str) -> Triple:
    """The view triple a step from ``node`` by ``label`` to ``other`` takes."""
    if label.endswith(INVERSE_SUFFIX):
        return other, label[: -len(INVERSE_SUFFIX)], node
    return node, label, other


def steps_ok(walk: ViewWalk, relation: str, other: str, trails: bool) -> bool:
    """Whether ``walk`` may go on to ``other`` by ``relation`` (:class:`Walking` ``trails``). A trail may take an
    edge at a supernode again: it stands for several raw triples (grounding takes none twice)."""
    if not trails:
        return other not in walk.nodes or revisitable(other)
    if revisitable(other) or revisitable(walk.end):
        return True
    taken = {edge(a, r, b) for a, r, b in zip(walk.nodes, walk.labels, walk.nodes[1:])}
    return edge(walk.end, relation, other) not in taken


def band(topics: int, depth: int) -> tuple[int, int]:
    """``(m(D−1), mD]`` as (exclusive low, inclusive high)."""
    return topics * (depth - 1), topics * depth


def adjacency(triples: Sequence[Triple]) -> Mapping[str, list[tuple[str, str]]]:
    """Node → (label, other node) for every edge, both directions (``r^-1`` when taken backwards)."""
    out: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for h, r, t in dict.fromkeys(triples):
        out[h].append((r, t))
        out[t].append((r + INVERSE_SUFFIX, h))
    return out


def revisitable(node: str) -> bool:
    """Whether a walk may pass ``node`` again: a supernode stands for several entities (a film and its
    genre pooled as ``entity ×2`` make the edge between them a loop on one node), so a walk through it twice
    may visit different members; grounding keeps only raw walks that visit no entity twice (with ``trails``, that
    take no triple twice)."""
    return GROUP_NODE.match(node) is not None


def grow(adj: Mapping[str, list[tuple[str, str]]], start: ViewWalk, depth: int, width: int, scorer: Scorer,
         tag: str, blocked: frozenset[str], label: Labeller = public_label,
         walking: Walking = Walking()) -> list[ViewWalk]:
    """Every walk of 1..``depth`` more hops from ``start``, cut to ``width`` per round by ``scorer`` (``walking``:
    which steps are allowed and which walks a cut keeps first)."""
    frontier = [start]
    found: list[ViewWalk] = []
    for _ in range(depth):
        nxt = [ViewWalk(w.nodes + (other,), w.labels + (relation,))
               for w in frontier for relation, other in adj.get(w.end, ())
               if other not in blocked and steps_ok(w, relation, other, walking.trails)]
        if len(nxt) > width:
            scores = scorer([w.render(tag, True, label) for w in nxt])
            keep = protected_order(scores, [walking.on_path(w.labels) for w in nxt])[:width]
            nxt = [nxt[i] for i in sorted(keep.tolist())]
        found += nxt
        frontier = nxt
        if not frontier:
            break
    return found


def explore(triples: Sequence[Triple], anchors: Sequence[str], tags: Sequence[str], depth: int,
            lengths: tuple[int, int], width: int, scorer: Scorer, per_hub: int,
            label: Labeller = public_label, walking: Walking = Walking()) -> list[Candidate]:
    """Tree-structured BiBFS from all anchors (module docstring).

    Args:
        triples: The view the Brain may see.
        anchors: The topic entities' view nodes, in topic order.
        tags: Their tags (``TE_1``...), used in renderings.
        depth: Most hops per branch.
        lengths: Total length band (exclusive low, inclusive high), e.g. :func:`band`.
        width: Walks kept per anchor and round (W1).
        scorer: Pruning score of walk patterns.
        per_hub: Branch combinations kept per hub (multi-topic).
        label: How a node shows in the patterns ``scorer`` reads.
        walking: Step rule and the followed path (which only a single anchor's walks follow).

    Returns:
        Candidates in discovery order (hubs in first-reached order).
    """
    adj = adjacency(triples)
    blocked = frozenset(anchors)
    low, high = lengths
    if len(anchors) > 1:
        walking = replace(walking, follow=())
    per_anchor = [grow(adj, ViewWalk((a,), ()), depth, width, scorer, tag, blocked, label, walking)
                  for a, tag in zip(anchors, tags)]
    if len(anchors) == 1:
        return [Candidate((w,), tuple(tags)) for w in per_anchor[0] if low < len(w) <= high]
    by_hub: list[dict[str, list[ViewWalk]]] = []
    for walks in per_anchor:
        ends: dict[str, list[ViewWalk]] = defaultdict(list)
        for w in walks:
            ends[w.end].append(w)
        by_hub.append(ends)
    out: list[Candidate] = []
    for hub in by_hub[0]:
        if not all(hub in ends for ends in by_hub[1:]):
            continue
        combos = [Candidate(branches, tuple(tags)) for branches in itertools.product(*(e[hub] for e in by_hub))]
        combos = [c for c in combos if low < len(c) <= high]
        if len(combos) > per_hub:
            scores = scorer([c.pattern(label) for c in combos])
            combos = [combos[i] for i in sorted(np.argsort(-scores, kind="stable")[:per_hub].tolist())]
        out += combos
    return out


def explore_each(triples: Sequence[Triple], anchors: Sequence[str], tags: Sequence[str], depth: int,
                 lengths: tuple[int, int], width: int, scorer: Scorer, label: Labeller = public_label,
                 walking: Walking = Walking()) -> list[Candidate]:
    """The baseline for several topic entities: each anchor explored alone (its walks may pass another anchor)
    and the single-branch candidates pooled in anchor order, each tagged with its own topic; ``lengths`` bounds
    one branch. Nothing ties a candidate to the other topic entities, which is what :func:`explore` adds."""
    return [c for anchor, tag in zip(anchors, tags)
            for c in explore(triples, [anchor], [tag], depth, lengths, width, scorer, 1, label, walking)]


def extend(triples: Sequence[Triple], seeds: Sequence[Candidate], anchors: Sequence[str], steps: int, width: int,
           scorer: Scorer, label: Labeller = public_label, walking: Walking = Walking()) -> list[Candidate]:
    """Prediction-driven exploration: the hubs of ``seeds`` become auxiliary anchors and the
    seeds' first branch grows up to ``steps`` more hops past them (single-branch seeds only)."""
    adj = adjacency(triples)
    out: list[Candidate] = []
    for seed in seeds:
        if len(seed.branches) != 1:
            continue
        grown = grow(adj, seed.branches[0], steps, width, scorer, seed.tags[0], frozenset(anchors), label, walking)
        out += [Candidate((w,), seed.tags) for w in grown]
    return out


def explore_via(triples: Sequence[Triple], anchors: Sequence[str], tags: Sequence[str],
                via: Sequence[Sequence[ViewWalk]], depth: int, width: int, scorer: Scorer,
                per_hub: int, label: Labeller = public_label, walking: Walking = Walking()) -> list[Candidate]:
    """Exploration from T_aug = topics ∪ predicted anchors (PrivGemo's prediction-driven phase).

    Args:
        triples: The view.
        anchors: The topic entities' view nodes, in topic order.
        tags: Their tags.
        via: Per topic, walks from it to predicted anchors (the shown walks the Brain named a node of).
        depth: Most hops grown past a predicted anchor (D_max).
        width: Walks kept per round (W1).
        scorer: Pruning score of walk patterns.
        per_hub: Branch combinations kept per hub (multi-topic).
        walking: Step rule and the followed path (one topic only).

    Returns:
        Candidates with at least one branch through a predicted anchor (the walk to the anchor itself
        included: the anchor may be the answer), every branch ending at the same hub; several topics
        meet at a hub as in :func:`explore`, the other branches being the topics' own walks.
    """
    adj = adjacency(triples)
    blocked = frozenset(anchors)
    if len(anchors) > 1:
        walking = replace(walking, follow=())
    through: list[list[ViewWalk]] = []
    for walks, tag in zip(via, tags):
        grown: list[ViewWalk] = []
        for walk in walks:
            grown += [walk] + grow(adj, walk, depth, width, scorer, tag, blocked, label, walking)
        through.append(list(dict.fromkeys(grown)))
    if len(anchors) == 1:
        return [Candidate((w,), tuple(tags)) for w in through[0]]
    own = [grow(adj, ViewWalk((a,), ()), depth, width, scorer, tag, blocked, label, walking)
           for a, tag in zip(anchors, tags)]
    out: list[Candidate] = []
    hubs = dict.fromkeys(w.end for walks in through for w in walks)
    for hub in hubs:
        options = [[(w, True) for w in t if w.end == hub] + [(w, False) for w in o if w.end == hub]
                   for t, o in zip(through, own)]
        combos = [Candidate(tuple(w for w, _ in combo), tuple(tags)) for combo in itertools.product(*options)
                  if any(flag for _, flag in combo)]
        combos = list(dict.fromkeys(combos))
        if len(combos) > per_hub:
            scores = scorer([c.pattern(label) for c in combos])
            combos = [combos[i] for i in sorted(np.argsort(-scores, kind="stable")[:per_hub].tolist())]
        out += combos
    return out
