"""What the Brain may know of a KG's schema: coarse entity types and relation clusters.

Computed once per KG and saved beside it (:meth:`KGSchema.save`), never per question:

- **Entity types** come from the KG's own schema where it has one (the synthetic KG's types,
  Freebase's ``type.object.type``), passed as a mapping. Otherwise they are derived from the
  relations an entity takes part in (:meth:`KGSchema.derive`): every (role, relation) pair an
  entity holds, e.g. (tail, ``directed_by``), is joined with the other pairs the same entity
  holds when enough of the entities hold both (union-find), and each resulting class is one
  type, named after its most frequent pair (``directed_by.tail``). In MetaQA this separates
  films, people, tags, genres, years and languages. With Freebase property ids
  (``domain.type.property``), :class:`TypingConfig` ``property_schema`` lets a head stand for the
  property's own schema type (``location.country``): Freebase declares every property on one type,
  and its subject is an instance of that type.
- **Relation clusters** (``privacy`` mode): relations with the same (head type, tail type)
  signature share one label, ``rel_03 (film→person)``, so the Brain sees the shape of a path but
  not which of ``directed_by`` / ``written_by`` / ``starred_actors`` it follows. A derived type
  is named after a relation, so in ``privacy`` mode it is shown by a neutral alias
  (``type_03``), in cluster labels too.
"""

from __future__ import annotations

import functools
import itertools
import json
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import Field

from rg.config import Config
from rg.graph.path import INVERSE_SUFFIX, split_relation

if TYPE_CHECKING:
    from rg.privacy.guard import GuardIndex
    from rg.privacy.written import WrittenNames

UNKNOWN = "entity"
VIEW_WORDS = frozenset({UNKNOWN, "year", "number"})
"""Words the anonymised view writes itself (the unknown or pooled type, ``year 1987``, ``number 1e3-1e4``):
always public, so an entity named ``Entity`` or ``Year`` cannot make the guard refuse the view's own words."""
SCHEMA_FILE = "privacy_schema.json"
MIN_OVERLAP = 0.05
"""Share of the commoner (role, relation) pair's entities that must also hold the other for the two to be one type."""
TYPING_RELATIONS = frozenset({"common.topic.notable_types", "type.object.type"})
"""Freebase's own type assertions: ``entity → [r] → type node``. Where a KG has them they give the
types (see :func:`derive_types`); every entity holds one, so as a role they would merge all classes."""
SCHEMA_KINDS = frozenset({"type"})
"""Entity kinds that are schema vocabulary (Freebase type nodes such as ``Person``), shown as-is."""


class TypingConfig(Config):
    """How entity types are derived where the KG asserts none (:func:`derive_types`)."""

    min_overlap: float = Field(
        MIN_OVERLAP, gt=0.0, le=1.0,
        description="Share of the commoner (role, relation) pair's entities that must also hold the other for the "
        "two to join one type. Higher splits more: on the WebQSP subgraphs 0.05 chains people, countries and cities "
        "into one type, 0.1 with `property_schema` keeps them apart.",
    )
    property_schema: bool = Field(
        False,
        description="Freebase property ids (`location.country.languages_spoken`): a head's role is the property's "
        "schema type (`location.country`), so the properties of one type join by construction. Relations with "
        "fewer than three dotted parts keep their `relation.head` role.",
    )


