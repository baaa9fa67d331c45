"""Words the linker sets aside narrow the Hand's answers (rg.linking ``set_aside``, ``Hand.narrow``).

Typed in lower case, "which crime films did michael mann direct" links only Michael Mann: *crime* is a
one-word lower-case name beside a two-word one, which ``prefer_multiword`` keeps from the topics. The Hand
then keeps the answers one edge from Crime. The Brain, at a scripted 127.0.0.1 server, sees the same
requests with and without the narrowing, and no raw name."""

from __future__ import annotations

import json
import re

from rg.graph import KnowledgeGraph
from rg.linking.config import LinkingConfig
from rg.linking.index import NameIndex
from rg.linking.linker import EntityLinker
from rg.linking.names import store_names
from rg.privacy import KGSchema
from rg.reasoning.dualtower import DualTowerConfig, build_controller
from rg.reasoning.dualtower.hand import Hand
from rg.stores.memory import MemoryStore
from tests.dualtower_world import TRIPLES, TYPES
from tests.scripted_server import Respond, Script, ScriptedServer
from tests.test_dualtower_wire import leaks, payload_of

GENRES = (("Heat", "genre", "Crime"), ("Collateral", "genre", "Thriller"), ("The Irishman", "genre", "Crime"),
          ("Heat", "type", "Film"), ("Collateral", "type", "Film"))
WORLD = (*TRIPLES, *GENRES)
WORLD_TYPES = {**TYPES, "Crime": "genre", "Thriller": "genre", "Film": "type"}
TYPED = "which crime films did michael mann direct"


def unkeyed(body: str) -> str:
    """A Brain request with its session's pseudonyms written alike (each session draws its own key)."""
    return re.sub(r"ent_[0-9a-f]{8}", "ent_?", body)


def store() -> MemoryStore:
    return MemoryStore(KnowledgeGraph.from_triples(WORLD))


def linker(kg: MemoryStore) -> EntityLinker:
    return EntityLinker(NameIndex.build(store_names(kg), None, "narrow"), LinkingConfig(dense="off"))


def directing_brain(body: dict) -> str:
    """Analysis: one indicator along ``directed_by`` backwards; selection: the candidates walking it."""
    shown = payload_of(body)
    if shown["kind"] == "analysis":
        return json.dumps({"sub_questions": [shown["question"]], "depth": 1, "indicators": [
            {"text": "TE_1 -[directed_by^-1]-> ANSWER", "relations": ["directed_by^-1"], "depth": 1}]})
    ids = [c["id"] for c in shown["candidates"] if [list(b) for b in c["branches"]] == [["directed_by^-1"]]]
    return json.dumps({"ids": (ids or [c["id"] for c in shown["candidates"]])[: shown["keep"]]})


def run(question: str, narrow: bool) -> tuple:
    kg = store()
    with ScriptedServer(Script.always(Respond(directing_brain))) as server:
        config = DualTowerConfig(
            privacy={"mode": "utility"}, similarity="lexical", hand={"narrow": narrow},
            brain={"kind": "llm", "reasks": 1,
                   "llm": {"base_url": server.base_url, "model": "scripted", "side": "brain", "max_retries": 0,
                           "backoff_s": 0.0, "max_backoff_s": 0.0, "timeout_s": 5.0}})
        controller = build_controller(config, KGSchema.build(WORLD, WORLD_TYPES), store=kg, linker=linker(kg))
        result = controller.answer(question)
        bodies = [r.raw.decode("utf-8") for r in server.chat_requests]
    return result, bodies


def test_the_linker_sets_lower_case_names_aside_and_keeps_written_ones_as_topics():
    link = linker(store())
    typed = link.link(TYPED)
    assert typed.entities == ("Michael Mann",)
    assert [(m.text, [c.entity_id for c in m.candidates]) for m in typed.set_aside] == [("crime", ["Crime"])]
    written = link.link("Which Crime films did Michael Mann direct?")
    assert written.entities == ("Crime", "Michael Mann") and written.set_aside == ()


def test_a_set_aside_genre_keeps_the_answers_of_that_genre_and_shows_the_edge():
    narrowed, bodies = run(TYPED, narrow=True)
    plain, plain_bodies = run(TYPED, narrow=False)
    assert narrowed.topics == plain.topics == ("Michael Mann",)
    assert sorted(plain.answers) == ["Collateral", "Heat"]
    assert narrowed.answers == ("Heat",)
    assert narrowed.support["Heat"][0] == "Heat → [genre] → Crime"
    assert narrowed.evidence[0] == "Heat → [genre] → Crime"
    # nothing of the narrowing reaches the Brain: the same requests up to the per-session pseudonyms, no raw name
    assert [unkeyed(b) for b in bodies] == [unkeyed(b) for b in plain_bodies] and bodies
    assert [leaks(b, ["Crime", "Michael Mann", "Heat", "Collateral"]) for b in bodies] == [[]] * len(bodies)


def test_a_word_every_answer_shares_changes_nothing():
    result, _ = run("which film did michael mann direct", narrow=True)
    assert sorted(result.answers) == ["Collateral", "Heat"]


def test_narrow_keeps_answers_one_edge_from_a_named_entity_only_when_it_splits_them():
    hand = Hand(DualTowerConfig(), store())
    assert hand.narrow(["Heat", "Collateral"], {"crime": ("Crime",)}) == {"Heat": (("Heat", "genre", "Crime"),)}
    assert hand.narrow(["Heat", "Collateral"], {"film": ("Film",)}) is None  # both are films
    assert hand.narrow(["Heat", "Collateral"], {"drama": ("Drama",)}) is None  # no answer is one
    assert hand.narrow(["Heat"], {"crime": ("Crime",)}) is None  # one answer: nothing to tell apart
    # words are applied in turn, each on what the earlier kept; one that no longer splits is skipped
    kept = hand.narrow(["Heat", "Collateral", "The Irishman"], {"film": ("Film",), "crime": ("Crime",)})
    assert kept == {"Heat": (("Heat", "type", "Film"), ("Heat", "genre", "Crime"))}
    # a question's own triples when there is no store
    bare = Hand(DualTowerConfig())
    assert bare.narrow(["Heat", "Collateral"], {"thriller": ("Thriller",)}, WORLD) == {
        "Collateral": (("Collateral", "genre", "Thriller"),)}
