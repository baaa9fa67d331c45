"""The privacy session and the egress guard on hand-made data: pseudonyms, unlinkability,
collisions, modes, question masking, bad inputs, closed sessions, and the Brain-side client rule."""

from __future__ import annotations

import re

import pytest

from rg.config import ConfigError, validate_config
from rg.llm.client import LLMError, OpenAICompatibleClient, complete_sync
from rg.llm.config import LLMConfig
from rg.privacy import (
    EgressGuard,
    EgressRefused,
    KGSchema,
    PrivacyConfig,
    PrivacySession,
    SessionClosed,
    TypingConfig,
    brain_client,
    derive_types,
    literal_view,
)
from rg.jobs.privacy_report import PrivacyReportConfig
from rg.reasoning.llm_reader import LLMReaderConfig
from rg.supervision.llm_selector import LLMSelectorConfig
from tests.scripted_server import Reply, ScriptedServer

TRIPLES = [
    ("Heat", "directed_by", "Michael Mann"),
    ("Heat", "starred_actors", "Al Pacino"),
    ("Heat", "release_year", "1995"),
    ("Thief", "directed_by", "Michael Mann"),
    ("m.0abc12", "film.performance.actor", "Al Pacino"),
    ("m.0abc12", "film.performance.film", "Heat"),
    ("Heat", "premiere", "1995-12-15"),
    ("Heat", "budget", "60000000"),
]
TYPES = {"Heat": "film", "Thief": "film", "Michael Mann": "person", "Al Pacino": "person", "1995": "literal",
         "m.0abc12": "cvt", "1995-12-15": "literal", "60000000": "literal", "Film": "type"}
SCHEMA = KGSchema.build(TRIPLES, TYPES)
PSEUDONYM = re.compile(r"^ent_[0-9a-f]{8}$")


def session(mode="utility", **extra) -> PrivacySession:
    return PrivacySession(PrivacyConfig(mode=mode, **extra), SCHEMA)


def test_pseudonyms_are_keyed_stable_and_invertible():
    with session() as s:
        a = s.pseudonym("Heat")
        assert PSEUDONYM.match(a) and s.pseudonym("Heat") == a and s.deanonymise(a) == "Heat"
        assert s.pseudonym("Thief") != a
        assert s.deanonymise_all(f"answer: {a} (film) and ent_00000000") == ["Heat"]


def test_unlinkable_across_1000_sessions_and_a_bijection_inside_each():
    """64-bit pseudonyms, so a chance repeat across 9,000 names (about 2e-12) cannot flake the exact check."""
    entities = sorted(TYPES)
    seen: dict[str, tuple[int, str]] = {}
    for k in range(1000):
        with session(pseudonym_chars=16) as s:
            names = [s.pseudonym(e) for e in entities]
            assert len(set(names)) == len(entities)  # injective, and invertible below
            assert [s.deanonymise(n) for n in names] == entities
            for entity, name in zip(entities, names):
                assert name not in seen or seen[name] == (k, entity), "a pseudonym repeated across sessions"
                seen[name] = (k, entity)
    assert len(seen) == 1000 * len(entities)


def test_default_width_repeats_across_sessions_only_at_the_birthday_rate():
    """32-bit pseudonyms: 9,000 names repeat across sessions with probability about 0.9 %, and the same entity's
    pseudonym repeats with about 0.1 %. A session key shared between sessions would repeat every entity's."""
    entities = sorted(TYPES)
    first: dict[str, str] = {}
    repeats = same_entity = 0
    for _ in range(1000):
        with session() as s:
            for entity in entities:
                name = s.pseudonym(entity)
                if name in first:
                    repeats += 1
                    same_entity += first[name] == entity
                first.setdefault(name, entity)
    assert repeats <= 3 and same_entity <= 1, (repeats, same_entity)


def test_collisions_are_detected_and_resolved():
    """With 4-hex-digit pseudonyms (65,536 values), 2,000 ids collide often; none share one."""
    with session(pseudonym_chars=4) as s:
        names = [s.pseudonym(f"entity-{i}") for i in range(2000)]
        assert s.collisions > 0
        assert len(set(names)) == 2000
        assert all(s.deanonymise(n) == f"entity-{i}" for i, n in enumerate(names))


