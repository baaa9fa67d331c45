"""The privacy boundary on the wire: 10,000+ generated questions with raw names planted in odd
forms go to a Brain at 127.0.0.1 through the guarded client; a checker written apart from the
guard finds no raw string in any request body the server received. Negative controls show the
test can fail: with anonymisation off the guard refuses everything, and with the guard off the
checker finds the planted strings.

The questions come from three sources: the synthetic KG (its templates name the topic entity
verbatim), MetaQA's test sets on the whole KB, and WebQSP's evidence questions with their
Freebase subgraphs (skipped with the reason when the shared data is absent). Each base question
is planted in :data:`FORMS` ways: the topic entity's name in odd case, spacing, full-width,
accented or zero-width form, a neighbour's name likewise, the MID of a neighbouring unnamed (CVT)
node, and a neighbouring date literal written in another format.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import unicodedata
from collections import defaultdict
from dataclasses import dataclass
from itertools import islice
from pathlib import Path

import pytest

from rg.data.metaqa import read_metaqa_kb, read_metaqa_questions
from rg.data.records import BadRow
from rg.data.rog import read_rog
from rg.data.synthetic import SyntheticConfig, generate
from rg.llm.client import LLMError, OpenAICompatibleClient
from rg.llm.config import LLMConfig
from rg.privacy import KGSchema, PrivacyConfig, PrivacySession, brain_client
from tests.scripted_server import Reply, Script, ScriptedServer

BASE_QUESTIONS = 1300
REAL_PER_SOURCE = 3_600
"""Planted MetaQA and WebQSP questions each in the full (slow) run; the default run sends a tenth."""
FORMS = 8
NEIGHBOURS = 12
CONCURRENCY = 8
SYSTEM = "You reason over an anonymised knowledge graph. Answer with entity pseudonyms only."
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December"]


def odd_form(name: str, k: int, rng: random.Random) -> str:
    """One of FORMS spellings of ``name`` that a person (or an attacker) might write."""
    if k == 0:
        return name.upper()
    if k == 1:
        return "".join(c.lower() if i % 2 else c.upper() for i, c in enumerate(name))
    if k == 2:
        return re.sub(r" ", lambda _: rng.choice(["  ", "\t", " \u00a0", "\n "]), name)
    if k == 3:
        return "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in name)  # full-width
    if k == 4:
        return "".join(c + "\u0301" if c in "aeiouAEIOU" else c for c in name)  # combining accents
    if k == 5:
        return "\u200b".join(name[i:i + 2] for i in range(0, len(name), 2))  # zero-width spaces
    if k == 6:
        return "\u200f" + name.lower() + "\u200e"  # bidirectional marks
    return unicodedata.normalize("NFD", name.title())


def other_date_format(iso: str, k: int) -> str:
    year, month, day = iso.split("-")
    return [f"{day}/{month}/{year}", f"{MONTHS[int(month) - 1]} {int(day)}, {year}",
            f"{int(day)} {MONTHS[int(month) - 1]} {year}", f"{month}/{day}/{year}"][k % 4]


@dataclass(frozen=True)
class Planted:
    """One generated question: its text, topic, neighbourhood and every raw string it must hide."""

    text: str
    topics: tuple[str, ...]
    triples: tuple[tuple[str, str, str], ...]
    names: tuple[str, ...]
    raw: tuple[str, ...]


def checker_form(text: str) -> str:
    """The checker's own normalisation (independent of rg.privacy): accents and format
    characters dropped, case folded, every non-alphanumeric run one space."""
    text = unicodedata.normalize("NFKD", unicodedata.normalize("NFKC", text))
    text = "".join(c for c in text if not unicodedata.combining(c) and unicodedata.category(c) != "Cf")
    return " " + re.sub(r"[^0-9a-z]+", " ", text.casefold()).strip() + " "


def leaks(body: str, raw: tuple[str, ...], public: str = "") -> list[str]:
    """Raw strings found in ``body`` as whole tokens. Skipped: strings under 4 characters, and
    strings spelled out by the schema the Brain may see (``public``, in checker form: a
    profession named ``Visual Artist`` beside the relation ``visual_art.visual_artist.art_forms``
    cannot be told apart from the relation's own words)."""
    folded = checker_form(body)
    found = []
    for r in raw:
        form = checker_form(r)
        if len(form.strip()) >= 4 and form not in public and form in folded:
            found.append(r)
    return found


def schema_text(schema: KGSchema, relations_shown: bool) -> str:
    """The checker's own rendering of the schema the Brain may see, in checker form: type labels as
    shown (derived types by their aliases when relations are hidden), the type nodes' names (Freebase's
    ``Visual Artist``, shown by name in every mode), cluster labels, and relation labels in utility mode."""
    texts = [schema.type_label(k, relations_shown) for k in set(schema.types.values())] + list(schema.clusters.values())
    texts += [entity for entity, kind in schema.types.items() if kind == "type"]
    if relations_shown:
        texts += list(schema.clusters)
    return "".join(checker_form(t) for t in texts)


@dataclass(frozen=True)
class Base:
    """One question to plant variants of: its text, topic entities and the topic's neighbourhood."""

    text: str
    topics: tuple[str, ...]
    near: tuple[tuple[str, str, str], ...]


def neighbourhoods(triples) -> dict[str, list[tuple[str, str, str]]]:
    around: dict[str, list[tuple[str, str, str]]] = defaultdict(list)
    for triple in triples:
        around[triple[0]].append(triple)
        around[triple[2]].append(triple)
    return around


def plant_all(schema: KGSchema, bases: list[Base], seed: int) -> list[Planted]:
    """``FORMS`` planted variants of each base question (see the module docstring).

    Topics written in the question get odd forms in place; a topic the text does not name (WebQSP
    writes "jamaican" for Jamaica) is added in an odd form. Unnamed nodes are told by their MID,
    dates by their ISO form, and schema type nodes are public words, not raw strings.
    """
    rng = random.Random(seed)
    public = {e for e, kind in schema.types.items() if kind == "type"}
    planted: list[Planted] = []
    for base in bases:
        topic = base.topics[0]
        ends = [e for h, _, t in base.near for e in (h, t) if e not in base.topics and e not in public]
        cvts = [e for e in ends if re.fullmatch(r"[mg]\.[0-9a-z_]+", e)]
        dates = [e for e in ends if re.fullmatch(r"\d{4}-\d{2}-\d{2}", e)]
        named = [e for e in ends if e not in cvts and e not in dates and len(e) >= 4 and not e.isdigit()]
        for k in range(FORMS):
            if topic in base.text:
                text = base.text.replace(topic, odd_form(topic, k, rng))
            else:
                text = f"{base.text} (about {odd_form(topic, k, rng)})"
            raw = {*base.topics, *ends}
            if named:
                text += f" Is it linked to {odd_form(named[k % len(named)], (k + 3) % FORMS, rng)}?"
            if cvts:
                text += f" See record {cvts[k % len(cvts)]}."
            if dates:
                written = other_date_format(dates[k % len(dates)], k)
                text += f" It happened on {written}."
                raw.add(written)
            planted.append(Planted(text, base.topics, base.near, tuple(ends), tuple(sorted(raw))))
    return planted


def synthetic_world(base_questions: int) -> tuple[KGSchema, list[Planted]]:
    """The synthetic KG's schema and planted variants of its questions (their templates name the topic)."""
    syn = generate(SyntheticConfig(questions=base_questions, seed=11))
    schema = KGSchema.build(syn.triples, syn.entity_types)
    around = neighbourhoods(syn.triples)
    bases = [Base(q.question, q.q_entities, tuple(around[q.q_entities[0]][:NEIGHBOURS]))
             for q in syn.questions if q.q_entities[0] in q.question]
    return schema, plant_all(schema, bases, seed=0)


def metaqa_world(shared: Path, per_hop: int) -> tuple[KGSchema, list[Planted]]:
    """MetaQA test questions (brackets removed, so the topic is written plainly) on the whole KB,
    types derived from it."""
    kb = list(read_metaqa_kb(shared / "metaqa" / "kb_reconstructed.txt.gz"))
    schema = KGSchema.build(kb)
    around = neighbourhoods(kb)
    bases = []
    for hops in (1, 2, 3):
        rows = read_metaqa_questions(shared / "metaqa" / f"qa_test_{hops}hop.txt.gz", hops, "test")
        questions = [q for q in islice(rows, 2 * per_hop) if not isinstance(q, BadRow) and around[q.q_entities[0]]]
        bases += [Base(q.question, q.q_entities, tuple(around[q.q_entities[0]][:NEIGHBOURS]))
                  for q in questions[:per_hop]]
    return schema, plant_all(schema, bases, seed=1)


def webqsp_world(shared: Path, questions: int) -> tuple[KGSchema, list[Planted]]:
    """WebQSP evidence questions with their Freebase subgraphs (names, MIDs of unnamed nodes, dates);
    types derived from the union of the subgraphs read."""
    samples = [s for s in islice(read_rog(shared / "webqsp-evidence" / "webqsp_test_rog.jsonl.gz"), 2 * questions)
               if s.q_entities and s.triples][:questions]
    schema = KGSchema.build(t for s in samples for t in s.triples)
    bases = []
    for sample in samples:
        around = neighbourhoods(sample.triples)
        bases.append(Base(sample.question, sample.q_entities, tuple(around[sample.q_entities[0]][:NEIGHBOURS])))
    return schema, plant_all(schema, bases, seed=2)


@pytest.fixture(scope="module")
def world():
    return synthetic_world(BASE_QUESTIONS)


@pytest.fixture(scope="module")
def real_worlds(shared_data):
    return {"metaqa": metaqa_world(shared_data, REAL_PER_SOURCE // (3 * FORMS)),
            "webqsp": webqsp_world(shared_data, REAL_PER_SOURCE // FORMS)}


REQUEST = re.compile(r"\[request (\d+)\]")
ENVELOPE = re.compile(
    r'"(?:model|messages|role|content|temperature|max_tokens)"\s*:\s*(?:"(?:system|user|brain|hand-model)")?')
"""The chat request's own JSON keys and fixed values: protocol, not data (an entity named ``Model``
would otherwise be "found" in ``"model": "brain"``)."""


def brain_messages(session: PrivacySession, item: Planted, index: int) -> list[dict[str, str]]:
    masked = session.mask_question(item.text, item.topics, names=item.names)
    lines = [f"{h} -> [{r}] -> {t}" for h, r, t in session.anonymise_triples(item.triples, item.topics)]
    return [{"role": "system", "content": f"{SYSTEM} [request {index}]"},
            {"role": "user", "content": masked.text + "\n" + "\n".join(lines)}]


def raw_messages(item: Planted, index: int) -> list[dict[str, str]]:
    lines = [f"{h} -> [{r}] -> {t}" for h, r, t in item.triples]
    return [{"role": "system", "content": f"{SYSTEM} [request {index}]"},
            {"role": "user", "content": item.text + "\n" + "\n".join(lines)}]


async def send_all(items, schema, base: OpenAICompatibleClient, mode: str, anonymise: bool) -> dict[str, int]:
    """Send one Brain request per question, CONCURRENCY at a time; count outcomes."""
    counts = {"sent": 0, "refused": 0}

    async def one(index: int, item: Planted) -> None:
        with PrivacySession(PrivacyConfig(mode=mode), schema) as session:
            messages = brain_messages(session, item, index)
            if not anonymise:
                messages = raw_messages(item, index)  # the guard still holds the session's raw strings
            client = brain_client(base, session) if base.config.side == "brain" else base
            try:
                await client.complete(messages, stage="analyse", prompt_id="wire@1")
                counts["sent"] += 1
            except LLMError as err:
                assert err.reason == "egress_refused"
                counts["refused"] += 1

    for start in range(0, len(items), CONCURRENCY):
        await asyncio.gather(*(one(start + k, item) for k, item in enumerate(items[start:start + CONCURRENCY])))
    await base.aclose()
    return counts


def received(srv: ScriptedServer, items: list[Planted]) -> list[tuple[str, Planted]]:
    """Every request the server received, with the question it carried (by its request number).

    The text checked is the raw body as received (without the request's own JSON keys and fixed
    values, :data:`ENVELOPE`) and, after it, the decoded message contents (JSON escapes such as
    ``\\u00e9`` would hide an accented name from a check of the raw bytes).
    """
    out = []
    for request in srv.chat_requests:
        raw = request.raw.decode("utf-8")
        decoded = "\n".join(str(m.get("content", "")) for m in json.loads(raw)["messages"])
        out.append((ENVELOPE.sub(" ", raw) + "\n" + decoded, items[int(REQUEST.search(decoded).group(1))]))
    return out


def check_wire(schema: KGSchema, items: list[Planted], mode: str) -> None:
    """Send every item through the guarded Brain client; no raw string may reach the server."""
    with ScriptedServer(Script.always(Reply("ans: ent_00000000"))) as srv:
        base = brain_client(LLMConfig(base_url=srv.base_url, model="brain", side="brain", max_concurrency=CONCURRENCY),
                            PrivacySession(PrivacyConfig(mode=mode), schema))
        counts = asyncio.run(send_all(items, schema, base, mode, anonymise=True))
        bodies = received(srv, items)
    assert counts == {"sent": len(items), "refused": 0} and len(bodies) == len(items)
    assert len({id(item) for _, item in bodies}) == len(items)  # every question arrived once
    public = schema_text(schema, relations_shown=mode == "utility")
    assert [hit for body, item in bodies for hit in leaks(body, item.raw, public)] == []
    if mode == "privacy":
        # relation labels are identifiers (directed_by, film.film.directed_by): looked for as written,
        # so a question's own words ("films directed by") are not counted against the Brain's view
        relations = sorted({r.casefold() for item in items for _, r, _ in item.triples})
        assert [r for body, _ in bodies for r in relations if r in body.casefold()] == []


@pytest.mark.parametrize("mode,sample", [("utility", slice(0, None, 10)), ("privacy", slice(5, None, 40))])
def test_no_raw_string_reaches_the_brain(world, mode, sample):
    """A tenth (utility) and a fortieth (privacy) of the questions, every planted form included."""
    schema, planted = world
    check_wire(schema, planted[sample], mode)


@pytest.mark.parametrize("source", ["metaqa", "webqsp"])
@pytest.mark.parametrize("mode,sample", [("utility", slice(0, None, 20)), ("privacy", slice(7, None, 40))])
def test_no_raw_string_reaches_the_brain_on_real_data(real_worlds, source, mode, sample):
    """A twentieth (utility) and a fortieth (privacy) of the planted MetaQA and WebQSP questions."""
    schema, planted = real_worlds[source]
    check_wire(schema, planted[sample], mode)


@pytest.mark.slow
def test_no_raw_string_reaches_the_brain_10000(world, real_worlds):
    """10,400 questions from all three sources: 3,200 synthetic, 3,600 MetaQA (1/2/3-hop) and
    3,600 WebQSP, in utility mode, and the MetaQA and WebQSP ones again in privacy mode (about
    8 minutes: one loopback request takes ~25 ms here)."""
    (synthetic_schema, synthetic), metaqa, webqsp = world, real_worlds["metaqa"], real_worlds["webqsp"]
    sent = synthetic[:3200] + metaqa[1] + webqsp[1]
    assert len(sent) >= 10_000 and len(metaqa[1]) == len(webqsp[1]) == REAL_PER_SOURCE
    check_wire(synthetic_schema, synthetic[:3200], "utility")
    for schema, planted in (metaqa, webqsp):
        check_wire(schema, planted, "utility")
        check_wire(schema, planted, "privacy")


def test_negative_controls_show_the_test_can_fail(world):
    schema, planted = world
    items = planted[:400]
    with ScriptedServer(Script.always(Reply("ok"))) as srv:
        guarded = brain_client(LLMConfig(base_url=srv.base_url, model="brain", side="brain"),
                               PrivacySession(PrivacyConfig(mode="utility"), schema))
        # anonymisation off, guard on: every request is refused and nothing reaches the server
        assert asyncio.run(send_all(items, schema, guarded, "utility", anonymise=False)) == {"sent": 0, "refused": 400}
        assert srv.chat_requests == []
        # guard off (a Hand-side client): the raw requests arrive, and the checker finds the plants
        unguarded = OpenAICompatibleClient(LLMConfig(base_url=srv.base_url, model="hand-model", side="hand"))
        assert asyncio.run(send_all(items, schema, unguarded, "utility", anonymise=False))["sent"] == 400
        bodies = received(srv, items)
    assert len(bodies) == 400
    assert all(item.topics[0] in leaks(body, item.raw) for body, item in bodies)