@dataclass(frozen=True)
class KGSchema:
    """Coarse entity types and relation clusters of one KG."""

    types: Mapping[str, str]
    clusters: Mapping[str, str]
    aliases: Mapping[str, str] = field(default_factory=dict)
    names: Mapping[str, str] = field(default_factory=dict)
    """Names of schema-vocabulary nodes whose ids are not their names (a triple store's type nodes)."""

    def relabel(self, ids: Mapping[str, str]) -> "KGSchema":
        """This schema over other entity ids (``ids``: entity → its id in a store, e.g. ``m.0<hex>``): the
        same types, clusters and labels, with the schema-vocabulary nodes' names kept for :meth:`public_words`."""
        types = {ids.get(e, e): kind for e, kind in self.types.items()}
        names = {ids.get(e, e): self.names.get(e, e) for e, kind in self.types.items()
                 if kind in SCHEMA_KINDS and ids.get(e, e) != self.names.get(e, e)}
        return KGSchema(types=types, clusters=dict(self.clusters), aliases=dict(self.aliases), names=names)

    def type_of(self, entity: str) -> str:
        return self.types.get(entity, UNKNOWN)

    def type_label(self, kind: str, relations_shown: bool) -> str:
        """How a type is shown: as-is, or by its neutral alias when relations are hidden (a type
        derived from relation participation is named after a relation, ``directed_by.tail``)."""
        return kind if relations_shown else self.aliases.get(kind, kind)

    def is_public(self, entity: str) -> bool:
        """Whether ``entity`` is schema vocabulary (a type node), which the Brain may see by name."""
        return self.types.get(entity) in SCHEMA_KINDS

    def relation_cluster(self, relation: str) -> str:
        return self.clusters.get(relation, "rel_unknown")

    def view_path(self, path: Iterable[str]) -> tuple[str, ...]:
        """A raw relation path as the ``privacy`` view writes it: each step's cluster, ``^-1`` kept."""
        out = []
        for label in path:
            raw, forward = split_relation(label)
            shown = self.relation_cluster(raw)
            out.append(shown if forward else f"{shown}{INVERSE_SUFFIX}")
        return tuple(out)

    @classmethod
    def build(cls, triples: Iterable[tuple[str, str, str]], types: Mapping[str, str] | None = None,
              typing: TypingConfig | None = None) -> "KGSchema":
        """The schema of a KG: ``types`` where given, else derived (``typing``); clusters by type signature."""
        triples = list(triples)
        typing = typing or TypingConfig()
        entity_types = dict(types) if types is not None else derive_types(
            triples, typing.min_overlap, typing.property_schema)
        signatures: dict[str, Counter[tuple[str, str]]] = defaultdict(Counter)
        for h, r, t in triples:
            signatures[r][(entity_types.get(h, UNKNOWN), entity_types.get(t, UNKNOWN))] += 1
        # derived types are named after relations; privacy mode shows them by a neutral alias
        aliases = {} if types is not None else {
            kind: f"type_{i:02d}" for i, kind in enumerate(sorted(set(entity_types.values())))}
        majority = {r: c.most_common(1)[0][0] for r, c in signatures.items()}
        ordered = sorted(set(majority.values()))
        index = {sig: i for i, sig in enumerate(ordered)}
        shown = {kind: aliases.get(kind, kind) for sig in ordered for kind in sig}
        clusters = {r: f"rel_{index[sig]:02d} ({shown[sig[0]]}→{shown[sig[1]]})" for r, sig in majority.items()}
        return cls(types=entity_types, clusters=clusters, aliases=aliases)

    def public_words(self, relations_shown: bool, protocol: frozenset[str] = frozenset()) -> frozenset[str]:
        """Normalised words of the schema view the Brain sees: type labels, type nodes' names and
        cluster labels, and the words of relation labels when they are shown as-is (``utility``
        mode), with every run of consecutive words (see :func:`_words`); and the ``protocol``'s words,
        which every request to the Brain writes whatever the KG (its payload keys and prompt text,
        :func:`rg.reasoning.dualtower.prompts.protocol_words`). Computed once per schema, mode and
        protocol (every session asks)."""
        schema_words = self._public_shown if relations_shown else self._public_hidden
        if not protocol:
            return schema_words
        # a frozen dataclass caches in its __dict__, as cached_property does
        unions = self.__dict__.setdefault("_public_with_protocol", {})
        key = (relations_shown, protocol)
        if key not in unions:
            unions[key] = schema_words | protocol
        return unions[key]

    @functools.cached_property
    def _kinds(self) -> frozenset[str]:
        return frozenset(self.types.values())

    @functools.cached_property
    def _type_nodes(self) -> frozenset[str]:
        """Entities shown by name in every mode (:meth:`is_public`)."""
        return frozenset(self.names.get(e, e) for e, kind in self.types.items() if kind in SCHEMA_KINDS)

    @functools.cached_property
    def _public_shown(self) -> frozenset[str]:
        return _words([*self._kinds, *self._type_nodes, *self.clusters.values(), *self.clusters, *VIEW_WORDS])

    @functools.cached_property
    def _public_hidden(self) -> frozenset[str]:
        return _words([*{self.type_label(k, False) for k in self._kinds}, *self._type_nodes, *self.clusters.values(),
                       *VIEW_WORDS])

    @functools.cached_property
    def guard_index(self) -> "GuardIndex":
        """The egress guard's shared index of this KG's raw strings (:class:`rg.privacy.guard.GuardIndex`):
        every entity the schema types, the schema nodes' names and every relation label, normalised once
        and compiled on first use, then shared by every session over this schema. A string it lacks (a name
        fetched from a store, an alias, an entity added later) is guarded by the session's own automaton."""
        from rg.privacy.guard import GuardIndex

        return GuardIndex([*self.types, *self.names.values(), *self.clusters])

    @functools.cached_property
    def written_names(self) -> "WrittenNames":
        """The entities of this schema as :class:`rg.privacy.written.WrittenNames` (ids that are their own
        names; schema nodes left out: their names are public): what a Hand whose questions bring their own
        triples finds the question's names of entities outside the subgraph by. Built on first use."""
        from rg.privacy.written import WrittenNames

        return WrittenNames((e, e) for e, kind in self.types.items() if kind not in SCHEMA_KINDS)

    def save(self, folder: str | Path) -> Path:
        path = Path(folder) / SCHEMA_FILE
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"types": dict(self.types), "clusters": dict(self.clusters),
                                   "aliases": dict(self.aliases), "names": dict(self.names)}))
        tmp.replace(path)
        return path

    @classmethod
    def load(cls, folder: str | Path) -> "KGSchema":
        data = json.loads((Path(folder) / SCHEMA_FILE).read_text())
        return cls(types=data["types"], clusters=data["clusters"], aliases=data.get("aliases", {}),
                   names=data.get("names", {}))


