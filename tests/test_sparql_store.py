"""SparqlStore against a real Virtuoso (session fixture), MemoryStore as the reference.

Exact outputs on a hand-made graph; names with every awkward character round-trip; the
synthetic KG's k-hop subgraphs, shortest paths and groundings equal the in-memory engine's;
retries are bounded and failures carry their reason.
"""

from __future__ import annotations

import http.server
import random
import threading

import pytest

from rg.config import ConfigError, validate_config
from rg.graph import KnowledgeGraph, Path as GPath
from rg.stores.base import KGStore, path_key
from rg.stores.compare import SearchCase, compare_stores
from rg.stores.config import SparqlStoreConfig
from rg.stores.memory import MemoryStore
from rg.stores.ntriples import entity_ids, relabel
from rg.stores.sparql import SparqlStore, StoreError
from rg.stores.sparql_text import decode_local, encode_local, iri, literal
from rg.run.ports import free_ports
from tests.stores_virtuoso import load_graph

TINY = [("a", "r", "b"), ("b", "s", "c"), ("a", "q", "c"), ("c", "r", "a"), ("a", "r", "d"), ("d", "s", "c"),
        ("c", "t", "e")]
"""Hand-made graph; exported ids are m.00 (a), m.01 (b), m.02 (c), m.03 (d), m.04 (e)."""


@pytest.fixture(scope="module")
def tiny(virtuoso, tmp_path_factory) -> SparqlStore:
    kg = KnowledgeGraph.from_triples(TINY)
    return load_graph(virtuoso, kg, "http://rg.test/tiny", tmp_path_factory.mktemp("nt"))


def test_both_stores_satisfy_the_protocol(tiny):
    assert isinstance(tiny, KGStore)
    assert isinstance(MemoryStore(KnowledgeGraph.from_triples(TINY)), KGStore)


def test_tiny_graph_exact_answers(tiny):
    assert tiny.entity_ids_by_name("c") == ["m.02"]
    assert tiny.entity_ids_by_name("nobody") == []
    assert tiny.entity_names(["m.00", "m.04", "m.99"]) == {"m.00": "a", "m.04": "e", "m.99": None}
    assert tiny.has_entity("m.04") and not tiny.has_entity("m.99")
    assert tiny.neighbours(["m.02"], "in") == [("m.00", "q", "m.02"), ("m.01", "s", "m.02"), ("m.03", "s", "m.02")]
    sub = tiny.k_hop(["m.00"], 1)
    assert sub.triples == (("m.00", "q", "m.02"), ("m.00", "r", "m.01"), ("m.00", "r", "m.03"), ("m.02", "r", "m.00"))
    assert sub.entities == ("m.00", "m.01", "m.02", "m.03") and not sub.truncated
    two = tiny.k_hop(["m.00"], 2)
    assert len(two) == 7 and two.entities[-1] == "m.04"
    capped = tiny.k_hop(["m.00"], 2, max_triples=5)
    assert capped.truncated and len(capped) == 5
    assert set(sub.triples) < set(capped.triples)  # the first round is whole, the second is cut
    paths = tiny.shortest_paths("m.00", "m.02", "out")
    assert [p.render() for p in paths] == ["m.00 → [q] → m.02"]
    assert [p.render() for p in tiny.shortest_paths("m.00", "m.02", "both")] == [
        "m.00 → [q] → m.02", "m.00 ← [r] ← m.02"]
    assert tiny.shortest_paths("m.04", "m.00", "out") == []
    assert [p.render() for p in tiny.shortest_paths("m.01", "m.04", "out", max_len=2)] == [
        "m.01 → [s] → m.02 → [t] → m.04"]
    assert tiny.shortest_paths("m.01", "m.04", "out", max_len=1) == []
    walks = tiny.ground("m.00", ["r", "s"])
    assert [p.entities for p in walks] == [("m.00", "m.01", "m.02"), ("m.00", "m.03", "m.02")]
    assert [path_key(p) for p in tiny.ground("m.02", ["s^-1", "r^-1"])] == [
        (("m.02", "m.01", "m.00"), ("s", "r"), (False, False)), (("m.02", "m.03", "m.00"), ("s", "r"), (False, False))]
    assert tiny.ground("m.00", ["nope"]) == []
    assert tiny.ground("m.00", []) == [GPath(("m.00",), (), (), ())]


