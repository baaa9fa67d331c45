"""Privacy on every store: the dual-tower controller over the in-memory KG and over the same KG in a real
Virtuoso (where entities are ``m.0<hex>`` ids and names and aliases are literals beside them) with the LLM
Brain at a capturing 127.0.0.1 server.

- Questions that name a topic and another entity by name or alias send neither to the Brain over the
  SPARQL store (the Hand fetches names and aliases before building anything); a plaintext control shows
  the checker finds them when they are sent.
- Both stores give the same answers, question by question.
- The wire test: generated questions naming entities by name, alias, odd case and odd spacing, with a
  neighbour's name or alias planted; a checker written apart from the guard finds no name, alias or store
  id in any request body; each result's exposure ledger equals what the server received for it. 400
  questions per store here (the five forms about equally often), 10,000 under ``-m slow``.
"""

from __future__ import annotations

import asyncio
import json
import random
import re

import pytest

from rg.graph import KnowledgeGraph
from rg.privacy import KGSchema, PrivacyConfig, PrivacySession
from rg.privacy.exposure import PSEUDONYM_IN_TEXT
from rg.privacy.names import NameBook
from rg.stores.base import StoreError
from rg.stores.memory import MemoryStore
from bench.privacy_stores import payload_of, relation_brain
from tests.scripted_server import Respond, Script, ScriptedServer
from tests.store_world import controller, leak_finder, memory_world, raw_strings, sparql_world, synthetic_data

CONCURRENCY = 8


@pytest.fixture(scope="module")
def worlds(virtuoso, tmp_path_factory):
    return {"memory": memory_world(), "sparql": sparql_world(virtuoso, tmp_path_factory.mktemp("store_world"))}


@pytest.fixture(scope="module")
def brain_server():
    with ScriptedServer(Script.always(Respond(relation_brain))) as server:
        yield server


def answer_all(run, items, concurrency: int = CONCURRENCY):
    """Every (question, topics) through ``run.aanswer`` on one event loop, ``concurrency`` at a time."""

    async def main():
        gate = asyncio.Semaphore(concurrency)

        async def one(question, topics):
            async with gate:
                return await run.aanswer(question, topics)

        return await asyncio.gather(*(one(q, t) for q, t in items))

    return asyncio.run(main())


def bodies_since(server: ScriptedServer, start: int) -> list[str]:
    return [r.raw.decode("utf-8") for r in server.chat_requests[start:]]


# ----------------------------------------------------------------------------------------- the name book
def test_a_name_book_lists_every_form_with_its_guard_category():
    book = NameBook({"m.0a": "Wim Kowalski", "m.0b": None}, {"m.0a": ("W. Kowalski", "Wim Kowalski")})
    assert book.forms("m.0a") == (("m.0a", "entity_id"), ("Wim Kowalski", "entity_name"), ("W. Kowalski", "alias"))
    assert book.surface("m.0a") == ("Wim Kowalski", "W. Kowalski")
    assert (book.display("m.0a"), book.display("m.0b"), book.display("Heat")) == ("Wim Kowalski", "m.0b", "Heat")
    assert (book.named("m.0a"), book.named("m.0b"), book.named("Heat")) == (True, False, True)
    assert book.with_mentions({"m.0a": ["wim  kowalski"]}).aliases["m.0a"] == ("W. Kowalski", "Wim Kowalski",
                                                                              "wim  kowalski")


def test_a_session_with_a_name_book_guards_masks_and_shows_names_not_ids():
    schema = KGSchema(types={"m.0a": "person", "m.0f": "film", "m.0t": "type"}, clusters={"directed_by": "rel_00"},
                      names={"m.0t": "Film"})
    book = NameBook({"m.0a": "Wim Kowalski", "m.0f": "Bridge of Rain", "m.0t": "Film"}, {"m.0a": ("W. Kowalski",)})
    with PrivacySession(PrivacyConfig(mode="utility"), schema) as session:
        session.learn_names(book)
        view = session.anonymise_triples([("m.0f", "directed_by", "m.0a"), ("m.0f", "type", "m.0t")], ["m.0a"])
        masked = session.mask_question("Did w.  KOWALSKI direct bridge of rain?", ["m.0a"], names=["m.0f"])
        assert view[1][2] == "Film"  # a type node in the clear: by its name, not its id
        assert re.fullmatch(r"Did TE_1 \(person\) direct ent_[0-9a-f]+ \(film\)\?", masked.text)
        for raw, category in (("Wim Kowalski", "entity_name"), ("W. Kowalski", "alias"), ("m.0f", "entity_id"),
                              ("bridge  of RAIN", "entity_name")):
            assert session.guard.find(f"about {raw}") == category
    with PrivacySession(PrivacyConfig(mode="plaintext"), schema) as session:
        session.learn_names(book)
        assert session.anonymise_triples([("m.0f", "directed_by", "m.0a")]) == [
            ("Bridge of Rain", "directed_by", "Wim Kowalski")]
        assert session.pattern_label("Wim Kowalski") == "person"