def _words(texts: Iterable[str]) -> frozenset[str]:
    """The normalised words of ``texts``, and every run of consecutive words joined by a space:
    a name such as ``Film Genre`` reads like the label ``film.film.genre`` itself, so it is as
    public as a one-word name equal to a label's word."""
    from rg.privacy.normalise import normalise

    out: set[str] = set()
    for text in texts:
        words = [w for w in re.split(r"[^0-9a-z]+", normalise(text)) if w]
        out.update(" ".join(words[i:j]) for i in range(len(words)) for j in range(i + 1, len(words) + 1))
    return frozenset(out)


def head_role(relation: str, property_schema: bool) -> str:
    """The role a triple's head holds: ``relation.head``, or with ``property_schema`` the schema type a
    Freebase property is declared on (``location.country`` for ``location.country.languages_spoken``)."""
    parts = relation.split(".")
    return ".".join(parts[:-1]) if property_schema and len(parts) >= 3 else f"{relation}.head"


def derive_types(triples: Iterable[tuple[str, str, str]], min_overlap: float = MIN_OVERLAP,
                 property_schema: bool = False) -> dict[str, str]:
    """Entity types from relation participation (see the module docstring).

    Two (role, relation) pairs join one class when the entities holding both are at least
    ``min_overlap`` of those holding the commoner one: on MetaQA, directors who also act (8% of
    actors) join actors, but six films titled like years do not make films and years one type
    (joining on any shared entity merged the whole KB into one class). An entity takes the class
    of its most frequent pair. Triples of :data:`TYPING_RELATIONS` take no part in that: an entity
    typed by one takes its most frequent type node's name as its type, and the type nodes are
    schema vocabulary (kind ``type``, shown by name). ``property_schema``: see :func:`head_role`.
    """
    roles: dict[str, set[str]] = defaultdict(set)
    asserted: dict[str, Counter[str]] = defaultdict(Counter)
    for h, r, t in triples:
        if r in TYPING_RELATIONS:
            asserted[h][t] += 1
            continue
        roles[h].add(head_role(r, property_schema))
        roles[t].add(f"{r}.tail")
    frequency: Counter[str] = Counter(p for pairs in roles.values() for p in pairs)
    together: Counter[tuple[str, str]] = Counter(
        pair for pairs in roles.values() for pair in itertools.combinations(sorted(pairs), 2))
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for (a, b), shared in together.items():
        if shared >= min_overlap * max(frequency[a], frequency[b]):
            parent[find(b)] = find(a)
    members: dict[str, list[str]] = defaultdict(list)
    for pair in frequency:
        members[find(pair)].append(pair)
    name = {root: max(pairs, key=lambda p: (frequency[p], p)) for root, pairs in members.items()}
    types = {entity: name[find(max(pairs, key=lambda p: (frequency[p], p)))] for entity, pairs in roles.items()}
    types.update({node: "type" for nodes in asserted.values() for node in nodes})
    types.update({entity: min(nodes, key=lambda n: (-nodes[n], n)) for entity, nodes in asserted.items()})
    return types
