"""The Hand: the trusted tower over the raw KG (PrivGemo §4.1–4.3).

It finds the topic entities (given, or linked with :class:`rg.linking.EntityLinker`), cuts the
working subgraph from a :class:`rg.stores.KGStore` (or takes a question's own triples), builds the
Brain's view through :meth:`rg.privacy.PrivacySession.expose` (anonymised, guarded, sanitised),
writes the schema hints (relation paths of the view from the topics, no entities), and — after
exploration and pruning — de-anonymises the kept candidates by grounding them on the raw
subgraph, refines them into evidence, checks sufficiency (every topic entity reaches a common end
the reader can answer, of the indicator's type when it names one) and answers with the local reader.

Grounding follows a kept view path step by step on the raw subgraph: from the raw topic entity,
along raw triples whose relation the view shows as the step's label (a cluster in ``privacy``
mode stands for several raw relations) to raw entities whose view node is the path's next node (a
supernode stands for its members). The raw relation sequences found are then walked from the
topic entities again (:meth:`rg.graph.KnowledgeGraph.path_end_walks`), so a kept path brings all
the answers its relation chain reaches; a multi-topic candidate keeps the ends every branch reaches.

In ``privacy`` mode one view path can ground to several raw relation sequences (the cluster
``rel_05 (type_05→type_07)`` stands for ``directed_by``, ``written_by`` and ``starred_actors``).
The Brain cannot tell them apart, but the Hand holds the raw question: with
``hand.resolve_clusters: question`` it keeps the raw sequences scoring closest to the raw
question (:func:`question_scorer`: the DRM plus the words' overlap), those the Hand's own raw-relation
planner finds most likely for the raw question with ``planner`` (:func:`planner_scorer`), all of them
with ``all``; candidates whose view paths are the same for the Brain are then ordered by the same score
(:func:`refine_order`). This is the path refinement step of PrivGemo's Hand; nothing of it leaves the Hand.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from itertools import chain
from dataclasses import dataclass, field

from rg.data.sample import Triple
from rg.evidence.build import Evidence, assemble_evidence
from rg.evidence.chains import Walk
from rg.evidence.config import EvidenceConfig
from rg.graph import KnowledgeGraph, Path
from rg.graph.path import split_relation
from rg.linking.linker import EntityLinker
from rg.privacy.names import NAMES_UNAVAILABLE, NameBook
from rg.privacy.schema import KGSchema
from rg.privacy.session import PrivacySession
from rg.privacy.structure import SanitisedView, public_label
from rg.privacy.written import WrittenNames
from rg.reasoning.dualtower.brain import Indicator
from rg.reasoning.dualtower.config import DualTowerConfig
from rg.reasoning.dualtower.explore import Candidate
from rg.reasoning.dualtower.local_brain import answer_type as cluster_answer_type
from rg.reasoning.dualtower.similarity import HybridSimilarity, LexicalSimilarity, Similarity
from rg.retrievers.planner.likelihood import path_log_likelihood
from rg.retrievers.planner.model import PlannerModel
from rg.retrievers.planner.prompt import mask_topics
from rg.retrievers.planner.trie import relation_trie
from rg.stores.base import KGStore, StoreError
from rg.supervision.selectors import verbalise_relation_path

NAME_BATCH = 512
"""Entities per name lookup: a lookup that fails withholds only its batch."""
MAX_GROUNDINGS = 64
"""Raw walks kept per branch when grounding one view path (a supernode can stand for many)."""
TIE = 1e-6
"""Raw relation sequences scoring within this of the best are all kept."""

RawScorer = Callable[[Sequence[tuple[str, ...]]], Sequence[float]]
"""The Hand's score of raw relation sequences against the raw question (higher: closer)."""


