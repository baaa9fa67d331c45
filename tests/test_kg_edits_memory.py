"""Memories respect KG edits: a remembered question is answered from the current KG (the controller verifies
every remembered path on its pinned snapshot), edge vectors of deleted facts are forgotten durably, and names an
edit adds are masked like every other raw name: none reaches the Brain."""

from __future__ import annotations

import pytest

from rg.graph import KnowledgeGraph
from tests.scripted_server import Respond, Script, ScriptedServer
from rg.kgedits import EditBatch, KGEditsConfig, VersionedStore, affected, resolve_batch
from rg.memory import EdgeMemory, EdgeMemoryConfig, ExperienceConfig, ExperiencePool, PoolMemory, SealedLog
from rg.memory.embed import HashingEmbedder
from rg.reasoning.dualtower import DualTowerConfig, build_controller
from rg.reasoning.dualtower.controller import privacy_tag
from rg.stores.memory import MemoryStore
from tests.dualtower_world import TRIPLES, schema
from tests.test_serve_app import reading_brain

KEY = bytes(range(32))


@pytest.fixture(scope="module")
def brain():
    """An LLM Brain at a scripted 127.0.0.1 server that reads the anonymised payloads (no model to train)."""
    with ScriptedServer(Script.always(Respond(reading_brain))) as server:
        yield server


@pytest.fixture(scope="module")
def config(brain):
    return DualTowerConfig.model_validate({
        "privacy": {"mode": "utility"}, "similarity": "lexical",
        "brain": {"kind": "llm", "reasks": 1, "llm": {"base_url": brain.base_url, "model": "scripted", "side": "brain",
                                                      "max_retries": 0, "backoff_s": 0.0, "max_backoff_s": 0.0,
                                                      "timeout_s": 5.0}}})


def edit(store: VersionedStore, *edits, **config):
    body = {"edits": [{"op": op, "head": h, "relation": r, "tail": t} for op, h, r, t in edits]}
    record = resolve_batch(EditBatch.model_validate(body), store, KGEditsConfig(log_path="unused", **config),
                           store.version)
    store.apply(record)
    return record


def ask(store, controller, question, topics):
    with store.pin() as snap:
        result = controller.answer(question, topics)
    return snap.version, result


def test_a_remembered_answer_follows_the_current_kg(config, tmp_path):
    store = VersionedStore(MemoryStore(KnowledgeGraph.from_triples(TRIPLES)))
    pool = ExperiencePool(ExperienceConfig(embedder="hashing"), HashingEmbedder(128))
    edges = EdgeMemory(EdgeMemoryConfig(), HashingEmbedder(128), SealedLog(tmp_path / "edges.sealed", KEY))
    controller = build_controller(config, schema(), store=store, memory=PoolMemory(pool, privacy_tag(config)),
                                  edges=edges)
    question = ("who wrote Casino", ["Casino"])
    _, first = ask(store, controller, *question)
    _, again = ask(store, controller, *question)
    assert first.answers[:1] == again.answers[:1] == ("Nicholas Pileggi",)
    assert again.brain_calls == 0 and again.memory["analysis"] in {"experience", "replay"}  # remembered
    old = ("Casino", "written_by", "Nicholas Pileggi")
    assert old in edges.vectors

    changed = edit(store, ("delete", *old), ("add", "Casino", "written_by", "Ann Newwriter"))
    assert edges.forget(affected([changed])) == 1 and old not in edges.vectors
    version, after = ask(store, controller, *question)
    assert version == 1 and after.answers[:1] == ("Ann Newwriter",)  # the remembered path, on the new fact
    assert "Nicholas Pileggi" not in after.answers and after.brain_calls == 0

    gone = edit(store, ("delete", "Casino", "written_by", "Ann Newwriter"))
    edges.forget(affected([gone]))
    version, last = ask(store, controller, *question)
    assert version == 2 and not {"Nicholas Pileggi", "Ann Newwriter"} & set(last.answers)
    assert "written_by" not in " ".join(last.evidence)

    edges.log.close()  # a reload keeps the forgetting: the tombstone is the edge's last record
    reloaded = EdgeMemory(EdgeMemoryConfig(), HashingEmbedder(128), SealedLog(tmp_path / "edges.sealed", KEY))
    assert old not in reloaded.vectors and ("Casino", "written_by", first.answers[0]) not in reloaded.vectors
    assert reloaded.vectors  # the other edges' memories stay
    reloaded.log.close()


def test_names_an_edit_adds_never_reach_the_brain(config, brain):
    store = VersionedStore(MemoryStore(KnowledgeGraph.from_triples(TRIPLES)))
    record = edit(store, ("add", "Quillfire", "directed_by", "Zara Quill"), ("add", "Quillfire", "release_year", "2031"))
    controller = build_controller(config, schema(), store=store)
    sent = len(brain.requests)
    film = store.entity_ids_by_name("Quillfire")  # topics are given by id, as the KG names them
    _, result = ask(store, controller, "who directed Quillfire", film)
    assert result.answers[:1] == ("Zara Quill",) and result.brain_calls >= 1 and not result.faults
    raw = ["Zara Quill", "Quillfire", *record.new_entities]
    bodies = " ".join(str(r) for r in brain.requests[sent:]).casefold()  # what reached the Brain's endpoint
    assert bodies and not [r for r in raw if r.casefold() in bodies]
