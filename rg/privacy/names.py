"""The names a question's raw entities go by: what masking and the egress guard must look for.

In the in-memory KGs (synthetic, MetaQA, RoG subgraphs) an entity's id is its name, so guarding
the ids guards the names. In a triple store the id is a machine id (``m.0abc``) and the name a
literal beside it (``type.object.name``), with aliases (``common.topic.alias``) and the words a
user typed that the linker matched (a mention): none of them is an id, and each identifies the
entity as well as its id does. A :class:`NameBook` holds them for one question, fetched by the
Hand from whichever store holds the KG (:meth:`rg.reasoning.dualtower.hand.Hand.names`) before
anything is built for the Brain; a :class:`~rg.privacy.session.PrivacySession` that has learnt it
guards and masks every form, and shows an entity left in the clear by its name, never its id.

An entity whose name could not be fetched is *withheld*: the Hand drops it from the working
subgraph (it is never exposed) and records why.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

MID = re.compile(r"^[mg]\.[0-9a-z_]+$")
"""A Freebase machine id."""
NAMES_UNAVAILABLE = "names_unavailable"
"""Why an entity is withheld: the store did not answer for its name."""


@dataclass(frozen=True)
class NameBook:
    """Names, aliases and mentions of raw entity ids (Hand side; never sent).

    Attributes:
        names: Id → display name; None for an entity the store holds no name for (a CVT).
        aliases: Id → other names it goes by: the store's aliases and the question's linked mentions.
        withheld: Id → why it may not be exposed (:data:`NAMES_UNAVAILABLE`).

    An id the book does not list is its own name (the in-memory KGs' convention).
    """

    names: Mapping[str, str | None] = field(default_factory=dict)
    aliases: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    withheld: Mapping[str, str] = field(default_factory=dict)

    def display(self, entity: str) -> str:
        """How the Hand writes ``entity`` for people and for its reader: its name, else its id."""
        name = self.names.get(entity, entity)
        return entity if name is None else name

    def named(self, entity: str) -> bool:
        """Whether ``entity`` has a name of its own (a bare machine id is no name)."""
        return MID.match(self.display(entity)) is None

    def forms(self, entity: str) -> tuple[tuple[str, str], ...]:
        """Every string that identifies ``entity``, each with its guard category (``entity_id``,
        ``entity_name`` or ``alias``): its id, its name and its aliases, each once."""
        out = [(entity, "entity_id" if MID.match(entity) else "entity_name")]
        if entity not in self.names and entity not in self.aliases:  # an id that is its own name
            return (out[0],)
        name = self.names.get(entity, entity)
        if name is not None and name != entity:
            out.append((name, "entity_name"))
        out += [(a, "alias") for a in self.aliases.get(entity, ()) if a not in (entity, name)]
        return tuple(dict.fromkeys(out))

    def surface(self, entity: str) -> tuple[str, ...]:
        """The forms of ``entity`` a question may write: its name and aliases (its id too when it is its name)."""
        return tuple(f for f, category in self.forms(entity) if category != "entity_id" or f == self.display(entity))

    def display_triples(self, triples: Iterable[tuple[str, str, str]]) -> tuple[tuple[str, str, str], ...]:
        """``triples`` with entities written by :meth:`display`."""
        return tuple((self.display(h), r, self.display(t)) for h, r, t in triples)

    def with_mentions(self, mentions: Mapping[str, Iterable[str]]) -> "NameBook":
        """This book with each entity's linked mentions (the words the linker matched) added to its aliases."""
        aliases = {e: tuple(a) for e, a in self.aliases.items()}
        for entity, texts in mentions.items():
            aliases[entity] = tuple(dict.fromkeys([*aliases.get(entity, ()), *(t for t in texts if t.strip())]))
        return NameBook(self.names, aliases, self.withheld)
