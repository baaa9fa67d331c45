"""A per-question privacy session: keyed pseudonyms, anonymised views, and the way back.

PrivGemo §4.1 / Algorithm 1: the Hand anonymises what the Brain may see with a fresh secret per
question. A :class:`PrivacySession` draws a 32-byte key from :mod:`secrets`; an entity's
pseudonym is the truncated HMAC-SHA256 (``cryptography``) of its raw id under that key, e.g.
``ent_3f9a2c1d``, so pseudonyms of one entity differ between sessions (unlinkable) and cannot
be inverted without the key. A collision inside a session (two raw ids on one truncated digest)
is detected and the later id gets a longer digest. Closing the session drops the key and the
maps; a closed session refuses use::

    with PrivacySession(PrivacyConfig(mode="privacy"), schema) as session:
        view = session.anonymise_triples(subgraph_triples)
        text = session.mask_question(question, topic_entities)
        reply_entities = session.deanonymise_all(brain_answer)

Every raw string the session has anonymised is added to its :attr:`guard`
(:class:`rg.privacy.guard.EgressGuard`), which the Brain-side client checks before sending.
"""

from __future__ import annotations

import math
import os
import re
import secrets
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from cryptography.hazmat.primitives import hashes, hmac

from rg.privacy.config import PrivacyConfig
from rg.privacy.exposure import ExposureLedger
from rg.privacy.guard import EgressGuard, GuardIndex, guardable, keys_of
from rg.privacy.names import MID, NameBook
from rg.privacy.normalise import INVISIBLE, normalise, normalise_with_map, whole_token
from rg.privacy.schema import SCHEMA_KINDS, UNKNOWN, KGSchema
from rg.privacy.structure import (SanitisedView, SanitiserConfig, ViewGraph, group_nodes, prune_graph, public_label,
                                  structural_uniqueness)

KEY_BYTES = 32
DROP_INVISIBLE = dict.fromkeys(map(ord, INVISIBLE))
"""A :meth:`str.translate` table deleting the invisible characters."""
DATE = re.compile(r"^(\d{4})(?:-\d{2}(?:-\d{2})?)?$")
NUMBER = re.compile(r"^-?\d+(?:\.\d+)?$")
MID_IN_TEXT = re.compile(r"(?<![\w.])[mg]\.0[0-9a-z_]+\b")
"""A Freebase MID written anywhere in a question: always pseudonymised, named in the subgraph or not."""
PSEUDONYM = re.compile(r"\b(?:ent|lit)_[0-9a-f]{4,64}\b")
_MONTH = r"(?:jan|feb|mar|apr|may|jun|jul|aug|sep|sept|oct|nov|dec)[a-z]*\.?"
DATES_IN_TEXT = (
    re.compile(r"\b(\d{4})-\d{1,2}-\d{1,2}\b"),
    re.compile(r"\b\d{1,2}[/.]\d{1,2}[/.](\d{4})\b"),
    re.compile(rf"\b{_MONTH}\s+\d{{1,2}}(?:st|nd|rd|th)?,?\s+(\d{{4}})\b", re.IGNORECASE),
    re.compile(rf"\b\d{{1,2}}(?:st|nd|rd|th)?\s+{_MONTH}\s+(\d{{4}})\b", re.IGNORECASE),
)
"""Full dates written in a question (ISO, d/m/y or m/d/y, "March 2, 1987", "2 March 1987"): coarsened to the year."""


def coarsen_dates(text: str) -> str:
    """Every full date in ``text`` replaced by ``year YYYY`` (dates are literals: the Brain sees years)."""
    for pattern in DATES_IN_TEXT:
        text = pattern.sub(lambda m: f"year {m.group(1)}", text)
    return text


WORD = re.compile(r"\w+")
DERIVED_PREFIX = 4
"""Characters a word must share with the start of a topic's name to count as derived from it (``italians``)."""
DERIVED_SHARE = 0.6
"""...and the share of the name's first word they must cover (``portuguese`` / ``portugal``: 6 of 8)."""