class FailingNames(MemoryStore):
    """A memory store whose name lookups fail for the batches holding ``failing``."""

    def __init__(self, kg, failing: set[str]) -> None:
        super().__init__(kg)
        self.failing = failing

    def entity_names(self, ids):
        if self.failing & set(ids):
            raise StoreError("timeout", "names did not come back")
        return super().entity_names(ids)


def test_entities_whose_names_cannot_be_fetched_are_withheld(monkeypatch):
    from rg.reasoning.dualtower import DualTowerConfig, hand as hand_module
    from rg.reasoning.dualtower.hand import Hand, HandError

    monkeypatch.setattr(hand_module, "NAME_BATCH", 1)  # one entity per lookup: a failure withholds only it
    kg = KnowledgeGraph.from_triples([("Heat", "directed_by", "Michael Mann"), ("Heat", "starred_actors", "Al Pacino")])
    hand = Hand(DualTowerConfig(), FailingNames(kg, {"Al Pacino"}))
    triples = hand.subgraph(["Heat"])
    book = hand.names(triples, ["Heat"], {}, from_store=True)
    assert book.withheld == {"Al Pacino": "names_unavailable"}
    assert hand.exposable(triples, book, by_name=True) == [("Heat", "directed_by", "Michael Mann")]
    with pytest.raises(HandError, match="names_unavailable"):
        hand.names(triples, ["Al Pacino"], {}, from_store=True)


# ----------------------------------------------------------------------------------------- names and aliases
DIRECTOR_QUESTION = "Which films did {topic} direct, apart from {other}?"


def director_case():
    """A director, a film of theirs (the other entity) and both their names and aliases."""
    data, _ = synthetic_data()
    directed = [(h, t) for h, r, t in data.triples if r == "film.film.directed_by"]
    film, person = sorted(directed)[0]
    return person, film


@pytest.mark.parametrize("written", ["name", "alias"])
def test_a_sparql_backed_hand_sends_neither_the_topic_nor_another_entity(worlds, brain_server, written):
    world = worlds["sparql"]
    person, film = director_case()
    topic = f"{person.split()[0][0]}. {' '.join(person.split()[1:])}" if written == "alias" else person
    question = DIRECTOR_QUESTION.format(topic=topic, other=film)
    find = leak_finder([person, film, topic, world.id(person), world.id(film)])
    start = len(brain_server.chat_requests)
    result = controller(world, brain_server.base_url).answer(question, [world.id(person)])  # the film: no topic
    bodies = bodies_since(brain_server, start)
    assert bodies and result.answers and not result.faults  # the Brain was asked and the Hand answered
    assert [find(b) for b in bodies] == [[]] * len(bodies)
    analysis = payload_of(json.loads(bodies[0]))
    assert re.fullmatch(r"Which films did TE_1 \(person\) direct, apart from ent_[0-9a-f]+ \(film\)\?",
                        analysis["question"])

    start = len(brain_server.chat_requests)  # linked from the question: by name or alias to the store's ids
    result = controller(world, brain_server.base_url, linker=world.linker()).answer(question)
    bodies = bodies_since(brain_server, start)
    assert result.topics == (world.id(person), world.id(film)) and bodies
    assert [find(b) for b in bodies] == [[]] * len(bodies)

    start = len(brain_server.chat_requests)  # the control: plaintext sends names, and the checker sees them
    controller(world, brain_server.base_url, mode="plaintext").answer(question, [world.id(person)])
    assert film in find(" ".join(bodies_since(brain_server, start)))


def test_a_topic_given_by_id_is_masked_where_the_question_writes_its_alias(worlds, brain_server):
    world = worlds["sparql"]
    person, film = director_case()
    alias = f"{person.split()[0][0]}. {' '.join(person.split()[1:])}"
    start = len(brain_server.chat_requests)
    result = controller(world, brain_server.base_url).answer(f"Which films did {alias} direct?", [world.id(person)])
    bodies = bodies_since(brain_server, start)
    assert result.answers and not result.faults
    assert leak_finder([person, alias])(" ".join(bodies)) == []
    assert "[topic entities:" not in bodies[0]  # found by its alias, not appended as missing


