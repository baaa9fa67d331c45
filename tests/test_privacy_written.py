"""WrittenNames: which entities a text names, by every name and alias, in the egress guard's normalisation."""

from __future__ import annotations

from rg.privacy.written import WrittenNames


def test_names_and_aliases_are_found_as_whole_tokens_in_any_case_spacing_or_accent():
    names = WrittenNames([("m.01", "Bridge of Rain"), ("m.02", "Zoë Ashwick"), ("m.02", "Z. Ashwick"),
                          ("m.03", "Rain"), ("m.04", "61*"), ("m.05", "The"), ("m.06", "barack_obama")])
    assert names.in_text("Who wrote bridge  OF\train and what did zoe ashwick direct?") == {
        "m.01": ("bridge of rain",), "m.03": ("rain",), "m.02": ("zoe ashwick",)}
    assert names.in_text("Z. Ashwick's films") == {"m.02": ("z ashwick", "z. ashwick")}  # plain and marked
    assert names.in_text("Rainbow bridges of rainier") == {}  # whole tokens only
    assert names.in_text("the 61* season") == {"m.04": ("61*",)}  # too weak without its punctuation
    assert names.in_text("the year 61") == {}
    assert names.in_text("what did barack obama do") == {"m.06": ("barack obama",)}


def test_one_name_of_two_entities_names_both_and_weak_names_are_left_out():
    names = WrittenNames([("a", "Heat"), ("b", "heat"), ("c", "of"), ("d", "x")])
    assert names.in_text("Who directed Heat?") == {"a": ("heat",), "b": ("heat",)}
    assert len(names) == 1  # "of" and "x" are too weak to guard, so they are not looked for either


def test_a_hand_without_a_linker_finds_names_in_its_store_and_the_names_an_edit_adds():
    from rg.graph import KnowledgeGraph
    from rg.kgedits.model import EditRecord
    from rg.kgedits.versioned import VersionedStore
    from rg.reasoning.dualtower import DualTowerConfig
    from rg.reasoning.dualtower.hand import Hand
    from rg.stores.memory import MemoryStore

    kg = KnowledgeGraph.from_triples([("m.01", "directed_by", "m.02")])
    store = VersionedStore(MemoryStore(kg, {"m.01": "Heat", "m.02": "Michael Mann"}))
    hand = Hand(DualTowerConfig(), store)
    question = "who directed heat, and bridge of rain?"
    assert hand.mentioned(question) == {"m.01": ("heat",)}
    store.apply(EditRecord(version=1, adds=(("m.03", "directed_by", "m.02"),), new_entities={"m.03": "Bridge of Rain"}))
    assert hand.mentioned(question) == {"m.01": ("heat",), "m.03": ("bridge of rain",)}  # rebuilt for version 1