def partial_mention(folded: str, name: str, public: frozenset[str] = frozenset()) -> tuple[int, int] | None:
    """Where a normalised question names a topic without its full name, as (start, end) in ``folded``.

    The longest leading run of the name's words (``bosnia`` for Bosnia and Herzegovina, ``new york``
    for New York City), else a word derived from the name's first word (``italians`` for Italy,
    ``portuguese`` for Portugal, ``german`` for Germany: a shared start of at least :data:`DERIVED_PREFIX`
    characters and :data:`DERIVED_SHARE` of that word, in a word at most one character shorter). What
    matched must be guardable and not a public schema word (:func:`rg.privacy.guard.guardable`), so
    ``new`` alone or ``language`` never counts. None: not there.
    """
    words = normalise(name).split()
    for k in range(len(words) - 1, 0, -1):
        phrase = " ".join(words[:k])
        if not guardable(phrase, public) or len(phrase) < DERIVED_PREFIX:
            continue
        start = folded.find(phrase)
        while start >= 0:
            if whole_token(folded, start, start + len(phrase)):
                return start, start + len(phrase)
            start = folded.find(phrase, start + 1)
    first = words[0] if words else ""
    if len(first) < DERIVED_PREFIX:
        return None
    for match in WORD.finditer(folded):
        word = match.group(0)
        shared = len(os.path.commonprefix([word, first]))
        if (word != first and len(word) >= len(first) - 1 and shared >= max(DERIVED_PREFIX, DERIVED_SHARE * len(first))
                and guardable(word, public)):
            return match.start(), match.end()
    return None


class SessionClosed(RuntimeError):
    """The session was closed: its key and maps are gone."""


@dataclass(frozen=True)
class MaskedQuestion:
    """A question with its entity mentions replaced by typed tags.

    Attributes:
        text: The masked question.
        tags: Tag → pseudonym of the entity it stands for (``TE_1`` → ``ent_3f9a2c1d``).
        missing: Topic entities whose mention was not found in the question (their tags are
            appended, so the Brain still learns they exist).
    """

    text: str
    tags: dict[str, str]
    missing: tuple[str, ...]


def literal_view(value: str) -> str | None:
    """The coarse public form of a literal: a date → ``year 1987``, a number → its log10 range.

    Returns None when ``value`` is neither (it is then pseudonymised like a name).
    """
    date = DATE.match(value.strip())
    if date and len(value.strip()) > 4:
        return f"year {date.group(1)}"
    if NUMBER.match(value.strip()):
        number = abs(float(value))
        if number < 1:
            return "number <1"
        low = int(math.floor(math.log10(number)))
        return f"number 1e{low}-1e{low + 1}"
    return None