def test_tiny_graph_equals_memory_store(tiny):
    kg = KnowledgeGraph.from_triples(TINY)
    mem = MemoryStore(relabel(kg, entity_ids(kg)))
    cases = [SearchCase((s,), h, tuple(f"m.0{i}" for i in range(5)), (("r", "s"), ("q", "t"), ("r^-1",)))
             for s in ("m.00", "m.02", "m.04") for h in (1, 2, 3)]
    result = compare_stores(mem, tiny, cases, caps=(None, 1, 3, 5), directions=("both", "out", "in"))
    assert result.compared == {"k_hop": 108, "shortest_paths": 90, "ground": 27}
    assert result.mismatches == 0, result.examples


NASTY = ['"', "\\", "}", "#", "<", ">", "\n", "\r", "\t", "'", "é", "名", "😀", "\u2028", " ", "%", "?x", "{",
         '" } DROP GRAPH <http://rg.test/tiny> ; #', "\\u0041", "\\\"", "@en", "^^", ".", "$"]


def nasty_names(n: int, seed: int) -> list[str]:
    """``n`` distinct names built from awkward characters, SPARQL fragments and plain letters."""
    rng = random.Random(seed)
    names: set[str] = {"", " x", '" } DROP ALL ; SELECT * WHERE { ?s ?p ?o } #'}
    while len(names) < n:
        parts = [rng.choice(NASTY + list("abcXYZ019")) for _ in range(rng.randint(1, 8))]
        names.add("".join(parts))
    return sorted(names)


def test_escaping_is_invertible_offline():
    for name in nasty_names(300, seed=1):
        assert decode_local(encode_local(name)) == name
        assert literal(name).isascii() and "\n" not in literal(name)
    with pytest.raises(ValueError, match="not a valid IRI"):
        iri("http://x/a> <http://y")


def test_names_round_trip_exactly(virtuoso, tmp_path):
    names = nasty_names(150, seed=7)
    kg = KnowledgeGraph.from_triples([(name, "rel", "hub") for name in names if name != "hub"])
    store = load_graph(virtuoso, kg, "http://rg.test/names", tmp_path)
    ids = entity_ids(kg).tolist()
    looked_up = store.entity_names(ids)
    assert looked_up == dict(zip(ids, kg.entity_names.tolist()))
    for eid, name in zip(ids, kg.entity_names.tolist()):
        assert store.entity_ids_by_name(name) == [eid], repr(name)
    assert virtuoso.count("http://rg.test/tiny") == 7 + 5  # the DROP fragment dropped nothing


@pytest.fixture(scope="module")
def synthetic(virtuoso, tmp_path_factory):
    from rg.data.synthetic import SyntheticConfig, generate

    data = generate(SyntheticConfig(seed=0, questions=40))
    kg = KnowledgeGraph.from_triples(data.triples, dedup=True)
    ids = entity_ids(kg)
    store = load_graph(virtuoso, kg, "http://rg.test/synthetic", tmp_path_factory.mktemp("syn"))
    index = {name: i for i, name in enumerate(kg.entity_names.tolist())}
    cases = [SearchCase(tuple(ids[index[e]] for e in q.q_entities), q.hops,
                        tuple(ids[index[a]] for a in q.answers if a in index), q.relation_paths)
             for q in data.questions]
    return store, MemoryStore(relabel(kg, ids)), cases


def test_synthetic_kg_identical_to_memory_engine(synthetic):
    store, mem, cases = synthetic
    result = compare_stores(mem, store, cases, caps=(None, 20, 200), directions=("both",))
    assert result.compared["k_hop"] == 3 * len(cases) == 120
    assert result.compared["shortest_paths"] > 100 and result.compared["ground"] > 40
    assert result.mismatches == 0, result.examples
    assert store.ledger.records and all(r.error is None for r in store.ledger.records)


