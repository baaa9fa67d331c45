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
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Literal

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


class EgressGuard:
    """Refuses any text that holds one of its raw strings as a whole token.

    Args:
        raw: Category → raw strings of the session.
        public: Normalised words the Brain may see anyway (relation and type labels of the
            schema view); a raw string equal to one of them cannot be told apart and is skipped.
        exposure: The ledger every request that passes (or is refused) is booked in; a new one
            by default.
    """

    def __init__(self, raw: Mapping[str, Iterable[str]] | None = None, public: Iterable[str] = (),
                 exposure: ExposureLedger | None = None) -> None:
        self._automaton = ahocorasick.Automaton()
        self._marked = ahocorasick.Automaton()  # keys that keep their punctuation (61*, '71, C++)
        self.public = frozenset(public)
        self.exposure = exposure if exposure is not None else ExposureLedger()
        self.skipped: Counter[str] = Counter()
        self.size = 0
        self._marked_size = 0
        self._seen: set[tuple[str, str]] = set()
        self._built = False
        self.closed = False
        for category, strings in (raw or {}).items():
            self.add(category, strings)

    def close(self) -> None:
        """Forget every raw string; from now on every check refuses (category ``closed_session``)."""
        self._automaton = ahocorasick.Automaton()
        self._marked = ahocorasick.Automaton()
        self._seen = set()
        self.size = self._marked_size = 0
        self._built = False
        self.closed = True

    def add(self, category: str, strings: Iterable[str]) -> None:
        """Guard more raw strings of ``category`` (the automaton is rebuilt on the next check)."""
        if self.closed:
            raise RuntimeError("this egress guard's session is closed; open a new session per question")
        for string in strings:
            if (category, string) in self._seen:
                continue
            self._seen.add((category, string))
            key = normalise(string)
            if guardable(key, self.public):
                self._add(self._automaton, key, category)
                if "_" in key and category != "relation":  # an id such as barack_obama is also written with
                    # spaces; a relation label such as directed_by is not looked for as "directed by",
                    # which is the question's own language
                    self._add(self._automaton, " ".join(key.replace("_", " ").split()), category)
                continue
            marked = normalise(string, punctuation=True)
            if marked != key and guardable(marked, self.public):  # a name that is nothing without its punctuation
                self._add(self._marked, marked, category)
                continue
            self.skipped[category] += 1
        self._built = False

    def _add(self, automaton: ahocorasick.Automaton, key: str, category: str) -> None:
        if key and key not in automaton:
            automaton.add_word(key, (category, len(key)))
            if automaton is self._marked:
                self._marked_size += 1
            else:
                self.size += 1

    def find(self, text: str) -> str | None:
        """The category of the first raw string found in ``text`` as a whole token, or None
        (``closed_session`` once the session is closed: nothing passes a closed guard)."""
        if self.closed:
            return "closed_session"
        if not self._built:
            for automaton in (self._automaton, self._marked):
                if len(automaton):
                    automaton.make_automaton()
            self._built = True
        for automaton, punctuation in ((self._automaton, False), (self._marked, True)):
            if not len(automaton):
                continue
            folded = normalise(text, punctuation)
            for end, (category, length) in automaton.iter(folded):
                if whole_token(folded, end + 1 - length, end + 1):
                    return category
        return None

    def check(self, text: str) -> None:
        """Raise :class:`EgressRefused` if ``text`` holds a raw string."""
        category = self.find(text)
        if category is not None:
            raise EgressRefused(category)

    def check_messages(self, messages: Sequence[Mapping[str, str]]) -> None:
        """Check a chat request: every message's content and role, and the JSON body they make."""
        self.check("\n".join(str(m.get("content", "")) for m in messages))
        self.check(json.dumps(list(messages), ensure_ascii=False))

    def record(self, messages: Sequence[Mapping[str, str]], *, stage: str, attempts: int, prompt_tokens: int = 0,
               completion_tokens: int = 0, refused: str | None = None) -> None:
        """Book a request in :attr:`exposure`: refused (nothing sent) or sent in ``attempts`` HTTP requests."""
        if refused is not None:
            self.exposure.record_refused(stage, refused)
        else:
            self.exposure.record_sent(stage, messages, attempts=attempts, prompt_tokens=prompt_tokens,
                                      completion_tokens=completion_tokens)