class PrivacySession:
    """Anonymises one question's view for the Brain; maps the Brain's answer back.

    Args:
        config: Mode, anonymisation ratio and pseudonym length.
        schema: The KG's coarse entity types and relation clusters (computed once per KG).
        index: The KG's raw strings, normalised once, that the session's guard activates instead of
            compiling its own automaton (:class:`rg.privacy.guard.GuardIndex`); by default the schema's
            (:attr:`KGSchema.guard_index <rg.privacy.schema.KGSchema.guard_index>`). It changes the
            work done per question, never what is guarded or masked.
        protocol: Normalised words every request to the Brain writes whatever the KG (the dual tower's payload
            keys and prompt text): public, so an entity named ``tag`` or ``film`` cannot make the guard refuse
            the protocol's own words, and such a word in the question stays as written.
    """

    def __init__(self, config: PrivacyConfig, schema: KGSchema, index: GuardIndex | None = None,
                 protocol: frozenset[str] = frozenset()) -> None:
        self.config = config
        self.schema = schema
        self._key: bytes | None = secrets.token_bytes(KEY_BYTES)
        self._mac: hmac.HMAC | None = hmac.HMAC(self._key, hashes.SHA256())  # keyed once; copied per digest
        self._forward: dict[str, str] = {}
        self._inverse: dict[str, str] = {}
        self.shown_relations: set[str] = set()
        self._views: dict[tuple[str, bool], str] = {}  # (raw, topic) → view: each entity is worked out once
        self._relation_views: dict[str, str] = {}
        self.exposure = ExposureLedger(self.shown_relations)
        if index is None and config.mode != "plaintext":  # plaintext guards nothing: no index to build
            index = schema.guard_index
        self.guard = EgressGuard(public=schema.public_words(config.mode != "privacy", protocol),
                                 exposure=self.exposure, index=index)
        self.collisions = 0
        self.names = NameBook()
        self._clear: dict[str, str] = {}  # an entity shown in the clear: its name as shown → its raw id

    def learn_names(self, book: NameBook) -> None:
        """Take the names, aliases and mentions of the question's raw entities (:class:`NameBook`).

        From now on every form of an entity is guarded with its id, masked in the question, and an
        entity shown in the clear is shown by its name. Call it before anything is built for the Brain:
        without a book an entity's id is taken for its only name (the in-memory KGs' convention).
        """
        self._live_key()
        self.names = book
        # an entity deferred to the guard before this book (guard_entities) is guarded now by every form the
        # book gives it: its deferral would fire only on its id
        self.guard.resolve(set(book.names).union(book.aliases))

    def __enter__(self) -> "PrivacySession":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        return self._key is None

    def close(self) -> None:
        """Drop the key and both maps; every later call raises :class:`SessionClosed`."""
        self._key = None
        self._mac = None
        self._forward = {}
        self._inverse = {}
        self.shown_relations.clear()
        self.guard.close()
        self._views = {}
        self._relation_views = {}
        self.names = NameBook()
        self._clear = {}

    def _live_key(self) -> bytes:
        if self._key is None:
            raise SessionClosed("this privacy session is closed; open a new one per question")
        return self._key

    def _keyed(self) -> hmac.HMAC:
        """A fresh HMAC-SHA256 under the session's key (a copy of the keyed one: the key is set up once)."""
        if self._mac is None:
            raise SessionClosed("this privacy session is closed; open a new one per question")
        return self._mac.copy()

    @property
    def anonymising(self) -> bool:
        return self.config.mode != "plaintext"

    def pseudonym(self, raw: str, prefix: str = "ent") -> str:
        """The session's pseudonym of ``raw`` (the same within the session, fresh in another)."""
        known = self._forward.get(raw)  # emptied when the session closes
        if known is not None:
            return known
        mac = self._keyed()
        mac.update(raw.encode("utf-8"))
        digest = mac.finalize().hex()
        chars = self.config.pseudonym_chars
        name = f"{prefix}_{digest[:chars]}"
        while name in self._inverse:  # a truncated-digest collision: lengthen until unique
            self.collisions += 1
            chars += 4
            if chars > len(digest):
                raise RuntimeError("an HMAC-SHA256 digest collided in full; this cannot happen by chance")
            name = f"{prefix}_{digest[:chars]}"
        self._forward[raw] = name
        self._inverse[name] = raw
        return name

    def _anonymised(self, raw: str) -> bool:
        """Whether the ratio anonymises this (non-topic) entity: a keyed, per-session choice."""
        if self.config.ratio >= 1.0:
            return True
        mac = self._keyed()
        mac.update(b"ratio\x00" + raw.encode("utf-8"))
        return int.from_bytes(mac.finalize()[:4], "big") / 2**32 < self.config.ratio

    def entity(self, raw: str, topic: bool = False) -> str:
        """The Brain's view of an entity: ``ent_xxxx (type)``, a coarse literal, or the raw name
        (plaintext mode, schema vocabulary such as type nodes, or left out by the ratio)."""
        self._live_key()
        known = self._views.get((raw, topic))
        if known is None:
            known = self._views[(raw, topic)] = self._entity_view(raw, topic)
        return known

    def _entity_view(self, raw: str, topic: bool) -> str:
        if not self.anonymising or self.schema.is_public(raw) or (not topic and not self._anonymised(raw)):
            shown = self.names.display(raw)
            self._clear[shown] = raw
            return shown
        kind = self.schema.type_of(raw)
        # a subgraph's entity still deferred is guarded when met, as here (an entity the book names never is:
        # guard_entities and learn_names guard those at once), unless it is a topic the ratio left out there
        if not ((not topic or self.config.ratio >= 1.0) and self.guard.defers(raw)):
            self._guard(raw, kind)
        coarse = literal_view(self.names.display(raw)) if kind == "literal" else None
        if coarse is not None:
            return coarse
        return f"{self.pseudonym(raw, 'lit' if kind == 'literal' else 'ent')} ({self.type_label(raw)})"

    def _guard(self, raw: str, kind: str) -> None:
        """Guard every form of an entity (:meth:`NameBook.forms`); a literal's value as a ``literal``."""
        self.guard.add_pairs(self._guard_pairs(raw, kind))

    def _guard_pairs(self, raw: str, kind: str) -> list[tuple[str, str]]:
        """(category, form) of every form of an entity, as :meth:`_guard` guards them."""
        return [("literal" if kind == "literal" and category == "entity_name" else category, form)
                for form, category in self.names.forms(raw)]

    def pattern_label(self, node: str) -> str:
        """What a view node adds to a DRM pattern (the Hand's relevance text, never sent): its type.

        A pseudonym or a supernode gives its public label, a supernode without its size (``person ×12``
        → ``person``); a name shown as-is (plaintext mode, or left out by the ratio) gives the coarse type
        utility mode would show for it; schema words and coarse literals stay themselves. So patterns read
        alike in every mode, repeat across questions (the encoder's cache hits), and hold no raw name.
        """
        label = public_label(node)
        if label != node:
            return label.split(" ×")[0]
        raw = self._clear.get(node)
        if raw is None or self.schema.is_public(raw):
            return node
        coarse = literal_view(node)
        if coarse is not None and self.schema.type_of(raw) == "literal":
            return coarse
        return self.type_label(raw)

    def type_label(self, raw: str) -> str:
        """The Brain's view of an entity's coarse type (a neutral alias when relations are hidden)."""
        return self.schema.type_label(self.schema.type_of(raw), relations_shown=self.config.mode != "privacy")

    def relation(self, raw: str) -> str:
        """The Brain's view of a relation: as-is, or its schema cluster in ``privacy`` mode."""
        self._live_key()
        view = self._relation_views.get(raw)
        if view is None:
            if self.config.mode != "privacy":
                view = raw
            else:
                self.guard.add("relation", [raw])
                view = self.schema.relation_cluster(raw)
            self._relation_views[raw] = view
            self.shown_relations.add(view)
        return view

    def anonymise_triples(self, triples: Iterable[tuple[str, str, str]], topics: Iterable[str] = ()) -> list[tuple[str, str, str]]:
        """Each triple as the Brain may see it."""
        topic_set = set(topics)
        return [(self.entity(h, h in topic_set), self.relation(r), self.entity(t, t in topic_set)) for h, r, t in triples]

    def guard_entities(self, entities: Iterable[str]) -> None:
        """Guard the raw strings of entities whether or not the Brain is shown them (so a pruned
        entity's name is refused too); the same ones :meth:`entity` would guard.

        An entity with names in the session's book is guarded now, by every form; the others (ids that
        are their own names: a subgraph's hundreds of entities) are handed to the guard to resolve only
        when a check meets one of their keys (:meth:`rg.privacy.EgressGuard.defer`), which gives the
        same verdicts without a per-entity step per question.
        """
        self._live_key()
        if not self.anonymising:
            return
        given = set(entities)
        named = given.intersection(self.names.names).union(given.intersection(self.names.aliases))
        if named:
            self.guard.add_pairs(pair for raw in named for pair in self._entity_pairs(raw))
            given -= named
        self.guard.defer(given, self._entity_pairs)

    def _entity_pairs(self, raw: str) -> list[tuple[str, str]]:
        """(category, form) pairs :meth:`guard_entities` guards for one entity: none for a schema node or one
        the ratio leaves in the clear; an id that is its own name gives its one form without building it."""
        kind = self.schema.types.get(raw, UNKNOWN)
        if kind in SCHEMA_KINDS or not (self.config.ratio >= 1.0 or self._anonymised(raw)):
            return []
        if raw in self.names.names or raw in self.names.aliases:
            return self._guard_pairs(raw, kind)
        return [("entity_id" if MID.match(raw) else "literal" if kind == "literal" else "entity_name", raw)]

    def expose(self, triples: Iterable[tuple[str, str, str]], topics: Sequence[str],
               sanitiser: SanitiserConfig, stage: str | None = None) -> SanitisedView:
        """The sanitised view of a working subgraph, built the cheap way round for serving.

        Every entity of the subgraph is guarded; the subgraph is pruned to the sanitiser's budgets
        on its raw structure (:func:`rg.privacy.structure.prune`), and only what is kept is
        anonymised and grouped, so the cost follows the budget rather than the subgraph. (Pruning
        the raw structure differs from pruning the anonymised view only where coarse literals
        merge, e.g. two dates of one year.) In ``privacy`` mode every relation label of the
        subgraph is guarded too. With ``stage``, the view's size and uniqueness are booked in the
        exposure ledger under that stage.
        """
        self._live_key()
        graph = ViewGraph(triples, extra=sorted(topics))  # built once: its nodes are guarded, then it is pruned
        self.guard_entities(graph.names)
        if self.config.mode == "privacy":
            self.guard.add("relation", {r for _, r, _ in graph.triples})
        kept = prune_graph(graph, frozenset(topics), sanitiser)
        view = list(dict.fromkeys(self.anonymise_triples(kept, topics)))
        anchors = frozenset(self.entity(t, topic=True) for t in topics)
        groups: dict[str, tuple[str, ...]] = {}
        if sanitiser.group:
            view, groups = group_nodes(view, anchors, sanitiser.min_group)
        shown = SanitisedView(tuple(view), anchors, groups)
        if stage is not None:
            uniqueness = structural_uniqueness(shown.triples, anchors, shown.weights(), sanitiser.wl_rounds)
            self.exposure.record_structure(stage, nodes=len(shown.nodes), edges=len(shown.triples),
                                           uniqueness=uniqueness)
        return shown

    def mask_question(self, question: str, topics: Sequence[str], names: Iterable[str] = ()) -> MaskedQuestion:
        """Replace topic-entity mentions by ``TE_i (type)`` and other known names by their views.

        Matching ignores case, accents, full-width forms, zero-width characters, punctuation and
        whitespace, and takes whole tokens only; longer names win over the names inside them. A topic
        the question does not name in full is looked for in part or in a derived word
        (:func:`partial_mention`: ``bosnia``, ``italians``). A
        name that is too weak without its punctuation (``61*``) is matched with it; a name too
        weak either way (see :func:`rg.privacy.guard.guardable`) is left alone, and so is a name
        in ``names`` that is a word of the shown schema (the guard's ``public`` words, which it
        lets pass): it stays the question's own language. Full dates in any
        of the formats of :data:`DATES_IN_TEXT` become ``year YYYY`` first, and every MID
        (:data:`MID_IN_TEXT`) its pseudonym last.
        """
        self._live_key()
        if not self.anonymising:
            return MaskedQuestion(question, {}, ())
        question = coarsen_dates(question)
        plain = normalise_with_map(question)
        marked: tuple[str, list[int]] | None = None  # the question with its punctuation, made when needed
        tags = {f"TE_{i + 1}": self.pseudonym(t) for i, t in enumerate(topics)}
        replacement = {t: f"TE_{i + 1} ({self.type_label(t)})" for i, t in enumerate(topics)}
        for t in topics:
            for form, category in self.names.forms(t):
                self.guard.add(category, [form])
        index = self.guard.index
        # the KG's keys written in the question, found in one pass of the shared automaton: a name the
        # index holds whose keys are not among them matches nowhere in the question, and is not looked for
        hits, marked_hits = index.occurring(plain[0], normalise(question, punctuation=True))
        # so only these names are looked for: the owners of those keys, names the index lacks, and names
        # with forms of their own in the book (set operations: a subgraph passes hundreds of names)
        names = names if isinstance(names, (set, frozenset, list, tuple)) else list(names)
        held, lacking = index.held(names)
        book = held.intersection(self.names.names).union(held.intersection(self.names.aliases))
        present = {owner for key in (*hits, *marked_hits) for owner in index.owners(key)}
        looked_for = held.intersection(present).union(lacking, book).difference(replacement)
        candidates = [(form, t, True) for t in topics for form, _ in self.names.forms(t)]
        # in the caller's order when it has one (a set has none to keep)
        ordered = looked_for if isinstance(names, (set, frozenset)) else dict.fromkeys(n for n in names if n in looked_for)
        for n in ordered:
            candidates += [(form, n, False) for form, _ in self.names.forms(n)]
        spans: list[tuple[int, int, str]] = []
        taken = [False] * len(question)  # in the question's own positions, whichever form matched
        found: set[str] = set()
        keyed = []
        for written, raw, is_topic in candidates:
            # another name is masked only where the guard would refuse it: a word of the shown schema
            # (``public``) stays the question's own language
            public = frozenset() if is_topic else self.guard.public
            keys = index.keys(written) or keys_of(written)
            key, form = keys.plain, plain
            if not (keys.plain_ok and key not in public):  # a name that is nothing without its punctuation (61*, 'C++')
                key = keys.marked or keys.plain
                if not (guardable(key, public)):
                    continue
                marked = marked or normalise_with_map(question, punctuation=True)
                form = marked
            keyed.append((key, form, raw, is_topic))
        for key, (folded, origin), raw, is_topic in sorted(keyed, key=lambda c: -len(c[0])):
            start = folded.find(key)
            while start >= 0:
                end = start + len(key)
                first, last = origin[start], origin[end - 1] + 1
                if whole_token(folded, start, end) and not any(taken[first:last]):
                    taken[first:last] = [True] * (last - first)
                    spans.append((first, last, replacement[raw] if is_topic else self.entity(raw)))
                    found.add(raw)
                start = folded.find(key, start + 1)
        for t in topics:  # a topic named in part or in a derived word: masked too, or it identifies the topic
            if t in found:
                continue
            span = next((s for s in (partial_mention(plain[0], f, self.guard.public) for f in self.names.surface(t))
                         if s is not None), None)
            if span is not None:
                first, last = plain[1][span[0]], plain[1][span[1] - 1] + 1
                if not any(taken[first:last]):
                    taken[first:last] = [True] * (last - first)
                    spans.append((first, last, replacement[t]))
                    found.add(t)
        text = question
        for start, end, view in sorted(spans, reverse=True):
            text = text[:start] + view + text[end:]
        text = text.translate(DROP_INVISIBLE)  # nothing invisible reaches the Brain
        # MIDs last, so that names are never looked for inside the views put in their place
        text = MID_IN_TEXT.sub(lambda m: self.entity(m.group(0)), text)
        missing = tuple(t for t in topics if t not in found)
        if missing:
            text += " [topic entities: " + ", ".join(replacement[t] for t in missing) + "]"
        return MaskedQuestion(text, tags, missing)

    def deanonymise(self, pseudonym: str) -> str | None:
        """The raw id behind a pseudonym of this session (None if it is not one)."""
        self._live_key()
        return self._inverse.get(pseudonym)

    def deanonymise_all(self, text: str) -> list[str]:
        """Raw ids of every pseudonym of this session in ``text``, in order of appearance."""
        self._live_key()
        return [self._inverse[m] for m in PSEUDONYM.findall(text) if m in self._inverse]

    @property
    def mapped(self) -> int:
        """Distinct raw ids pseudonymised so far (the map is a bijection)."""
        return len(self._forward)
