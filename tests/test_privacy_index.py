"""The egress guard's shared index (rg.privacy.guard.GuardIndex): one automaton per KG, activated per session.

A guard over the KG's shared index must give exactly the verdicts of a guard that compiles its own
automaton from the same strings, and a session's strings must never reach another session's guard.
"""

from __future__ import annotations

import pytest

from rg.privacy import EgressGuard, EgressRefused, KGSchema, PrivacyConfig, PrivacySession
from rg.privacy.guard import GuardIndex
from rg.privacy.session import PSEUDONYM

KG_NAMES = ["Tom Hanks", "tom hanks", "barack_obama", "Ann", "C++", "61*", "Up", "1987", "12", "the", "José Ferrer",
            "m.0abc12", "New York City", "Forrest Gump"]
"""Hand-made raw strings: case twins, an id with underscores, a short name, punctuated names, weak ones."""
PUBLIC = frozenset({"film", "directed by"})
TEXTS = [
    "who directed TOM   HANKS films", "tom\u200bhanks", "ｔｏｍ hanks", "Barack Obama spoke", "barack_obama",
    "annual report", "ann said", "i like c++ a lot", "c plus", "the 61* season", "61 season", "up", "upper",
    "in 1987", "in 12", "the", "jose ferrer", "JOSÉ  FERRER!", "m.0abc12", "M.0ABC12", "new york", "new york city",
    "ent_3f9a2c1d (person) -> [film] -> ent_aa11bb22", "forrest gump and tom hanks", "nothing here", "",
    "Newcomer: Zed Alpha arrives", "zed alpha", "zed",
]


def guards(raw: dict[str, list[str]], index: GuardIndex) -> tuple[EgressGuard, EgressGuard]:
    return EgressGuard(raw, public=PUBLIC), EgressGuard(raw, public=PUBLIC, index=index)


@pytest.mark.parametrize("held", [KG_NAMES[:3], KG_NAMES, KG_NAMES[5:]])
def test_shared_index_gives_the_verdicts_of_an_own_automaton(held: list[str]) -> None:
    index = GuardIndex([*KG_NAMES, "directed_by"])
    raw = {"entity_name": held, "alias": ["Zed Alpha"], "relation": ["directed_by"]}  # Zed Alpha: not in the KG
    own, shared = guards(raw, index)
    assert [own.find(t) for t in TEXTS] == [shared.find(t) for t in TEXTS]
    assert (own.size, own.marked_size, own.skipped) == (shared.size, shared.marked_size, shared.skipped)
    assert shared.find("ZED   ALPHA!") == "alias" and shared.find("directed by") is None  # a relation's own words pass


@pytest.mark.parametrize("held", [KG_NAMES[:3], KG_NAMES, KG_NAMES[5:], ["Zed Alpha", "Tom Hanks", "61*"]])
def test_deferred_strings_give_the_verdicts_of_strings_guarded_up_front(held: list[str]) -> None:
    index = GuardIndex([*KG_NAMES, "directed_by"])

    def pairs_of(string: str) -> list[tuple[str, str]]:  # "Ann" is left in the clear, as a ratio would
        return [] if string == "Ann" else [("entity_id" if string.startswith("m.") else "entity_name", string)]

    eager, lazy = EgressGuard(public=PUBLIC, index=index), EgressGuard(public=PUBLIC, index=index)
    eager.add_pairs(pair for string in held for pair in pairs_of(string))
    lazy.defer(held, pairs_of)  # "Zed Alpha" is not in the index and "61*" only by its punctuation: guarded now
    assert [lazy.find(t) for t in TEXTS] == [eager.find(t) for t in TEXTS]
    assert [lazy.find(t) for t in reversed(TEXTS)] == [eager.find(t) for t in reversed(TEXTS)]  # resolved once
    assert lazy.size <= eager.size and lazy.marked_size == eager.marked_size  # only the keys met are active


def test_a_deferred_string_is_resolved_only_in_its_own_guard_and_forgotten_on_close() -> None:
    index = GuardIndex(KG_NAMES)
    first, second = EgressGuard(index=index), EgressGuard(index=index)
    first.defer(["Tom Hanks", "Forrest Gump"], lambda s: [("entity_name", s)])
    assert first.size == 0  # nothing activated before a check meets a key
    assert second.find("tom hanks in forrest gump") is None
    assert first.find("TOM hanks") == "entity_name" and first.size == 1
    assert first.find("upper forrest gumps") is None and first.find("forrest  gump!") == "entity_name"
    first.close()
    assert first.find("forrest gump") == "closed_session"
    with pytest.raises(RuntimeError, match="closed"):
        first.defer(["Tom Hanks"], lambda s: [("entity_name", s)])


