"""Live KG edits (rg.kgedits): validation names every bad edit and applies nothing of its batch; versions are
snapshots a reader keeps; the edit log is durable, replayed on open, and a torn last record is named and cut."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from rg.graph import KnowledgeGraph
from rg.kgedits import (EditBatch, EditLog, EditLogError, EditOrderError, EditRecord, EditRejected, KGEditsConfig,
                        VersionedStore, parse_tsv, read_log, resolve_batch)
from rg.kgedits.editor import KGEditor
from rg.kgedits.log import HEADER
from rg.stores.base import content_keys
from rg.stores.memory import MemoryStore

TINY = [("a", "r", "b"), ("b", "s", "c"), ("a", "q", "c"), ("c", "r", "a")]


def store(triples=TINY, names=None) -> VersionedStore:
    return VersionedStore(MemoryStore(KnowledgeGraph.from_triples(triples), names))


def config(tmp_path, **kw) -> KGEditsConfig:
    return KGEditsConfig(log_path=str(tmp_path / "kg.log"), **kw)


def batch(*edits) -> EditBatch:
    return EditBatch.model_validate({"edits": [{"op": op, "head": h, "relation": r, "tail": t}
                                               for op, h, r, t in edits]})


def test_add_by_name_makes_new_entities_with_ids_and_names(tmp_path):
    kg = store()
    record = resolve_batch(batch(("add", "a", "r", "Zed Zephyr"), ("add", "Zed Zephyr", "s", "c")), kg,
                           config(tmp_path), kg.version)
    assert record.version == 1 and len(record.adds) == 2 and not record.deletes
    (new_id, name), = record.new_entities.items()
    assert name == "Zed Zephyr" and new_id.startswith("rg.e.") and record.adds[0] == ("a", "r", new_id)
    assert kg.apply(record)
    assert kg.version == 1 and kg.has_triple("a", "r", new_id) and kg.entity_ids_by_name("Zed Zephyr") == [new_id]
    assert kg.entity_names([new_id, "a"]) == {new_id: "Zed Zephyr", "a": "a"}
    assert kg.ground("a", ["r", "s"])[0].entities[-1] == "c"


def test_bad_edits_are_all_named_and_nothing_of_the_batch_applies(tmp_path):
    kg = store(names={"a": "Al", "b": "Al", "c": "Cy"})  # two entities named Al
    bad = batch(("add", "Cy", "nope", "Cy"),        # unknown relation, new relations not allowed
                ("add", "Al", "r", "Cy"),           # ambiguous name
                ("delete", "Cy", "r", "Nobody"),    # unknown name in a delete
                ("delete", "Cy", "s", {"id": "a"}),  # no such triple
                ("add", {"id": "m.nope"}, "r", "Cy"),  # unknown id
                ("add", "Cy", "r", "bad\x00name"),  # malformed
                ("add", "Cy", "q", {"id": "a"}), ("delete", "Cy", "q", {"id": "a"}))  # conflict (q is no c->a triple)
    with pytest.raises(EditRejected) as err:
        resolve_batch(bad, kg, config(tmp_path), 0)
    reasons = {p.index: p.reason for p in err.value.problems}
    assert reasons == {0: "unknown_relation", 1: "ambiguous_name", 2: "unknown_name", 3: "no_such_triple",
                       4: "unknown_id", 5: "malformed", 7: "conflict"}
    first = err.value.problems[0].to_dict()
    assert first["loc"] == ["body", "edits", 0] and first["triple"] == "add (Cy, nope, Cy)"
    assert "allow_new_relations" in first["msg"]
    assert "a, b" in err.value.problems[1].detail and "by id" in err.value.problems[1].detail
    assert kg.version == 0 and not kg.has_triple("c", "q", "a")
    ok = resolve_batch(batch(("add", "Cy", "nope", "Cy")), kg, config(tmp_path, allow_new_relations=True), 0)
    assert ok.new_relations == ("nope",)


def test_a_batch_over_the_limit_is_refused_whole(tmp_path):
    with pytest.raises(EditRejected, match="limit is 2 \\(kg_edits.max_batch\\)") as err:
        resolve_batch(batch(*[("add", "a", "r", f"n{i}") for i in range(3)]), store(), config(tmp_path, max_batch=2), 0)
    assert err.value.problems[0].reason == "batch_too_large"


def test_adding_a_present_triple_changes_nothing_and_says_so(tmp_path):
    record = resolve_batch(batch(("add", "a", "r", "b")), store(), config(tmp_path), 0)
    assert record.adds == () and record.unchanged == ("add (a, r, b)",)


def test_delete_then_add_changes_a_fact(tmp_path):
    kg = store()
    record = resolve_batch(batch(("delete", "a", "r", "b"), ("add", "a", "r", "c")), kg, config(tmp_path), 0)
    kg.apply(record)
    assert not kg.has_triple("a", "r", "b") and kg.has_triple("a", "r", "c")
    assert kg.snapshot().added == {("a", "r", "c")} and kg.snapshot().added_names == {"a", "c"}  # drift
    kg.apply(resolve_batch(batch(("delete", "a", "r", "c")), kg, config(tmp_path), 1))
    assert kg.snapshot().added == frozenset() and kg.snapshot().added_names == frozenset()
    kg.apply(resolve_batch(batch(("add", "a", "r", "c")), kg, config(tmp_path), 2))
    assert [t for t in kg.neighbours(["a"], "out")] == [("a", "q", "c"), ("a", "r", "c")]


def test_edited_snapshot_equals_a_graph_built_from_scratch(tmp_path):
    kg = store()
    kg.apply(resolve_batch(batch(("delete", "b", "s", "c"), ("add", "c", "q", "New")), kg, config(tmp_path), 0))
    snap = kg.snapshot().store
    (new_id,) = snap.names.keys()
    expected = sorted([("a", "r", "b"), ("a", "q", "c"), ("c", "r", "a"), ("c", "q", new_id)])
    assert sorted(snap.kg.triples()) == expected
    fresh = KnowledgeGraph.from_triples(expected)
    assert sorted(content_keys(fresh).tolist()) == sorted(snap.content_keys().tolist())
    assert kg.k_hop(["a"], 2).triples == MemoryStore(fresh).k_hop(["a"], 2).triples


def test_a_pinned_reader_keeps_its_version_while_edits_apply(tmp_path):
    kg = store()
    cfg = config(tmp_path)

    async def reader(seen):
        with kg.pin() as snap:
            first = kg.neighbours(["a"], "out")
            await asyncio.sleep(0.05)  # an edit applies meanwhile
            seen.append((snap.version, first, kg.neighbours(["a"], "out"), kg.has_triple("a", "r", "b")))

    async def writer():
        await asyncio.sleep(0.01)
        kg.apply(resolve_batch(batch(("delete", "a", "r", "b")), kg, cfg, kg.version))

    async def main():
        seen = []
        await asyncio.gather(reader(seen), writer())
        return seen

    (version, before, after, present), = asyncio.run(main())
    assert version == 0 and before == after and present  # no torn read
    assert kg.version == 1 and not kg.has_triple("a", "r", "b")  # outside the pin: the newest


def test_records_apply_in_order_only(tmp_path):
    kg = store()
    with pytest.raises(EditOrderError, match="apply versions 1..1 first"):
        kg.apply(EditRecord(version=2, adds=(("a", "r", "c"),)))
    assert kg.apply(EditRecord(version=1, adds=(("a", "r", "c"),)))
    assert not kg.apply(EditRecord(version=1, adds=(("a", "r", "c"),)))  # replayed twice: once


def test_the_log_replays_after_a_restart(tmp_path):
    cfg = config(tmp_path)
    with EditLog.open(cfg.log_path) as log:
        editor = KGEditor(store(), log, cfg)
        editor.edit(batch(("add", "a", "r", "Nova")))
        editor.edit(batch(("delete", "a", "q", "c")))
    again = store()
    with EditLog.open(cfg.log_path) as log:
        editor = KGEditor(again, log, cfg)
        assert editor.replayed == 2 and again.version == 2 and log.report.torn is None
        assert again.entity_ids_by_name("Nova") and not again.has_triple("a", "q", "c")
        assert [r.version for r in editor.since(1)] == [2]


def test_one_writer_per_log(tmp_path):
    with EditLog.open(tmp_path / "kg.log"):
        with pytest.raises(EditLogError, match="open for writing by another process"):
            EditLog.open(tmp_path / "kg.log")


@pytest.mark.parametrize("cut", [3, 20, -1])
def test_a_torn_last_record_is_named_cut_and_the_rest_replayed(tmp_path, cut):
    cfg = config(tmp_path)
    with EditLog.open(cfg.log_path) as log:
        editor = KGEditor(store(), log, cfg)
        for i in range(3):
            editor.edit(batch(("add", "a", "r", f"n{i}")))
    data = open(cfg.log_path, "rb").read()
    last = data.rfind(b"RGE1")
    torn = data[:last + cut] if cut > 0 else data[:-1] + bytes([data[-1] ^ 0xFF])  # short frame/payload, bad CRC
    open(cfg.log_path, "wb").write(torn)
    assert read_log(cfg.log_path).torn is not None
    with EditLog.open(cfg.log_path) as log:
        assert log.report.torn is not None and log.report.torn.offset == last
        assert log.report.torn.reason == {3: "short_frame", 20: "short_payload", -1: "checksum"}[cut]
        assert "torn last record at byte" in log.report.torn.describe()
        assert os.path.exists(log.report.torn.saved_to)
        editor = KGEditor(store(), log, cfg)
        assert editor.replayed == 2
        editor.edit(batch(("add", "a", "r", "n9")))  # appends go on after the cut
    assert [r.version for r in read_log(cfg.log_path).records] == [1, 2, 3]


def test_damage_before_the_end_is_not_a_torn_tail(tmp_path):
    cfg = config(tmp_path)
    with EditLog.open(cfg.log_path) as log:
        editor = KGEditor(store(), log, cfg)
        editor.edit(batch(("add", "a", "r", "n1")))
        editor.edit(batch(("add", "a", "r", "n2")))
    data = bytearray(open(cfg.log_path, "rb").read())
    data[len(HEADER) + 14] ^= 0xFF  # inside the first record's payload
    open(cfg.log_path, "wb").write(bytes(data))
    with pytest.raises(EditLogError, match="fails its checksum and more records follow"):
        EditLog.open(cfg.log_path)
    open(cfg.log_path, "wb").write(b"not a log")
    with pytest.raises(EditLogError, match="is not an rg edit log"):
        EditLog.open(cfg.log_path)


def test_an_acknowledged_edit_survives_sigkill(tmp_path):
    """A writer process acknowledges edits (prints the version after append returns) and is SIGKILLed
    mid-stream: every acknowledged version is in the log."""
    script = textwrap.dedent(f"""
        import sys
        from rg.graph import KnowledgeGraph
        from rg.kgedits import EditBatch, EditLog, KGEditsConfig, VersionedStore
        from rg.kgedits.editor import KGEditor
        from rg.stores.memory import MemoryStore
        cfg = KGEditsConfig(log_path={str(tmp_path / 'kg.log')!r})
        editor = KGEditor(VersionedStore(MemoryStore(KnowledgeGraph.from_triples({TINY!r}))), EditLog.open(cfg.log_path), cfg)
        for i in range(100000):
            r = editor.edit(EditBatch.model_validate({{"edits": [{{"op": "add", "head": "a", "relation": "r", "tail": f"n{{i}}"}}]}}))
            print(r.version, flush=True)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    acked = 0
    for line in proc.stdout:
        acked = int(line)
        if acked >= 40:
            break
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert acked >= 40
    report = read_log(tmp_path / "kg.log")
    assert len(report.records) >= acked and [r.version for r in report.records] == list(range(1, len(report.records) + 1))


def test_tsv_edits_name_bad_lines():
    assert parse_tsv("a\tr\tb\n# note\n\nid:m.1\tr\tNew\n", "add", "f.tsv") == [
        {"op": "add", "head": "a", "relation": "r", "tail": "b"},
        {"op": "add", "head": {"id": "m.1"}, "relation": "r", "tail": "New"}]
    with pytest.raises(EditRejected, match="f.tsv:2.*has 2 tab-separated fields"):
        parse_tsv("a\tr\tb\na\tr\n", "delete", "f.tsv")


def test_config_errors_name_the_key(tmp_path):
    from rg.config import ConfigError, validate_config

    with pytest.raises(ConfigError, match="new_id_prefix"):
        validate_config({"log_path": "x", "new_id_prefix": "a b"}, KGEditsConfig)
    with pytest.raises(ConfigError, match="max_batch"):
        validate_config({"log_path": "x", "max_batch": 0}, KGEditsConfig)
