"""The egress guard: the one check every Brain-bound request passes (PrivGemo §4.1).

An :class:`EgressGuard` holds a session's raw strings (entity names and ids, literal values and,
in ``privacy`` mode, relation labels), normalised (:func:`rg.privacy.normalise.normalise`), in
an Aho-Corasick automaton (``pyahocorasick``), so one pass over a request finds every raw string
in it however many the session holds. A match must be a whole token: ``Ann`` does not match
inside ``annual``. On a match the guard raises :class:`EgressRefused`, which names only the
category matched, never the string, so logs and reports stay clean.

Strings too weak to guard are kept out of the automaton and counted (``skipped``): shorter than
:data:`MIN_CHARS` after normalisation, digits-only shorter than :data:`MIN_DIGITS`, a common
word (:data:`COMMON_WORDS`), or a word of the schema the Brain sees anyway (``public``: in
``utility`` mode the words of relation labels, e.g. a profession named ``Actor`` beside the
relation ``film.performance.actor``). Such a name cannot be told apart from ordinary text, so it is never
matched in questions either; it reaches the Brain only as a pseudonym in structured fields.

**One automaton per KG.** Building a session's automaton from its raw strings cost more than
the rest of the privacy layer together (issue 58: normalising ~500 names per question, adding
them, compiling). A :class:`GuardIndex` normalises every raw string of a KG once (its entity
ids or names and relation labels; :attr:`rg.privacy.schema.KGSchema.guard_index` builds it once
per schema) and holds their keys in shared automata. A session's guard then only *activates*
keys: adding a string the index holds is a dictionary lookup, and a check runs the shared
automaton and counts a match only if its key is active in this session, so a session refuses
exactly the strings it was given, never another session's. A string the index lacks (a name
fetched from a triple store, an alias, a linked mention, a name added to the KG after the index
was built) goes into the session's own small automaton, so the verdicts never depend on what
the index holds: it only saves work. An index is immutable (sessions in other threads may be
reading it); :meth:`GuardIndex.extended` builds a new one with additions for its holder to swap in.

**Guarding a subgraph without touching it.** A session guards every entity of its subgraph
(hundreds per question), though a request can only ever hold the few keys the shared automaton
finds in it. :meth:`EgressGuard.defer` therefore keeps the subgraph's index-held strings as a set and
a function giving each one's (category, string) pairs, and a check resolves them only when the shared
automaton finds one of their keys: it looks up the key's owners (:meth:`GuardIndex.owners`), guards
those the session deferred exactly as :meth:`EgressGuard.add_pairs` would have, and counts the match
if that activated the key. Verdicts equal guarding every string up front; what differs is only that a
deferred string too weak to guard is not counted in ``skipped``, and that a key given both by a
deferred string and by a later explicit addition is named by the explicit one's category.

Plain keys are stored padded with a space on each side and looked for in the padded normalised
text. A normalised text holds only word characters and single spaces, so a padded match is a
whole-token match and nothing else: the automaton reports no match inside a longer word.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Literal, NamedTuple

import ahocorasick

from rg.privacy.exposure import ExposureLedger
from rg.privacy.normalise import normalise, whole_token

Category = Literal["entity_name", "entity_id", "literal", "relation", "alias"]
"""What a raw string is; the only thing a refusal reveals."""

MIN_CHARS = 2
MIN_DIGITS = 4
COMMON_WORDS = frozenset(
    "a an and are as at be by for from has have he her his in is it its of on or she that the their "
    "they this to was were what when where which who whom whose why with you".split()
)
"""Words no entity name may be guarded as: they occur in every request."""


class EgressRefused(RuntimeError):
    """A Brain-bound request held a raw string; nothing was sent.

    Attributes:
        category: What kind of raw string matched (never the string itself).
    """

    def __init__(self, category: str) -> None:
        super().__init__(f"egress refused: the request holds a raw {category}")
        self.category = category


def guardable(normalised: str, public: frozenset[str] = frozenset()) -> bool:
    """Whether a normalised raw string is distinctive enough to guard (see the module docstring);
    a string in ``public`` (words of the schema the Brain may see) is not."""
    if len(normalised) < MIN_CHARS or normalised in COMMON_WORDS or normalised in public:
        return False
    return not (normalised.isdigit() and len(normalised) < MIN_DIGITS)


class Keys(NamedTuple):
    """A raw string's normal forms (:func:`keys_of`), worked out once per string.

    Attributes:
        plain: :func:`~rg.privacy.normalise.normalise` of the string.
        spaced: ``plain`` with underscores as spaces (an id such as ``barack_obama``), "" when
            ``plain`` has no underscore.
        marked: The string normalised with its punctuation kept, "" when that equals ``plain``.
        plain_ok: Whether ``plain`` is guardable before any session's public words.
        marked_ok: The same for ``marked``.
    """

    plain: str
    spaced: str
    marked: str
    plain_ok: bool
    marked_ok: bool


def keys_of(string: str) -> Keys:
    """The keys the guard looks for ``string`` by (see :class:`Keys`)."""
    plain = normalise(string)
    spaced = " ".join(plain.replace("_", " ").split()) if "_" in plain else ""
    marked = normalise(string, punctuation=True)
    marked = "" if marked == plain else marked
    return Keys(plain, spaced, marked, guardable(plain), bool(marked) and guardable(marked))


def _text(value: object) -> str:
    """A message field as the guard reads it: a string as it is, anything else as its JSON text."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _padded(key: str) -> str:
    return f" {key} "