def test_both_stores_give_the_same_answers_question_by_question(worlds, brain_server):
    data, _ = synthetic_data()
    questions = data.questions[:60]
    answers = {}
    for kind, world in worlds.items():
        run = controller(world, brain_server.base_url)
        results = answer_all(run, [(q.question, [world.id(t) for t in q.q_entities]) for q in questions])
        answers[kind] = [(r.answers, r.fallback) for r in results]
    assert answers["sparql"] == answers["memory"]
    assert sum(bool(a) for a, _ in answers["memory"]) >= 50  # answered: the comparison is not of empty sets


# ------------------------------------------------------------------------ names from outside the subgraph
FAR_FORMS = {
    "as written": lambda n: n,
    "lower case": str.lower,
    "possessive": lambda n: f"{n}'s",
    "odd spacing": lambda n: n.replace(" ", "  \t"),
}


def far_entities(person: str, n: int = 3) -> list[str]:
    """``n`` named entities more than two hops from ``person`` (outside any working subgraph of the test),
    each with a name of several words."""
    data, _ = synthetic_data()
    near = {person}
    for _ in range(3):
        near |= {e for h, _, t in data.triples if h in near or t in near for e in (h, t)}
    from tests.store_world import NAMED_KINDS

    return [e for e, kind in sorted(data.entity_types.items())
            if kind in NAMED_KINDS and e not in near and " " in e][:n]


def far_question(form: str) -> tuple[str, str, list[str]]:
    person, _ = director_case()
    far = far_entities(person)
    written = [FAR_FORMS[form](e) for e in far]
    return f"Which films did {person} direct, apart from {written[0]}, {written[1]} and {written[2]}?", person, far


@pytest.mark.parametrize("linked", [True, False], ids=["linked", "topics-given"])
@pytest.mark.parametrize("store", ["memory", "sparql"])
def test_names_typed_of_entities_outside_the_subgraph_never_reach_the_brain(worlds, brain_server, store, linked):
    """The Hand finds every KG entity a question names (by its linker, else by its store's names and aliases),
    so a name typed of an entity the working subgraph does not hold is masked and guarded like the subgraph's."""
    from tests.store_world import aliases_of

    world = worlds[store]
    aliases = aliases_of(synthetic_data()[0].entity_types)
    for form in FAR_FORMS:
        question, person, far = far_question(form)
        find = leak_finder([person, *far, *(a for e in far for a in aliases.get(e, ())), *map(world.id, far)])
        start = len(brain_server.chat_requests)
        run = controller(world, brain_server.base_url, linker=world.linker() if linked else None)
        result = run.answer(question, [] if linked else [world.id(person)])
        bodies = bodies_since(brain_server, start)
        assert bodies and not result.faults, form
        assert [find(b) for b in bodies] == [[]] * len(bodies), form
        analysis = payload_of(json.loads(bodies[0]))["question"]
        # the topic and the three others, each as a tag or a pseudonym with its type (linked: all are topics)
        assert analysis.startswith("Which films did TE_1 (person) direct, apart from "), (form, analysis)
        assert len(re.findall(r"(?:TE_\d|ent_[0-9a-f]+) \(\w+\)", analysis)) == 4, (form, analysis)

    start = len(brain_server.chat_requests)  # the control: plaintext sends them, and the checker sees them
    question, person, far = far_question("as written")
    controller(world, brain_server.base_url, mode="plaintext").answer(question, [world.id(person)])
    assert far[0] in leak_finder(far)(" ".join(bodies_since(brain_server, start)))


def test_a_question_bringing_its_triples_is_masked_against_the_whole_kgs_schema(brain_server):
    """No store: the Hand knows the KG through its schema (``schema_dir``); a name the question types of an
    entity outside the triples it brings is masked all the same (:attr:`KGSchema.written_names`)."""
    from rg.reasoning.dualtower import build_controller

    world = memory_world()
    question, person, far = far_question("lower case")
    data, _ = synthetic_data()
    triples = [t for t in data.triples if person in (t[0], t[2])]
    assert not {e for h, _, t in triples for e in (h, t)} & set(far)
    run = controller(world, brain_server.base_url)
    run = build_controller(run.config, world.schema, brains=run.brains)  # the same settings, no store
    start = len(brain_server.chat_requests)
    result = run.answer(question, [person], triples=triples)
    bodies = bodies_since(brain_server, start)
    assert bodies and result.answers and leak_finder([person, *far])(" ".join(bodies)) == []


