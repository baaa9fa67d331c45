"""KG edits on the SPARQL store against a real Virtuoso (session fixture): DELETE DATA / INSERT DATA built with the
store's escaping, names that try to break out of their literal stay data, validation asks the endpoint, and a
replay of the log over the store is idempotent."""

from __future__ import annotations

import pytest

from rg.graph import KnowledgeGraph
from rg.kgedits import EditBatch, EditLog, EditRejected, KGEditsConfig
from rg.kgedits.editor import KGEditor
from rg.kgedits.sparql import SparqlEditTarget, update_text
from tests.stores_virtuoso import load_graph

TINY = [("a", "r", "b"), ("b", "s", "c"), ("a", "q", "c"), ("c", "r", "a")]
"""Exported ids: m.00 (a), m.01 (b), m.02 (c)."""
NASTY = 'Zoë "quoted" {x} <y> \\ 漢字 " . } ; DROP ALL ; INSERT DATA { <a> <b> "'


@pytest.fixture(scope="module")
def store(virtuoso, tmp_path_factory):
    virtuoso.isql('GRANT SPARQL_UPDATE TO "SPARQL";')  # the endpoint's user may run updates
    return load_graph(virtuoso, KnowledgeGraph.from_triples(TINY), "http://rg.test/edits", tmp_path_factory.mktemp("nt"))


def batch(*edits) -> EditBatch:
    return EditBatch.model_validate({"edits": [{"op": op, "head": h, "relation": r, "tail": t}
                                               for op, h, r, t in edits]})


def test_edits_reach_the_triple_store_and_replay_idempotently(store, virtuoso, tmp_path):
    cfg = KGEditsConfig(log_path=str(tmp_path / "kg.log"))
    with EditLog.open(cfg.log_path) as log:
        editor = KGEditor(SparqlEditTarget(store), log, cfg)
        record = editor.edit(batch(("add", "a", "r", NASTY), ("delete", "a", "q", "c")))
    (new_id,) = record.new_entities
    assert "DROP ALL" not in update_text(store, record).split('"', 1)[0]  # the name only appears inside a literal
    assert store.entity_ids_by_name(NASTY) == [new_id] and store.entity_names([new_id]) == {new_id: NASTY}
    out = store.neighbours(["m.00"], "out")
    assert ("m.00", "r", new_id) in out and ("m.00", "q", "m.02") not in out
    assert virtuoso.count("http://rg.test/edits") > 0  # the graph is still there

    with pytest.raises(EditRejected) as err:  # validation asks the endpoint
        with EditLog.open(cfg.log_path) as log:
            KGEditor(SparqlEditTarget(store), log, cfg).edit(batch(("delete", "b", "r", "c"),
                                                                   ("add", "a", "nope", "b")))
    assert [p.reason for p in err.value.problems] == ["no_such_triple", "unknown_relation"]

    with EditLog.open(cfg.log_path) as log:  # a restart replays the log over the store: the same state
        again = SparqlEditTarget(store)
        editor = KGEditor(again, log, cfg)
        assert editor.replayed == 1 and again.version == 1
    assert store.neighbours(["m.00"], "out") == out


def test_a_replica_follows_the_version_without_writing(store):
    follower = SparqlEditTarget(store, writer=False)
    with follower.pin() as snap:
        assert snap.version == 0
    from rg.kgedits import EditRecord

    assert follower.apply(EditRecord(version=1, adds=(("m.00", "s", "m.01"),)))
    assert follower.version == 1 and ("m.00", "s", "m.01") not in store.neighbours(["m.00"], "out")  # owner writes