class GuardIndex:
    """The raw strings of one KG, normalised once, in automata shared by every session's guard.

    Args:
        strings: The KG's raw strings (entity ids or names, relation labels, literal values).

    An index never refuses anything by itself: a session's :class:`EgressGuard` activates the
    keys of the strings it is given and counts a match only on an active key (module docstring).
    """

    def __init__(self, strings: Iterable[str] = ()) -> None:
        self._keys: dict[str, Keys] = {}
        for string in strings:
            if string not in self._keys:
                self._keys[string] = keys_of(string)
        self.keys: Callable[[str], Keys | None] = self._keys.get
        """The keys of a string if the index holds it, else None (a dict lookup: guards call it per string)."""
        self._plain = ahocorasick.Automaton()  # " key " → key: guardable plain keys and their spaced forms
        self._marked = ahocorasick.Automaton()  # marked key → key
        owners: dict[str, list[str]] = {}  # a key the automata find → the strings that give it
        punctuated: list[str] = []
        for string, keys in self._keys.items():
            if keys.plain_ok:
                for key in (keys.plain, keys.spaced):
                    if key:
                        owners.setdefault(key, []).append(string)
                        if _padded(key) not in self._plain:
                            self._plain.add_word(_padded(key), key)
            if keys.marked_ok:
                punctuated.append(string)
                if keys.marked not in self._marked:
                    self._marked.add_word(keys.marked, keys.marked)
                if keys.marked != keys.plain:
                    owners.setdefault(keys.marked, []).append(string)
        self._owners = {key: tuple(strings) for key, strings in owners.items()}
        self._marked_only = frozenset(s for s in punctuated if not self._keys[s].plain_ok)
        self._by_punctuation: dict[frozenset[str], frozenset[str]] = {}
        for automaton in (self._plain, self._marked):
            if len(automaton):
                automaton.make_automaton()

    def __len__(self) -> int:
        return len(self._keys)

    def __contains__(self, string: object) -> bool:
        return string in self._keys

    def owners(self, key: str) -> tuple[str, ...]:
        """The strings whose plain, spaced or marked key is ``key`` (none when the automata do not hold it)."""
        return self._owners.get(key, ())

    def held(self, strings: Iterable[str]) -> tuple[set[str], set[str]]:
        """``strings`` split into those the index holds and the others (set operations, no per-string Python)."""
        given = strings if isinstance(strings, set) else set(strings)
        missing = given.difference(self._keys)
        return (given.difference(missing) if missing else given.copy()), missing

    def by_punctuation(self, public: frozenset[str]) -> frozenset[str]:
        """The strings a guard with these ``public`` words guards by their punctuated key: a guardable
        marked key, and a plain key too weak to guard or public (worked out once per set of public words)."""
        found = self._by_punctuation.get(public)
        if found is None:
            shadowed = (s for word in public for s in self.owners(word)
                        if self._keys[s].marked_ok and self._keys[s].plain == word)
            found = self._by_punctuation[public] = self._marked_only.union(shadowed)
        return found

    def holds_plain(self, key: str) -> bool:
        """Whether the shared automaton finds the plain (or spaced) key ``key``."""
        return len(self._plain) > 0 and _padded(key) in self._plain

    def holds_marked(self, key: str) -> bool:
        """Whether the shared automaton finds the marked key ``key``."""
        return len(self._marked) > 0 and key in self._marked

    def extended(self, strings: Iterable[str]) -> "GuardIndex":
        """A new index over this one's strings and ``strings`` (a KG edited live): the holder swaps it in.

        Sessions already open keep the index they were given; a new name reaches them anyway, in
        their own automaton, when they are given it (the module docstring).
        """
        return GuardIndex([*self._keys, *strings])

    def plain_matches(self, padded: str) -> Iterator[tuple[int, str]]:
        """(end, key) of every plain key occurring as whole tokens in a padded normalised text,
        by end, longest first at one end."""
        return self._plain.iter(padded) if len(self._plain) else iter(())

    def marked_matches(self, folded: str) -> Iterator[tuple[int, str]]:
        """(end, key) of every marked key in a text normalised with its punctuation (not only whole tokens)."""
        return self._marked.iter(folded) if len(self._marked) else iter(())

    def occurring(self, plain: str, marked: str | None = None) -> tuple[set[str], set[str]]:
        """The plain keys found as whole tokens in the normalised text ``plain``, and the marked keys in
        ``marked`` (the same text normalised with its punctuation), whoever's strings they are."""
        found = {key for _, key in self.plain_matches(_padded(plain))}
        found_marked = set() if marked is None else {
            key for end, key in self.marked_matches(marked) if whole_token(marked, end + 1 - len(key), end + 1)}
        return found, found_marked