def question_scorer(similarity: Similarity, question: str, topics: Sequence[str] = ()) -> RawScorer:
    """Scores raw relation sequences against the raw ``question`` with its topic mentions masked: the DRM's
    similarity plus the Dice overlap of their words. ``("directed_by",)`` is read as ``directed by``, a
    backward step as ``... (reverse)``. Runs on the Hand only.

    The overlap is added because the sentence encoder hardly tells MetaQA's relations apart: for "who
    directed <e>" it scores ``directed by`` 0.619 and ``starred actors`` 0.607 (and with the film's title
    left in, ``starred actors`` higher), while the shared word settles it.
    """
    masked = mask_topics(question, topics)
    lexical = LexicalSimilarity()
    if isinstance(similarity, HybridSimilarity):
        similarity = similarity.dense  # the overlap is added once, below
    known: dict[tuple[str, ...], float] = {}

    def score(paths: Sequence[tuple[str, ...]]) -> list[float]:
        new = list(dict.fromkeys(p for p in paths if p not in known))
        if new:
            texts = [verbalise_relation_path(p) for p in new]
            both = similarity.score(texts, masked) + (0 if isinstance(similarity, LexicalSimilarity)
                                                      else lexical.score(texts, masked))
            known.update(zip(new, both.tolist()))
        return [known[p] for p in paths]

    return score


def planner_scorer(planner: PlannerModel, question: str, topics: Sequence[str] = ()) -> RawScorer:
    """Scores raw relation sequences by ``planner``'s log-likelihood of each for the raw ``question`` (topic
    mentions masked when the planner was trained so); ``-inf`` for a relation it has no token for. Runs on
    the Hand only, with a planner trained on raw relation paths (the plaintext local Brain's).

    Where the sentence encoder hardly tells MetaQA's film→person relations apart, a planner trained on the
    KG's questions has learnt which wordings ask for which relation ("what films did <e> direct").
    """
    text = mask_topics(question, topics) if planner.config.mask_topics else question
    prompt = planner.prompt_ids([text])[0]
    known: dict[tuple[str, ...], float] = {}

    def score(paths: Sequence[tuple[str, ...]]) -> list[float]:
        new = list(dict.fromkeys(p for p in paths if p not in known))
        if new:
            known.update(zip(new, path_log_likelihood(planner, prompt, new)))
        return [known[p] for p in paths]

    return score


def with_twins(kept: Sequence[Candidate], ranked: Sequence[Candidate], limit: int) -> list[Candidate]:
    """The Brain's kept candidates, then the ranked ones it could not tell from them (the same view relation
    paths to other nodes), up to ``limit`` in all.

    In ``privacy`` mode a cluster path reaches the director, the writer and every actor of a film as
    equals, so the Brain's choice among them is arbitrary: it chose the path, not the node. The Hand
    grounds the twins too and orders them by its raw score (:func:`refine_order`).
    """
    out = list(kept)
    seen = {c.text() for c in kept}
    paths = {c.relation_paths for c in kept}
    for candidate in ranked:
        if len(out) >= limit:
            break
        if candidate.relation_paths in paths and candidate.text() not in seen:
            out.append(candidate)
            seen.add(candidate.text())
    return out


def refine_order(candidates: Sequence[Candidate], scores: Sequence[float]) -> list[int]:
    """Positions of ``candidates`` (the Brain's order) after the Hand's refinement: candidates whose view
    relation paths are the same (the Brain could not tell them apart) swap places by the Hand's score,
    best first; every other candidate keeps its place."""
    slots: dict[tuple[tuple[str, ...], ...], list[int]] = {}
    for i, candidate in enumerate(candidates):
        slots.setdefault(candidate.relation_paths, []).append(i)
    order = list(range(len(candidates)))
    for members in slots.values():
        ranked = sorted(members, key=lambda i: -scores[i])  # stable: ties keep the Brain's order
        for slot, i in zip(members, ranked):
            order[slot] = i
    return order


@dataclass(frozen=True)
class Topics:
    """A question's topic entities as the Hand found them.

    Attributes:
        entities: The topic entity ids.
        mentions: Entity id → the words of the question it was linked from (linked questions only).
        set_aside: Words the linker kept from the topics (lower-case names such as *drama*) → the entities
            they name: what :meth:`Hand.narrow` may narrow the answers by.
    """

    entities: tuple[str, ...]
    mentions: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    set_aside: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