def test_modes_relations_literals_and_types():
    with session("plaintext") as s:
        assert s.anonymise_triples(TRIPLES[:1]) == [TRIPLES[0]]
        assert s.guard.size == 0
    with session("utility") as s:
        (h, r, t), = s.anonymise_triples(TRIPLES[:1])
        assert h.endswith(" (film)") and r == "directed_by" and t.endswith(" (person)")
        assert s.entity("m.0abc12").endswith(" (cvt)")
        assert s.entity("1995-12-15") == "year 1995" and s.entity("60000000") == "number 1e7-1e8"
        assert s.entity("Film") == "Film"  # schema vocabulary
    with session("privacy") as s:
        (_, r, _), = s.anonymise_triples(TRIPLES[:1])
        (_, r2, _), = s.anonymise_triples(TRIPLES[1:2])
        assert r == r2 == SCHEMA.relation_cluster("directed_by") and r.endswith("(film→person)")
        with pytest.raises(EgressRefused) as refused:
            s.guard.check("the path uses DIRECTED_BY")
        assert refused.value.category == "relation" and "directed" not in str(refused.value).lower()
    assert literal_view("Michael") is None and literal_view("0.5") == "number <1"


def test_derived_types_separate_roles():
    types = derive_types(TRIPLES[:4])
    assert types["Heat"] == types["Thief"] == "directed_by.head"
    assert (types["Michael Mann"], types["Al Pacino"], types["1995"]) == (
        "directed_by.tail", "starred_actors.tail", "release_year.tail")
    # a director who also acts joins both roles into one type, named after the commoner role
    joined = derive_types([*TRIPLES[:4], ("Thief", "starred_actors", "Michael Mann")])
    assert joined["Michael Mann"] == joined["Al Pacino"] == "starred_actors.tail"


def test_derived_types_do_not_name_relations_in_privacy_mode():
    schema = KGSchema.build(TRIPLES[:4])  # no schema: types derived from relations, e.g. directed_by.tail
    relations = {r for _, r, _ in TRIPLES[:4]}
    with PrivacySession(PrivacyConfig(mode="privacy"), schema) as s:
        view = s.anonymise_triples(TRIPLES[:4], ["Heat"])
        masked = s.mask_question("who directed Heat", ["Heat"])
        text = masked.text + " " + " ".join(" ".join(t) for t in view)
        assert not any(r in text for r in relations), text
        s.guard.check(text)  # nothing the guard would refuse
        assert re.search(r"\(type_\d\d\)", text) and "rel_" in text
    with PrivacySession(PrivacyConfig(mode="utility"), schema) as s:  # relations are shown anyway
        (h, r, _), = s.anonymise_triples(TRIPLES[:1])
        assert h.endswith("(directed_by.head)") and r == "directed_by"


def test_punctuation_inside_a_name_does_not_hide_it():
    # found by the wire test on WebQSP: "what did james k polk do" named James K. Polk unmasked
    schema = KGSchema.build([("James K. Polk", "people.person.profession", "Lawyer")])
    with PrivacySession(PrivacyConfig(mode="utility"), schema) as s:
        masked = s.mask_question("what did james k polk do before", ["Lawyer"], names=["James K. Polk"])
        assert "polk" not in masked.text.lower() and s.guard.find("ask JAMES K POLK") == "entity_name"
        assert s.guard.find("ask James-K.-Polk!") == "entity_name"