class EgressGuard:
    """Refuses any text that holds one of its raw strings as a whole token.

    Args:
        raw: Category → raw strings of the session.
        public: Normalised words the Brain may see anyway (relation and type labels of the
            schema view); a raw string equal to one of them cannot be told apart and is skipped.
        exposure: The ledger every request that passes (or is refused) is booked in; a new one
            by default.
        index: The KG's shared :class:`GuardIndex` (none: every string goes into this guard's own
            automaton). It changes the work done, never a verdict.
    """

    def __init__(self, raw: Mapping[str, Iterable[str]] | None = None, public: Iterable[str] = (),
                 exposure: ExposureLedger | None = None, index: GuardIndex | None = None) -> None:
        self.index = index if index is not None else GuardIndex()
        self.public = frozenset(public)
        self.exposure = exposure if exposure is not None else ExposureLedger()
        self.skipped: Counter[str] = Counter()
        self.closed = False
        self._reset()
        for category, strings in (raw or {}).items():
            self.add(category, strings)

    def _reset(self) -> None:
        self._active: dict[str, str] = {}  # plain or spaced key → category of the first string that gave it
        self._active_marked: dict[str, str] = {}  # keys that keep their punctuation (61*, '71, C++)
        self._own = ahocorasick.Automaton()  # padded keys the index does not find
        self._own_marked = ahocorasick.Automaton()
        self._seen: set[tuple[str, str]] = set()  # strings skipped, each counted once
        self._deferred: list[tuple[set[str], Callable[[str], Iterable[tuple[str, str]]]]] = []
        self._built = True

    @property
    def size(self) -> int:
        """Plain keys guarded (a string and its spaced form count apart)."""
        return len(self._active)

    @property
    def marked_size(self) -> int:
        """Keys guarded with their punctuation."""
        return len(self._active_marked)

    def close(self) -> None:
        """Forget every raw string; from now on every check refuses (category ``closed_session``)."""
        self._reset()
        self.closed = True

    def add(self, category: str, strings: Iterable[str]) -> None:
        """Guard more raw strings of ``category``."""
        self.add_pairs((category, string) for string in strings)

    def add_pairs(self, pairs: Iterable[tuple[str, str]]) -> None:
        """Guard (category, raw string) pairs, in order: a key shared by two strings keeps the first one's
        category (the only thing a refusal names). A string the index holds costs a lookup; any other
        is normalised here and goes into this guard's own automaton."""
        if self.closed:
            raise RuntimeError("this egress guard's session is closed; open a new session per question")
        indexed, public, active = self.index.keys, self.public, self._active
        for category, string in pairs:
            keys = indexed(string)
            if keys is None:
                self._add_own(category, string)
            elif keys.plain_ok and keys.plain not in public:  # the hot path: activate the shared keys
                active.setdefault(keys.plain, category)
                if keys.spaced and category != "relation":
                    active.setdefault(keys.spaced, category)
            else:
                self._add_rest(category, string, keys, own=False)

    def defer(self, strings: Iterable[str], pairs_of: Callable[[str], Iterable[tuple[str, str]]]) -> None:
        """Guard ``strings`` as ``add_pairs(pairs_of(s))`` would, resolving each only if a check meets its key.

        ``pairs_of(s)`` gives the (category, string) pairs to guard for ``s`` (none: ``s`` is not guarded);
        they must be strings the index holds (a string and its spaced form, as a subgraph's ids are). A
        string the index lacks, and one the guard may have to look for by its punctuation (``61*``, or a
        name whose plain key is a public word), is guarded now; the rest cost one set per call (module
        docstring).
        """
        if self.closed:
            raise RuntimeError("this egress guard's session is closed; open a new session per question")
        held, missing = self.index.held(strings)
        now = missing.union(held.intersection(self.index.by_punctuation(self.public)))
        for string in now:
            self.add_pairs(pairs_of(string))
        held -= now
        if held:
            self._deferred.append((held, pairs_of))

    def defers(self, string: str) -> bool:
        """Whether ``string`` was deferred (:meth:`defer`) and not resolved yet: it is guarded as it is."""
        for strings, _ in self._deferred:
            if string in strings:
                return True
        return False

    def resolve(self, strings: Iterable[str]) -> None:
        """Guard now those of ``strings`` that were deferred (:meth:`defer`), by their current pairs."""
        wanted = set(strings)
        for deferred, pairs_of in self._deferred:
            for string in deferred.intersection(wanted):
                deferred.discard(string)
                self.add_pairs(pairs_of(string))

    def _resolve(self, key: str, active: Mapping[str, str]) -> str | None:
        """A key's category once the deferred strings that give it are guarded (None: none of them is)."""
        for owner in self.index.owners(key):
            for strings, pairs_of in self._deferred:
                if owner in strings:
                    strings.discard(owner)
                    self.add_pairs(pairs_of(owner))
        return active.get(key)

    def _add_own(self, category: str, string: str) -> None:
        """Guard a string the index lacks: its keys are worked out here and go into the own automaton."""
        keys = keys_of(string)
        if keys.plain_ok and keys.plain not in self.public:
            self._activate(keys.plain, category)
            if keys.spaced and category != "relation":  # an id such as barack_obama is also written with
                # spaces; a relation label such as directed_by is not looked for as "directed by",
                # which is the question's own language
                self._activate(keys.spaced, category)
        else:
            self._add_rest(category, string, keys, own=True)

    def _add_rest(self, category: str, string: str, keys: Keys, own: bool) -> None:
        """A string whose plain key is too weak to guard: by its punctuated key, else skipped (counted once)."""
        if keys.marked_ok and keys.marked not in self.public:  # a name that is nothing without its punctuation
            if keys.marked not in self._active_marked:
                self._active_marked[keys.marked] = category
                if own and not self.index.holds_marked(keys.marked):
                    self._own_marked.add_word(keys.marked, keys.marked)
                    self._built = False
        elif (category, string) not in self._seen:
            self._seen.add((category, string))
            self.skipped[category] += 1

    def _activate(self, key: str, category: str) -> None:
        if key in self._active:
            return
        self._active[key] = category
        if not self.index.holds_plain(key) and _padded(key) not in self._own:
            self._own.add_word(_padded(key), key)
            self._built = False

    def find(self, text: str) -> str | None:
        """The category of the first raw string found in ``text`` as a whole token, or None
        (``closed_session`` once the session is closed: nothing passes a closed guard).

        First means: the match ending earliest in the normalised text, the longest at one end;
        matches of punctuated keys count only when no plain key matches.
        """
        if self.closed:
            return "closed_session"
        self._compile()
        best = None
        if self._active or self._deferred:
            padded = _padded(normalise(text))
            best = self._first(self.index.plain_matches(padded), self._active, None, shared=True)
            self._compile()  # again: resolving a deferred string may have added keys
            if len(self._own):
                best = min(filter(None, (best, self._first(self._own.iter(padded), self._active, None))), default=None)
            if best is not None:
                return best[2]
        if self._active_marked:
            folded = normalise(text, True)
            own = self._own_marked.iter(folded) if len(self._own_marked) else iter(())
            best = min((hit for hit in (self._first(self.index.marked_matches(folded), self._active_marked, folded),
                                        self._first(own, self._active_marked, folded)) if hit is not None),
                       default=None)
            if best is not None:
                return best[2]
        return None

    def _compile(self) -> None:
        """Compile the own automata if strings were added since the last check."""
        if not self._built:
            for automaton in (self._own, self._own_marked):
                if len(automaton):
                    automaton.make_automaton()
            self._built = True

    def _first(self, matches: Iterator[tuple[int, str]], active: Mapping[str, str],
               folded: str | None, shared: bool = False) -> tuple[int, int, str] | None:
        """(end, -length, category) of the first match on an active key (checked for whole tokens in
        ``folded``; a padded plain match is one already); with ``shared``, a key of a deferred string
        (:meth:`defer`) is resolved when met."""
        deferred = shared and bool(self._deferred)
        for end, key in matches:
            category = active.get(key)
            if category is None and deferred:
                category = self._resolve(key, active)
            if category is not None and (folded is None or whole_token(folded, end + 1 - len(key), end + 1)):
                return end, -len(key), category
        return None

    def check(self, text: str) -> None:
        """Raise :class:`EgressRefused` if ``text`` holds a raw string."""
        category = self.find(text)
        if category is not None:
            raise EgressRefused(category)

    def check_messages(self, messages: Sequence[Mapping[str, object]]) -> None:
        """Check a chat request: the messages' contents, then every other field of every message (its
        role, and any other key and value); a value that is not a string (a list of content parts, a
        tool call) is read as its JSON text.

        The JSON body holds nothing else: its escapes (``\\n``, ``\\u0001``) only split what these checks
        already read as separate tokens, so the body's text is not checked a second time.
        """
        self.check("\n".join(_text(m.get("content", "")) for m in messages))
        self.check("\n".join(f"{key} {_text(value)}" for m in messages for key, value in m.items() if key != "content"))

    def record(self, messages: Sequence[Mapping[str, str]], *, stage: str, attempts: int, prompt_tokens: int = 0,
               completion_tokens: int = 0, refused: str | None = None) -> None:
        """Book a request in :attr:`exposure`: refused (nothing sent) or sent in ``attempts`` HTTP requests."""
        if refused is not None:
            self.exposure.record_refused(stage, refused)
        else:
            self.exposure.record_sent(stage, messages, attempts=attempts, prompt_tokens=prompt_tokens,
                                      completion_tokens=completion_tokens)