# ----------------------------------------------------------------------------------------------- the wire
def odd_case(name: str) -> str:
    return "".join(c.lower() if i % 2 else c.upper() for i, c in enumerate(name))


def odd_spacing(name: str, rng: random.Random) -> str:
    return re.sub(r" ", lambda _: rng.choice(["  ", "\t", " \u00a0", "\n "]), name)


def written(name: str, alias: str | None, form: int, rng: random.Random) -> str:
    """One of five ways to write an entity: its name, its alias, odd case, odd spacing, lower case."""
    if form == 1 and alias:
        return alias
    if form == 2:
        return odd_case(name)
    if form == 3:
        return odd_spacing(name, rng)
    if form == 4:
        return name.lower()
    return name


def planted_questions(n: int, seed: int = 0) -> list[tuple[str, str, str]]:
    """``n`` questions: (text, topic name, planted neighbour name). Each synthetic question with its topic
    written in one of five forms (every form among any five consecutive questions) and a one-hop neighbour's
    name or alias appended."""
    from tests.store_world import NAMED_KINDS, aliases_of

    data, _ = synthetic_data()
    aliases = aliases_of(data.entity_types)
    named = {e for e, kind in data.entity_types.items() if kind in NAMED_KINDS}
    around: dict[str, list[str]] = {}
    for h, _, t in data.triples:
        if h in named and t in named:
            around.setdefault(h, []).append(t)
            around.setdefault(t, []).append(h)
    bases = [q for q in data.questions if q.q_entities[0] in around and q.q_entities[0] in q.question]
    rng = random.Random(seed)
    out = []
    for i in range(n):
        q = bases[i % len(bases)]
        topic = q.q_entities[0]
        form = (i + i // len(bases)) % 5  # the five forms rotate over the bases, and shift each round
        text = q.question.replace(topic, written(topic, (aliases.get(topic) or (None,))[0], form, rng))
        other = sorted(set(around[topic]))[rng.randrange(len(set(around[topic])))]
        shown = written(other, (aliases.get(other) or (None,))[0], rng.randrange(5), rng)
        out.append((f"{text} Is {shown} involved?", topic, other))
    return out


def check_wire(world, server: ScriptedServer, n: int) -> None:
    planted = planted_questions(n)
    run = controller(world, server.base_url, d_max=1, linker=world.linker())  # the name index knows the KG's names
    start = len(server.chat_requests)
    results = answer_all(run, [(text, [world.id(topic)]) for text, topic, _ in planted])
    bodies = bodies_since(server, start)
    assert len(results) == n and all(r.fallback in (None, "unverified") for r in results)
    assert sum(r.brain_calls for r in results) == len(bodies) >= n  # every question asked the Brain
    find = leak_finder(raw_strings(world))
    assert [b for b in bodies if find(b)] == []
    # the exposure ledger equals what the server received, request by request: each body is one call of one
    # question (its payload is in that result's brain_payloads), and its characters and pseudonyms add up
    owner = {json.dumps(json.loads(p), sort_keys=True): i for i, r in enumerate(results) for p in r.brain_payloads}
    got: list[dict] = [{"requests": 0, "chars": 0, "pseudonyms": set()} for _ in results]
    for body in bodies:
        parsed = json.loads(body)
        mine = got[owner[json.dumps(payload_of(parsed), sort_keys=True)]]
        text = "\n".join(m["content"] for m in parsed["messages"])
        mine["requests"] += 1
        mine["chars"] += len(text)
        mine["pseudonyms"] |= set(PSEUDONYM_IN_TEXT.findall(text))
    for result, seen in zip(results, got):
        brain = result.exposure_totals["brain"]
        assert (brain["requests"], brain["request_chars"], brain["refused"]) == (seen["requests"], seen["chars"], {})
        assert result.exposure["pseudonyms"] == len(seen["pseudonyms"])


@pytest.mark.parametrize("store", ["memory", "sparql"])
def test_no_name_or_alias_reaches_the_brain_on_either_store(worlds, brain_server, store):
    check_wire(worlds[store], brain_server, 400)


@pytest.mark.slow
@pytest.mark.parametrize("store", ["memory", "sparql"])
def test_no_name_or_alias_reaches_the_brain_on_either_store_10000(worlds, brain_server, store):
    check_wire(worlds[store], brain_server, 10_000)