@pytest.mark.parametrize(("question", "topic", "masked"), [
    ("what language do most italians speak", "Italy", "what language do most TE_1 (entity) speak"),
    ("what do Portuguese people speak?", "Portugal", "what do TE_1 (entity) people speak?"),
    ("what language do people from bosnia speak", "Bosnia and Herzegovina",
     "what language do people from TE_1 (entity) speak"),
    ("where do new york people live", "New York City", "where do TE_1 (entity) people live"),
    # not the topic: "new" alone, a shorter word ("band" for Bandai), a later word of the name
    ("what is new in town", "New York City", "what is new in town [topic entities: TE_1 (entity)]"),
    ("what did the band play", "Bandai", "what did the band play [topic entities: TE_1 (entity)]"),
    ("who is mayer married to", "John Mayer", "who is mayer married to [topic entities: TE_1 (entity)]"),
])
def test_a_topic_named_in_part_or_by_a_derived_word_is_masked(question, topic, masked):
    """WebQSP: "italians" told a privacy-mode Brain the topic was Italy, and without a topic mask the planner read
    the question as one about Italy's places; the leading words of a name and words derived from its first word
    are the topic's mention when its full name is not in the question."""
    with PrivacySession(PrivacyConfig(mode="utility"), KGSchema.build([(topic, "located_in", "Earth")], {})) as s:
        out = s.mask_question(question, [topic])
        assert out.text == masked and (out.missing == ()) == ("[topic" not in masked)


@pytest.mark.parametrize("name", ["61*", "'71", "C++", "What?"])
def test_names_that_are_nothing_without_their_punctuation_are_still_masked_and_guarded(name):
    # found in review: folding punctuation made these too weak to match (61* became 61)
    schema = KGSchema.build([(name, "directed_by", "Billy Crystal")], {name: "film", "Billy Crystal": "person"})
    with PrivacySession(PrivacyConfig(mode="utility"), schema) as s:
        masked = s.mask_question(f"who directed {name} in 1961", [name])
        assert masked.missing == () and masked.text.startswith("who directed TE_1 (film)")
        assert s.guard.find(f"the film {name.upper()} was") == "entity_name"


def test_underscored_ids_are_guarded_in_both_forms_but_relation_labels_are_not():
    guard = EgressGuard({"entity_id": ["Barack_Obama"], "relation": ["directed_by"]})
    assert guard.find("ask about barack obama") == "entity_id" and guard.find("uses directed_by") == "relation"
    assert guard.find("films directed by him") is None  # the question's own words, not the label


def test_a_closed_session_guards_nothing_through():
    with PrivacySession(PrivacyConfig(mode="utility"), SCHEMA) as s:
        s.entity("Michael Mann")
        guard = s.guard
    assert guard.find("a harmless text") == "closed_session" and guard.size == 0
    with pytest.raises(EgressRefused):
        guard.check("anything")


def test_a_request_is_refused_for_a_raw_string_in_any_field_of_any_message():
    guard = EgressGuard({"entity_name": ["Michael Mann"]})
    guard.check_messages([{"role": "system", "content": "be brief"}, {"role": "user", "content": "who is ent_00aa"}])
    for messages in (
        [{"role": "user", "content": "who is MICHAEL\nmann"}],  # a line break in the content, \\n in the body
        [{"role": "user", "content": "x"}, {"role": "Michael Mann", "content": "y"}],
        [{"role": "user", "content": "x", "name": "michael  mann"}],
        [{"role": "user", "content": "x", "tool_calls": [{"arguments": {"who": "Michael Mann"}}]}],
        [{"role": "user", "content": [{"type": "text", "text": "Michael\xa0Mann"}]}],  # content parts, not a string
    ):
        with pytest.raises(EgressRefused, match="entity_name"):
            guard.check_messages(messages)


def test_normalise_equals_the_mapped_form():
    from rg.privacy.normalise import normalise, normalise_with_map

    for text in ["Ｍｉｃｈａｅｌ  Mánn\u200b", " \tTÓM\u00a0hanks ", "Straße ǅ ﬁ ¨x", "film→person ×12", "", "\u200f",
                 "James K. Polk", "m.0abc_1 (x)! \x1f", "Jean-Luc Godard's"]:
        assert normalise(text) == normalise_with_map(text)[0]
        assert normalise(text, punctuation=True) == normalise_with_map(text, punctuation=True)[0]


