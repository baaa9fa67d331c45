"""The synthetic KG (the demo's, seed 0) in both stores, with aliases, for the store-parameterised privacy tests.

Not a test module: imported by tests/test_privacy_stores.py. The in-memory store names entities by their
strings; the SPARQL store (a real Virtuoso) by ``m.0<hex>`` ids with the strings as name literals and the
aliases as ``common.topic.alias`` literals, and its schema is the same one relabelled to those ids (what
``jobs.load_kg`` writes).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from bench.privacy_stores import NAMED_KINDS, checker_form
from rg.data.synthetic import SyntheticConfig, generate
from rg.graph import KnowledgeGraph
from rg.linking import EntityLinker, LinkingConfig, NameIndex
from rg.linking.names import store_names
from rg.privacy import KGSchema
from rg.reasoning.dualtower import DualTowerConfig, build_controller
from rg.stores.base import KGStore
from rg.stores.memory import MemoryStore
from rg.stores.ntriples import entity_ids
from tests.stores_virtuoso import load_graph

SYNTHETIC = SyntheticConfig(seed=0, questions=200)


def aliases_of(types: dict[str, str]) -> dict[str, tuple[str, ...]]:
    """An alias per person and city: ``W. Kowalski`` for Wim Kowalski, ``the city of Varport`` for Varport."""
    out: dict[str, tuple[str, ...]] = {}
    for name, kind in types.items():
        words = name.split()
        if kind == "person" and len(words) >= 2:
            out[name] = (f"{words[0][0]}. {' '.join(words[1:])}",)
        elif kind == "city":
            out[name] = (f"the city of {name}",)
    return out


@dataclass
class World:
    """One store of the synthetic KG and what a test needs beside it."""

    kind: str
    store: KGStore
    schema: KGSchema
    ids: dict[str, str]
    """Entity string → its id in this store."""

    def id(self, name: str) -> str:
        return self.ids[name]

    def linker(self) -> EntityLinker:
        """Exact linking (names and aliases) over this store's name index."""
        index = NameIndex.build(store_names(self.store, LinkingConfig().unnamed_pattern), None, self.kind)
        return EntityLinker(index, LinkingConfig(dense="off"))


def synthetic_data():
    data = generate(SYNTHETIC)
    return data, KnowledgeGraph.from_triples(data.triples, dedup=True)


def memory_world() -> World:
    data, kg = synthetic_data()
    schema = KGSchema.build(kg.triples(), data.entity_types)
    names = kg.entity_names.tolist()
    return World("memory", MemoryStore(kg, aliases=aliases_of(data.entity_types)), schema, dict(zip(names, names)))


def sparql_world(virtuoso, folder) -> World:
    data, kg = synthetic_data()
    ids = dict(zip(kg.entity_names.tolist(), entity_ids(kg).tolist()))
    store = load_graph(virtuoso, kg, "http://rg.test/privacy-synthetic", folder, aliases=aliases_of(data.entity_types))
    schema = KGSchema.build(kg.triples(), data.entity_types).relabel(ids)
    return World("sparql", store, schema, ids)


def controller(world: World, url: str, mode: str = "utility", linker: EntityLinker | None = None, d_max: int = 2):
    config = DualTowerConfig(
        privacy={"mode": mode}, similarity="lexical", d_max=d_max, max_steps=2, max_failures=2,
        brain={"kind": "llm", "reasks": 0,
               "llm": {"base_url": url, "model": "scripted", "side": "brain", "max_retries": 0, "backoff_s": 0.0,
                       "max_backoff_s": 0.0, "timeout_s": 10.0}})
    return build_controller(config, world.schema, store=world.store, linker=linker)


def raw_strings(world: World) -> list[str]:
    """What must never reach the Brain: every name and alias of the named kinds, and every store id."""
    data, _ = synthetic_data()
    aliases = aliases_of(data.entity_types)
    named = [n for n, kind in data.entity_types.items() if kind in NAMED_KINDS]
    strings = named + [a for n in named for a in aliases.get(n, ())]
    return strings + [i for i in world.ids.values() if i not in world.ids]


def leak_finder(strings: list[str]) -> Callable[[str], list[str]]:
    """A function listing the ``strings`` a body holds as whole words (in the checker's own normalisation)."""
    forms = {checker_form(s): s for s in strings if len(checker_form(s).strip()) >= 3}

    def find(body: str) -> list[str]:
        folded = checker_form(body)
        return sorted({raw for form, raw in forms.items() if form in folded})

    return find