class HandError(RuntimeError):
    """The Hand cannot work on a question (no topic entity, nothing around it); ``reason`` says why."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason


@dataclass(frozen=True)
class Grounded:
    """A kept candidate on the raw subgraph.

    Attributes:
        candidate: The anonymised candidate.
        value: Its value for the reader (0 for the best kept, −1 for the next, ...).
        walks: Raw evidence walks from the topic entities (triple ids index the raw subgraph).
        ends: Raw entities every branch reaches (answer candidates), topics excluded.
        reason: None when sufficient, else why not (``not_grounded``, ``topic_missing``, ``unnamed_end``:
            every common end is an unnamed node such as a CVT, which the reader does not answer, and
            ``answer_type``).
    """

    candidate: Candidate
    value: float
    walks: tuple[Path, ...]
    ends: tuple[str, ...]
    reason: str | None


class Hand:
    """The trusted tower (see the module docstring).

    Args:
        config: The controller's settings.
        store: Where the raw KG lives (None: every question brings its triples).
        linker: Links topic entities when a question comes without them.
        planner: ``hand.resolve_clusters: planner``: the Hand's raw-relation planner (:func:`planner_scorer`).
    """

    def __init__(self, config: DualTowerConfig, store: KGStore | None = None, linker: EntityLinker | None = None,
                 planner: PlannerModel | None = None) -> None:
        self.config = config
        self.store = store
        self.linker = linker
        self.planner = planner
        self._written: tuple[object, WrittenNames] | None = None  # (store version, the store's names)

    # ---------------------------------------------------------------------------- raw side
    def topics(self, question: str, given: Sequence[str] = ()) -> Topics:
        """The topic entities and, when linked, the words of the question each was linked from and the words the
        linker set aside."""
        if given:
            return Topics(tuple(dict.fromkeys(given)))
        if self.linker is None:
            raise HandError("no_topics", "the question names no topic entity and no linker is configured")
        linked = self.linker.link(question)
        if not linked.entities:
            raise HandError("no_topics", linked.detail or str(linked.failure))
        mentions: dict[str, tuple[str, ...]] = {}
        for mention in linked.mentions:
            for candidate in mention.candidates:
                mentions[candidate.entity_id] = (*mentions.get(candidate.entity_id, ()), mention.text)
        aside = {m.text: tuple(c.entity_id for c in m.candidates) for m in linked.set_aside}
        return Topics(linked.entities, mentions, aside)

    def narrow(self, answers: Sequence[str], set_aside: Mapping[str, Sequence[str]],
               triples: Sequence[Triple] = ()) -> dict[str, tuple[Triple, ...]] | None:
        """The answers one edge from an entity a set-aside word names, each with the edges that join it, when
        some answers are and some are not; None when no set-aside word tells the answers apart.

        A word such as *drama* in "which drama films did greta halvorsen write" is no topic, but of Greta
        Halvorsen's films it keeps those of the genre Drama; *film* in "which film directed by ..." names a type
        every answer has, so it changes nothing. Words are tried in the question's order, each on the answers
        the earlier ones kept. Edges come from the store, else from ``triples`` (a question's own subgraph).
        """
        if len(answers) < 2 or not set_aside:
            return None
        edges = self.store.neighbours(list(answers)) if self.store is not None else triples
        kept: dict[str, tuple[Triple, ...]] = {a: () for a in answers}
        for entities in set_aside.values():
            named = set(entities)
            joins = {a: tuple(t for t in edges if (t[0] == a and t[2] in named) or (t[2] == a and t[0] in named))
                     for a in kept}
            if 0 < sum(bool(j) for j in joins.values()) < len(kept):
                kept = {a: (*kept[a], *j) for a, j in joins.items() if j}
        return kept if len(kept) < len(answers) else None

    def mentioned(self, question: str, schema: KGSchema | None = None) -> dict[str, tuple[str, ...]]:
        """Every KG entity the question names, with the words that name it, wherever it is in the KG: by the
        linker's name index (:meth:`EntityLinker.named_spans`), else by every name and alias of the Hand's store
        (:class:`WrittenNames`, built on the first question and again after the store's version changes), else,
        when questions bring their own triples, by the entities of ``schema``. A name outside the working
        subgraph is then masked and guarded like the subgraph's (:mod:`rg.privacy.written`)."""
        if self.linker is not None:
            return self.linker.named_spans(question)
        if self.store is not None:
            version = getattr(self.store, "version", None)
            if self._written is None or self._written[0] != version:
                self._written = version, WrittenNames(chain(self.store.iter_names(), self.store.iter_aliases()))
            return self._written[1].in_text(question)
        return schema.written_names.in_text(question) if schema is not None else {}

    def names(self, triples: Sequence[Triple], topics: Sequence[str], mentions: Mapping[str, Sequence[str]],
              from_store: bool) -> NameBook:
        """The names, aliases and mentions of every entity of the working subgraph, of the topics and of the
        entities ``mentions`` lists (the question's words that name them) (:class:`NameBook`).

        Fetched from the store when the subgraph came from it (a triple store names entities apart from their
        ids); a question's own triples name entities by their ids. Entities whose lookup failed are withheld
        (:data:`~rg.privacy.names.NAMES_UNAVAILABLE`); a withheld topic entity fails the question, since
        what the question calls it could not be masked.
        """
        ids = sorted({e for h, _, t in triples for e in (h, t)} | set(topics) | set(mentions))
        names: dict[str, str | None] = {}
        aliases: dict[str, tuple[str, ...]] = {}
        withheld: dict[str, str] = {}
        if from_store and self.store is not None:
            for start in range(0, len(ids), NAME_BATCH):
                batch = ids[start:start + NAME_BATCH]
                try:
                    names.update(self.store.entity_names(batch))
                    aliases.update(self.store.entity_aliases(batch))
                except StoreError:
                    withheld.update(dict.fromkeys(batch, NAMES_UNAVAILABLE))
        missing = [t for t in topics if t in withheld]
        if missing:
            raise HandError(NAMES_UNAVAILABLE, f"the store did not give the names of {len(missing)} topic entities")
        return NameBook(names, aliases, withheld).with_mentions(mentions)

    def subgraph(self, topics: Sequence[str], triples: Sequence[Triple] | None = None) -> list[Triple]:
        if triples is None:
            if self.store is None:
                raise HandError("no_graph", "no KG store is configured and the question brings no triples")
            triples = self.store.k_hop(list(topics), self.config.hops, self.config.max_subgraph_triples).triples
        kept = list(dict.fromkeys(tuple(t) for t in triples))
        if not kept:
            raise HandError("empty_subgraph", "nothing around the topic entities")
        return kept  # type: ignore[return-value]

    @staticmethod
    def exposable(triples: Sequence[Triple], book: NameBook, by_name: bool) -> list[Triple]:
        """``triples`` without those touching a withheld entity (whose names are unknown, so unguardable); with
        ``by_name`` (a subgraph from a store) sorted by what they say, names for ids, so that the Hand explores
        and breaks ties alike whichever store holds the KG and however it names entities."""
        kept = [t for t in triples if t[0] not in book.withheld and t[2] not in book.withheld]
        if not kept:
            raise HandError(NAMES_UNAVAILABLE, "no entity around the topic entities could be named")
        if by_name:
            kept.sort(key=lambda t: (book.display(t[0]), t[1], book.display(t[2]), t))
        return kept

    # ------------------------------------------------------------------------- view side
    def view(self, session: PrivacySession, triples: Sequence[Triple], topics: Sequence[str]) -> SanitisedView:
        return session.expose(triples, topics, self.config.sanitiser, stage="anonymise")

    def anchors(self, session: PrivacySession, view: SanitisedView, topics: Sequence[str]) -> list[str]:
        return [view.node_of(session.entity(t, topic=True)) for t in topics]

    def hints(self, view: SanitisedView, anchors: Sequence[str]) -> tuple[tuple[str, ...], ...]:
        """Relation paths of the view from the anchors (the analysis payload's schema hints)."""
        limit = self.config.brain.hint_limit
        if limit == 0 or not view.triples:
            return ()
        kg = KnowledgeGraph.from_triples(view.triples)
        paths = relation_trie(kg, list(anchors), self.config.d_max).paths()
        return tuple(sorted(paths, key=lambda p: (len(p), p))[:limit])

    # --------------------------------------------------------------------- verification
    def ground(self, session: PrivacySession, view: SanitisedView, kg: KnowledgeGraph, topics: Mapping[str, str],
               candidates: Sequence[Candidate], indicator: Indicator, score: RawScorer | None = None,
               names: NameBook | None = None) -> list[Grounded]:
        """De-anonymise, refine into evidence and check each kept candidate (best first).

        ``topics`` maps each tag (``TE_1``...) to its raw topic entity: a candidate's branches start at the
        topics its ``tags`` name (all of them in order for the joint search, one for ``multi_topic: separate``).
        With ``score`` (the Hand's refinement, module docstring) a branch keeps only the raw relation
        sequences scoring best of those it grounds to, and candidates the Brain could not tell apart are
        ordered by their kept sequences' scores (:func:`refine_order`); None keeps everything in the
        Brain's order. ``names`` tells which ends are named (a bare id is none); by default an id is its name.
        """
        topic_set = set(topics.values())
        book = names if names is not None else NameBook()

        def node_of(raw: str) -> str:
            return view.node_of(session.entity(raw, topic=raw in topic_set))

        checked: list[tuple[Candidate, tuple[Path, ...], tuple[str, ...], str | None]] = []
        hand_scores: list[float] = []
        for candidate in candidates:
            walks: list[Path] = []
            ends: set[str] | None = None
            reason = None
            hand_score = 0.0
            for topic, branch in zip((topics[tag] for tag in candidate.tags), candidate.branches):
                found = self._follow(session, kg, topic, branch.nodes[1:], branch.labels, node_of,
                                     self.config.walks == "trails")
                if not found:
                    reason = "not_grounded"
                    break
                reach: list[Path] = []
                relation_paths = list(dict.fromkeys(p.relation_path for p in found))
                if score is not None:
                    scores = list(score(relation_paths))
                    best = max(scores)
                    relation_paths = [p for p, s in zip(relation_paths, scores) if s >= best - TIE]
                    hand_score += best
                for relation_path in relation_paths:
                    reach += kg.path_end_walks(topic, relation_path)
                branch_ends = {p.end for p in reach} - topic_set
                ends = branch_ends if ends is None else ends & branch_ends
                walks += reach
            if reason is None and not ends:
                reason = "topic_missing"
            if reason is None and not any(self._answerable(e, book) for e in ends or ()):
                reason = "unnamed_end"  # the reader takes no unnamed node (a CVT) as an answer: look further
            kept_ends = tuple(sorted(e for e in ends or () if self._answerable(e, book)))
            if reason is None and indicator.answer_type and not (
                    self._labelled(candidate, indicator.answer_type)
                    or self._typed(session, node_of, kept_ends, indicator.answer_type)):
                reason = "answer_type"
            kept = tuple(w for w in walks if w.end in set(kept_ends)) if reason is None else ()
            checked.append((candidate, kept, kept_ends if reason is None else (), reason))
            hand_scores.append(hand_score if reason is None else float("-inf"))
        order = range(len(checked)) if score is None else refine_order(candidates, hand_scores)
        return [Grounded(checked[i][0], -float(rank), *checked[i][1:]) for rank, i in enumerate(order)]

    def _answerable(self, entity: str, names: NameBook) -> bool:
        """Whether the reader may answer ``entity`` (unnamed nodes only with ``reader.unnamed_answers``)."""
        return self.config.reader.unnamed_answers or names.named(entity)

    @staticmethod
    def _labelled(candidate: Candidate, wanted: str) -> bool:
        """Whether a branch's last step is a cluster label naming the ``wanted`` type at its far end
        (``rel_04 (film→year)`` walked forward). The label types the role, not the entity: MetaQA's "2014" is a
        release year and a tag, and the KG-wide schema gives it one type, the tag's."""
        wanted = wanted.strip().lower()
        return any((cluster_answer_type(b.labels) or "").strip().lower() == wanted for b in candidate.branches)

    @staticmethod
    def _typed(session: PrivacySession, node_of, ends: Sequence[str], wanted: str) -> bool:
        """Whether an end has the ``wanted`` type as the view names types: the label its node shows, or the
        type label of its coarse type (a literal is shown as ``year 1956`` or ``number 1e7-1e8``, without its
        type, while a cluster label such as ``(film→literal)`` names it)."""
        wanted = wanted.strip().lower()
        return any(public_label(node_of(e)).split(" ×")[0].strip().lower() == wanted
                   or session.type_label(e).strip().lower() == wanted for e in ends)

    @staticmethod
    def _follow(session: PrivacySession, kg: KnowledgeGraph, topic: str, nodes: Sequence[str], labels: Sequence[str],
                node_of, trails: bool = False) -> list[Path]:
        """Raw walks from ``topic`` whose view is the branch (``nodes`` after the anchor, ``labels``): no entity
        twice, or with ``trails`` (``walks: trails``) no triple twice."""
        if not kg.has_entity(topic):
            return []
        paths = [Path((topic,), (), (), ())]
        for label, node in zip(labels, nodes):
            shown, forward = split_relation(label)
            grown: list[Path] = []
            for path in paths:
                eid = kg.entity_id(path.end)
                ptr, idx, far = (kg.out_ptr, kg.out_idx, kg.tail) if forward else (kg.in_ptr, kg.in_idx, kg.head)
                for tid in idx[ptr[eid]:ptr[eid + 1]].tolist():
                    other = str(kg.entity_names[far[tid]])
                    relation = str(kg.relation_names[kg.rel[tid]])
                    again = tid in path.triple_ids if trails else other in path.entities
                    if again or session.relation(relation) != shown or node_of(other) != node:
                        continue
                    grown.append(Path(path.entities + (other,), path.relations + (relation,),
                                      path.forward + (forward,), path.triple_ids + (tid,)))
                    if len(grown) >= MAX_GROUNDINGS:
                        break
            paths = grown
            if not paths:
                return []
        return paths

    @staticmethod
    def sufficient(grounded: Sequence[Grounded]) -> bool:
        """Every topic entity covered and the answer type consistent, for at least one kept path."""
        return any(g.reason is None for g in grounded)

    @staticmethod
    def evidence(kg: KnowledgeGraph, topics: Sequence[str], grounded: Sequence[Grounded],
                 names: NameBook | None = None) -> Evidence:
        """The verified walks as evidence chains over the raw triples they use, entities written by their names
        (``names``; by default an id is its name), so the reader reads and answers names."""
        book = names if names is not None else NameBook()
        walks = [(w, g.value) for g in grounded if g.reason is None for w in g.walks]
        used = sorted({t for w, _ in walks for t in w.triple_ids})
        index = {t: i for i, t in enumerate(used)}
        triples = book.display_triples(kg.triple(t) for t in used)
        chained = [Walk(Path(tuple(book.display(e) for e in w.entities), w.relations, w.forward,
                             tuple(index[t] for t in w.triple_ids)), (value,) * len(w)) for w, value in walks]
        present = {e for h, _, t in triples for e in (h, t)}
        found = tuple(book.display(t) for t in topics if book.display(t) in present)
        config = EvidenceConfig(max_length=8, keep_unanchored=False)
        return assemble_evidence(triples, tuple(0.0 for _ in triples), found, chained, config, walk_source="dualtower")
