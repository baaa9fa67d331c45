"""Which of a KG's entities a question names, found without a linker: every name and alias the Hand holds.

Masking replaces the names the Hand knows of; the egress guard refuses the strings a session has
learnt. Both start from the entities of the working subgraph and the topics, so a name the user typed
of an entity *outside* the subgraph ("which films did X direct, apart from Ashwick?") was known to
neither, and reached the Brain verbatim. A linker's name index knows every name of the KG
(:meth:`rg.linking.linker.EntityLinker.named_spans`); a Hand without a linker asks a
:class:`WrittenNames` instead: one Aho-Corasick automaton over the normalised names and aliases of
every entity (the guard's keys, :func:`rg.privacy.guard.keys_of`: case, accents, punctuation and
spacing folded; whole tokens only; names too weak to guard left out), built once per KG. The entities
it finds join the question's named entities, so their names are fetched, masked and guarded like
the subgraph's.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

import ahocorasick

from rg.privacy.guard import keys_of
from rg.privacy.normalise import normalise, whole_token


class WrittenNames:
    """The entities whose name or alias a text writes, over one KG's (entity id, name) pairs.

    Args:
        pairs: Every (entity id, name or alias) of the KG, e.g. a store's ``iter_names()`` and
            ``iter_aliases()``; an id that is its own name comes as ``(id, id)``.
    """

    def __init__(self, pairs: Iterable[tuple[str, str]]) -> None:
        plain: dict[str, set[str]] = defaultdict(set)
        marked: dict[str, set[str]] = defaultdict(set)
        for entity, name in pairs:
            keys = keys_of(name)
            if keys.plain_ok:
                plain[keys.plain].add(entity)
                if keys.spaced:
                    plain[keys.spaced].add(entity)
            if keys.marked_ok:
                marked[keys.marked].add(entity)
        self._plain = _automaton({f" {key} ": (key, tuple(sorted(ids))) for key, ids in plain.items()})
        self._marked = _automaton({key: (key, tuple(sorted(ids))) for key, ids in marked.items()})
        self.keys = len(plain) + len(marked)

    def __len__(self) -> int:
        return self.keys

    def in_text(self, text: str) -> dict[str, tuple[str, ...]]:
        """Entity id → the normalised words of ``text`` that name it, for every entity ``text`` names."""
        found: dict[str, tuple[str, ...]] = {}

        def add(key: str, ids: tuple[str, ...]) -> None:
            for entity in ids:
                found[entity] = tuple(dict.fromkeys((*found.get(entity, ()), key)))

        if len(self._plain):
            for _, (key, ids) in self._plain.iter(f" {normalise(text)} "):
                add(key, ids)
        if len(self._marked):
            folded = normalise(text, punctuation=True)
            for end, (key, ids) in self._marked.iter(folded):
                if whole_token(folded, end + 1 - len(key), end + 1):
                    add(key, ids)
        return found


def _automaton(words: dict[str, tuple[str, tuple[str, ...]]]) -> ahocorasick.Automaton:
    automaton = ahocorasick.Automaton()
    for word, value in words.items():
        automaton.add_word(word, value)
    if len(automaton):
        automaton.make_automaton()
    return automaton