def test_a_book_learnt_after_the_subgraph_was_guarded_guards_its_names_too() -> None:
    from rg.privacy import SanitiserConfig
    from rg.privacy.names import NameBook

    schema = KGSchema(types={"m.0abc1": "person", "m.0def2": "person"}, clusters={"r": "rel_0"})
    with PrivacySession(PrivacyConfig(), schema) as session:  # learn_names should come first; here it comes last
        session.expose([("m.0abc1", "r", "m.0def2")], ["m.0def2"], SanitiserConfig(max_nodes=1))  # m.0abc1 pruned
        session.learn_names(NameBook(names={"m.0abc1": "Zed Alpha"}, aliases={"m.0def2": ("Yan Beta",)}))
        session.entity("m.0abc1")
        assert session.guard.find("zed alpha") == "entity_name" and session.guard.find("yan  BETA") == "alias"
        assert session.guard.find("m.0abc1") == "entity_id"


def test_additions_after_the_first_check_are_guarded_with_either_automaton() -> None:
    index = GuardIndex(KG_NAMES)
    own, shared = guards({"entity_name": ["Ann"]}, index)
    for guard in (own, shared):
        assert guard.find("tom hanks") is None
        guard.add("entity_name", ["Tom Hanks", "Brand New Name"])  # in the index / an addition of the session
        assert guard.find("TOM HANKS") == "entity_name" and guard.find("a brand  new name") == "entity_name"
        assert guard.find("brand new") is None


def test_a_sessions_strings_do_not_reach_another_sessions_guard() -> None:
    schema = KGSchema.build([("Tom Hanks", "starred_in", "Forrest Gump"), ("Robin Wright", "starred_in", "Forrest Gump")])
    config = PrivacyConfig(mode="utility")
    with PrivacySession(config, schema) as first, PrivacySession(config, schema) as second:
        assert first.guard.index is second.guard.index is schema.guard_index  # one automaton per KG
        first.guard_entities(["Tom Hanks"])
        first.guard.add("alias", ["Secret Alias"])  # a per-session addition, not in the KG
        with pytest.raises(EgressRefused):
            first.guard.check("about tom hanks")
        with pytest.raises(EgressRefused):
            first.guard.check("about SECRET alias")
        second.guard.check("about tom hanks and secret alias")  # the second session guards neither
        second.guard_entities(["Robin Wright"])
        assert second.guard.find("robin wright") == "entity_name" and first.guard.find("robin wright") is None
    assert first.guard.find("anything") == "closed_session"
    with PrivacySession(config, schema) as third:  # a new session starts empty; the index is unchanged
        assert third.guard.size == 0 and third.guard.find("tom hanks secret alias robin wright") is None


def test_a_name_added_to_the_kg_later_is_guarded_before_and_after_the_index_is_extended() -> None:
    index = GuardIndex(KG_NAMES)
    guard = EgressGuard({"entity_name": ["Late Addition"]}, index=index)  # not in the index: the own automaton
    assert "Late Addition" not in index and guard.find("the late addition") == "entity_name"
    extended = index.extended(["Late Addition"])
    assert "Late Addition" in extended and "Late Addition" not in index and len(extended) == len(index) + 1
    later = EgressGuard({"entity_name": ["Late Addition"]}, index=extended)
    assert later.find("the LATE addition") == "entity_name" and later.find("late") is None


def test_matches_are_whole_tokens_and_the_first_match_names_the_category() -> None:
    index = GuardIndex(["Ann", "Ann Lee", "Lee"])
    guard = EgressGuard({"alias": ["Lee"], "entity_name": ["Ann Lee", "Ann"]}, index=index)
    assert guard.find("annual leeway") is None
    assert guard.find("ann lee") == "entity_name"  # ends first: "ann"
    assert guard.find("x lee") == "alias"


def test_the_session_masks_and_guards_the_same_with_or_without_the_shared_index() -> None:
    triples = [("Tom Hanks", "starred_in", "Forrest Gump"), ("Forrest Gump", "directed_by", "Robert Zemeckis"),
               ("Forrest Gump", "release_year", "1994")]
    schema = KGSchema.build(triples)
    config = PrivacyConfig(mode="privacy")
    question = "who directed the films TOM HANKS starred in, like forrest  gump?"
    out = []
    for index in (GuardIndex(), schema.guard_index):  # an empty index: every string in the session's own automaton
        with PrivacySession(config, schema, index=index) as session:
            shown = session.expose(triples, ["Tom Hanks"], session_sanitiser())
            masked = session.mask_question(question, ["Tom Hanks"], names=["Forrest Gump", "Robert Zemeckis"])
            verdicts = [session.guard.find(t) for t in (question, "robert zemeckis", "starred_in", "1994", masked.text,
                                                        "FORREST GUMP", "tom hanks", "release_year")]
            # keys differ per session; so does the guard's size (the shared index defers the subgraph's names)
            out.append((len(shown.triples), PSEUDONYM.sub("ent", masked.text), verdicts))
    assert out[0] == out[1]
    assert "hanks" not in out[1][1].casefold() and "gump" not in out[1][1].casefold()
    assert out[1][2][4] is None and out[1][2][1] == "entity_name" and out[1][2][2] == "relation"


def session_sanitiser():
    from rg.privacy import SanitiserConfig

    return SanitiserConfig(max_nodes=10)