def test_batching_and_cache_change_only_the_query_count(synthetic):
    store, mem, cases = synthetic
    seeds = cases[0].seeds
    one_by_one = SparqlStore(store.config.model_copy(update={"batch_size": 1, "cache_size": 0}))
    batched = SparqlStore(store.config.model_copy(update={"cache_size": 0}))
    with one_by_one.question("q1"), batched.question("q1"):
        a, b = one_by_one.k_hop(seeds, 2), batched.k_hop(seeds, 2)
    assert a == b == mem.k_hop(seeds, 2)
    assert len(one_by_one.ledger.for_question("q1")) > len(batched.ledger.for_question("q1")) == 4
    cached = SparqlStore(store.config)
    cached.k_hop(seeds, 2)
    before = len(cached.ledger.records)
    assert cached.k_hop(seeds, 2) == b and len(cached.ledger.records) == before  # served from the cache


class _Always503(http.server.BaseHTTPRequestHandler):
    hits = 0

    def do_POST(self):  # noqa: N802 — the http.server API
        type(self).hits += 1
        self.send_response(503)
        self.end_headers()
        self.wfile.write(b"busy")

    def log_message(self, *args):
        pass


def test_retries_are_bounded_and_the_reason_recorded():
    server = http.server.HTTPServer(("127.0.0.1", 0), _Always503)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        store = SparqlStore(SparqlStoreConfig(endpoint=f"http://127.0.0.1:{server.server_port}/sparql",
                                              max_retries=2, backoff_s=0.01))
        with store.question("q7"), pytest.raises(StoreError) as err:
            store.k_hop(["m.00"], 1)
    finally:
        server.shutdown()
        server.server_close()
    assert err.value.reason == "http_503" and _Always503.hits == 3
    (record,) = store.ledger.for_question("q7")
    assert (record.attempts, record.error, record.rows) == (3, "http_503", 0)
    assert store.ledger.summary()["q7"]["retries"] == 2


def test_a_stopped_server_gives_a_recorded_reason(tmp_path):
    from rg.stores.virtuoso import SERVER_BINARY, VirtuosoServer
    import shutil

    if shutil.which(SERVER_BINARY) is None:
        pytest.skip("virtuoso-t not installed: apt-get install -y virtuoso-opensource")
    server = VirtuosoServer(tmp_path / "db", *free_ports(2))
    pid = server.start(timeout=120)
    assert server.pid() == pid
    store = load_graph(server, KnowledgeGraph.from_triples(TINY), "http://rg.test/stop", tmp_path,
                       max_retries=1, backoff_s=0.01)
    assert len(store.k_hop(["m.00"], 1)) == 4
    assert server.stop() and server.pid() is None
    store.clear_cache()
    with store.question("after-stop"), pytest.raises(StoreError) as err:
        store.k_hop(["m.00"], 1)
    assert err.value.reason == "unreachable"
    assert [(r.attempts, r.error) for r in store.ledger.for_question("after-stop")] == [(2, "unreachable")]
    assert not server.stop()  # already stopped: nothing else is signalled


def test_config_errors_name_the_key_and_fix():
    with pytest.raises(ConfigError, match="endpoint.*Fix: e.g. http://127.0.0.1:8890/sparql"):
        validate_config({"endpoint": "127.0.0.1:8890"}, SparqlStoreConfig)
    with pytest.raises(ConfigError, match="max_retries"):
        validate_config({"endpoint": "http://x/sparql", "max_retries": 1000}, SparqlStoreConfig)


def test_aliases_and_further_names_come_back_per_entity(virtuoso, tmp_path):
    kg = KnowledgeGraph.from_triples([("Wim Kowalski", "directed", "Bridge of Rain"), ("Ann", "directed", "Hail")])
    store = load_graph(virtuoso, kg, "http://rg.test/aliases", tmp_path,
                       aliases={"Wim Kowalski": ["W. Kowalski", "Kowalski, Wim"], "Hail": ["Hail!"]})
    ids = dict(zip(kg.entity_names.tolist(), entity_ids(kg).tolist()))
    got = store.entity_aliases([ids["Wim Kowalski"], ids["Hail"], ids["Ann"], "m.0absent"])
    assert got == {ids["Wim Kowalski"]: ("Kowalski, Wim", "W. Kowalski"), ids["Hail"]: ("Hail!",), ids["Ann"]: (),
                   "m.0absent": ()}
    assert sorted(store.iter_aliases()) == sorted([(ids["Wim Kowalski"], "Kowalski, Wim"),
                                                   (ids["Wim Kowalski"], "W. Kowalski"), (ids["Hail"], "Hail!")])
    assert store.entity_names([ids["Hail"]]) == {ids["Hail"]: "Hail"}  # an alias is not a name