@pytest.mark.parametrize("form", [
    "michael mann", "MICHAEL MANN", "Michael   Mann", "Mi\u200bchael Ma\u200dnn", "Ｍｉｃｈａｅｌ Ｍａｎｎ",
    "Michaél Mánn", "Michael\tMann", "\u200fMichael Mann\u200e",
])
def test_question_masking_and_the_guard_see_through_odd_forms(form):
    with session() as s:
        masked = s.mask_question(f"Which films did {form} direct, like Heat on 12/15/1995?", ["Michael Mann"],
                                 names=["Heat"])
        assert masked.text.startswith("Which films did TE_1 (person) direct, like ent_")
        assert masked.text.endswith("(film) on year 1995?") and masked.missing == ()
        assert s.deanonymise(masked.tags["TE_1"]) == "Michael Mann"
        assert s.guard.find(f"about {form}!") == "entity_name"
        assert s.guard.find("the mannequin of michaelmas") is None  # whole tokens only


def test_bad_inputs_have_defined_behaviour():
    odd = ["", "X", "42", "the", "a.b*c+(d)?", "🎬 Heat 🎬", "\u202eLevi\u202c", "Zed"]
    with session() as s:
        guard = EgressGuard({"entity_name": odd})
        assert guard.skipped["entity_name"] == 4  # empty, one character, short digits, a common word
        assert guard.find("the answer is 42, x or the") is None
        assert guard.find("see a.b*c+(d)? now") == "entity_name"  # metacharacters are plain text
        assert guard.find("🎬 heat 🎬") == "entity_name" and guard.find("ask levi") == "entity_name"
        masked = s.mask_question("Who is the director?", ["Michael Mann"])  # names no known entity
        assert masked.missing == ("Michael Mann",) and "TE_1 (person)" in masked.text
        assert s.anonymise_triples([]) == []
        assert s.mask_question("", []).text == ""


def test_closed_session_refuses_use():
    s = session()
    with s:
        s.pseudonym("Heat")
    assert s.closed and s.mapped == 0
    for call in (lambda: s.pseudonym("Heat"), lambda: s.deanonymise("ent_00000000"),
                 lambda: s.mask_question("q", []), lambda: s.entity("Heat")):
        with pytest.raises(SessionClosed):
            call()


def test_brain_side_clients_need_a_guard_and_refuse_raw_strings():
    with ScriptedServer([Reply("ans: ent_1")]) as srv:
        config = LLMConfig(base_url=srv.base_url, model="m", side="brain", max_retries=0)
        with pytest.raises(ValueError, match="needs an egress guard"):
            OpenAICompatibleClient(config)
        with session() as s:
            s.anonymise_triples(TRIPLES[:2])
            client = brain_client(config, s)
            with pytest.raises(LLMError) as err:
                complete_sync(client, [{"role": "user", "content": "who directed HEAT?"}], stage="analyse", prompt_id="p")
            assert err.value.reason == "egress_refused" and "heat" not in str(err.value).lower()
            assert srv.chat_requests == []  # nothing was sent
            done = complete_sync(client, [{"role": "user", "content": s.mask_question("who directed Heat?", ["Heat"]).text}],
                                 stage="analyse", prompt_id="p")
            assert done.text == "ans: ent_1" and len(srv.chat_requests) == 1
        with pytest.raises(ValueError, match="side: brain endpoints"):
            brain_client(LLMConfig(base_url=srv.base_url, model="m"), session())


def test_raw_evidence_stages_refuse_a_brain_endpoint_at_load_time():
    llm = {"base_url": "http://127.0.0.1:9/v1", "model": "m", "side": "brain"}
    with pytest.raises(ConfigError, match=r"llm: .*llm\.side is 'brain'.*the LLM reader.*Fix: set `llm\.side: hand`"):
        validate_config({"llm": llm}, LLMReaderConfig)
    with pytest.raises(ConfigError, match=r"llm: .*llm\.side is 'brain'.*path selector"):
        validate_config({"llm": llm}, LLMSelectorConfig)
    assert validate_config({"llm": {**llm, "side": "hand"}}, LLMReaderConfig).llm.side == "hand"


