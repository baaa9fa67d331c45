"""MemoryStore and the content tie order: capped k-hop results do not depend on triple ids."""

from __future__ import annotations

import random

from rg.config import Config, validate_config
from rg.graph import KnowledgeGraph
from rg.stores import MemoryStore, StoreConfig, build_store, content_keys


def random_triples(seed: int, n: int = 400) -> list[tuple[str, str, str]]:
    rng = random.Random(seed)
    ents = [f"e{i}" for i in range(60)] + ["hub"]
    triples = {(rng.choice(ents), rng.choice("pqrs"), rng.choice(ents)) for _ in range(n)}
    triples |= {("hub", "h", e) for e in ents[:40]}
    return sorted(triples)


def test_capped_k_hop_is_the_same_whatever_the_triple_order():
    for seed in range(5):
        triples = random_triples(seed)
        shuffled = list(triples)
        random.Random(seed + 100).shuffle(shuffled)
        a = MemoryStore(KnowledgeGraph.from_triples(triples))
        b = MemoryStore(KnowledgeGraph.from_triples(shuffled))
        for seeds in (["e1"], ["hub"], ["e2", "e3"]):
            for hops in (1, 2, 3):
                for cap in (None, 5, 30, 120):
                    for cut in ("walk", "scramble"):
                        x, y = a.k_hop(seeds, hops, cap, "both", cut), b.k_hop(seeds, hops, cap, "both", cut)
                        assert x == y, (seed, seeds, hops, cap, cut)
                        assert cap is None or len(x) <= cap


def test_uncapped_k_hop_equals_the_engine_and_ids_order_is_unchanged_without_a_key():
    kg = KnowledgeGraph.from_triples(random_triples(0))
    store = MemoryStore(kg)
    sub = kg.k_hop(["e1"], 2)
    assert store.k_hop(["e1"], 2).triples == tuple(sorted(kg.triples(sub.triple_ids)))
    capped = kg.k_hop(["hub"], 2, 30)  # the default (id) order is still what the engine uses
    assert capped.truncated and len(capped) == 30
    keys = content_keys(kg)
    assert keys.dtype.name == "uint64" and len(set(keys.tolist())) == kg.num_triples
    assert store.k_hop(["missing"], 2).triples == () and store.k_hop(["missing"], 2).seeds == ("missing",)


def test_memory_store_lookups_and_paths():
    store = MemoryStore(KnowledgeGraph.from_triples([("a", "r", "b"), ("b", "s", "c"), ("a", "t", "c")]),
                        names={"a": "Alpha", "c": "Alpha"})
    assert store.entity_ids_by_name("Alpha") == ["a", "c"]  # ambiguity kept explicit
    assert store.entity_names(["a", "b", "zz"]) == {"a": "Alpha", "b": "b", "zz": None}
    assert [p.render() for p in store.shortest_paths("a", "c", "out")] == ["a → [t] → c"]
    assert [p.render() for p in store.ground("c", ["s^-1", "r^-1"])] == ["c ← [s] ← b ← [r] ← a"]
    assert store.neighbours(["b"], "in") == [("a", "r", "b")]


def test_build_store_from_a_kind_memory_config(tmp_path):
    kb = tmp_path / "kb.txt"
    kb.write_text("Inception|directed_by|Christopher Nolan\nInception|release_year|2010\n")

    class Holder(Config):
        kg: StoreConfig

    cfg = validate_config({"kg": {"kind": "memory", "kb": {"path": str(kb), "format": "metaqa"}}}, Holder)
    store = build_store(cfg.kg)
    assert isinstance(store, MemoryStore) and store.kg.num_triples == 2
    assert store.k_hop(["Inception"], 1).entities == ("2010", "Christopher Nolan", "Inception")