def test_freebase_type_assertions_give_the_types_and_do_not_merge_classes():
    films = [(f"Film{i}", "directed_by", f"Director{i % 5}") for i in range(20)]
    typed = [(e, "common.topic.notable_types", "Film" if e.startswith("Film") else "Person")
             for e in sorted({x for h, _, t in films for x in (h, t)})]
    types = derive_types(films + typed + [("Director0", "type.object.type", "Actor")])
    assert {types[f"Film{i}"] for i in range(20)} == {"Film"}
    assert {types[f"Director{i}"] for i in range(1, 5)} == {"Person"}
    assert types["Director0"] == "Actor"  # Person and Actor once each: a tie goes to the first name
    assert types["Film"] == types["Person"] == types["Actor"] == "type"
    schema = KGSchema.build(films + typed)
    assert schema.is_public("Person") and schema.type_of("Film3") == "Film"
    # as a role, notable_types.head is held by every entity and joined them all into one class
    assert len(set(derive_types([(h, f"x.{r}", t) for h, r, t in films + typed]).values())) == 2


def freebase_like(bridge: bool) -> list[tuple[str, str, str]]:
    """Ten people (five with a nationality, five with a birthplace), ten cities in two countries that
    speak a language; ``bridge``: one person also heads a ``containedby`` triple (odd data, as in the
    WebQSP subgraphs), the single entity through which the default typing chains people and places."""
    people = [(f"P{i}", "people.person.nationality", f"C{i % 2}") for i in range(5)]
    people += [(f"P{i}", "people.person.place_of_birth", f"City{i}") for i in range(5, 10)]
    places = [(f"City{i}", "location.location.containedby", f"C{i % 2}") for i in range(10)]
    places += [(f"C{i}", "location.country.languages_spoken", f"L{i}") for i in range(2)]
    return people + places + ([("P0", "location.location.containedby", "C1")] if bridge else [])


def test_property_schema_types_a_head_by_the_type_its_property_is_declared_on():
    triples = freebase_like(bridge=False)
    default = derive_types(triples)
    assert default["P0"] == "people.person.nationality.head" and default["P5"] == "people.person.place_of_birth.head"
    typed = derive_types([*triples, ("Heat", "directed_by", "Michael Mann")], property_schema=True)
    assert typed["P0"] == typed["P5"] == "people.person"  # both properties are declared on people.person
    assert typed["City3"] == "location.location" and typed["Heat"] == "directed_by.head"  # no schema in the id


def test_min_overlap_stops_one_odd_entity_chaining_people_and_places():
    triples = freebase_like(bridge=True)
    chained = KGSchema.build(triples)  # 1 shared entity >= 0.05 x 11 holders: one type
    assert chained.type_of("P1") == chained.type_of("City1")
    assert chained.relation_cluster("people.person.nationality") == chained.relation_cluster(
        "location.location.containedby")
    schema = KGSchema.build(triples, typing=TypingConfig(min_overlap=0.1, property_schema=True))
    assert (schema.type_of("P1"), schema.type_of("P6"), schema.type_of("City1")) == (
        "people.person", "people.person", "location.location")
    assert schema.relation_cluster("people.person.nationality") != schema.relation_cluster(
        "location.location.containedby")
    with pytest.raises(ConfigError, match=r"typing\.min_overlap"):
        validate_config({"typing": {"min_overlap": 0}}, PrivacyReportConfig)


def test_a_name_that_reads_like_a_shown_relation_label_is_not_guarded():
    schema = KGSchema.build([("Heat", "film.film.genre", "Crime Film"), ("Crime Film", "type.notable", "Film Genre")])
    guard = EgressGuard({"entity_name": ["Film Genre", "Crime Film"]}, public=schema.public_words(relations_shown=True))
    assert guard.skipped["entity_name"] == 1  # "film genre" is a run of words of film.film.genre
    guard.check('{"relations": ["film.film.genre"]}')  # passes
    with pytest.raises(EgressRefused):
        guard.check("the genre is Crime Film")
    hidden = EgressGuard({"entity_name": ["Film Genre"]}, public=schema.public_words(relations_shown=False))
    with pytest.raises(EgressRefused):  # relations are not shown in privacy mode: the name is guarded
        hidden.check("a Film Genre")
