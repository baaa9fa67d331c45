"""The privacy boundary on the wire: 10,000+ generated questions with raw names planted in odd
forms go to a Brain at 127.0.0.1 through the guarded client; a checker written apart from the
guard finds no raw string in any request body the server received. Negative controls show the
test can fail: with anonymisation off the guard refuses everything, and with the guard off the
checker finds the planted strings.

The questions come from the synthetic KG (its templates name the topic entity verbatim). Each
base question is planted in :data:`FORMS` ways: the topic entity's name in odd case, spacing,
full-width, accented or zero-width form, a neighbour's name likewise, the id of a neighbouring
unnamed (CVT) node, and a neighbouring date literal written in another format.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import unicodedata
from collections import defaultdict
from dataclasses import dataclass

import pytest

from rg.data.synthetic import SyntheticConfig, generate
from rg.llm.client import LLMError, OpenAICompatibleClient
from rg.llm.config import LLMConfig
from rg.llm.scripted_server import Reply, Script, ScriptedServer
from rg.privacy import KGSchema, PrivacyConfig, PrivacySession, brain_client

BASE_QUESTIONS = 1300
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


def leaks(body: str, raw: tuple[str, ...], public: frozenset[str] = frozenset()) -> list[str]:
    """Raw strings found in ``body`` as whole tokens. Skipped: strings under 4 characters, and
    one-word strings that are a word of the schema the Brain may see (``public``)."""
    folded = checker_form(body)
    found = []
    for r in raw:
        form = checker_form(r)
        if len(form.strip()) >= 4 and form.strip() not in public and form in folded:
            found.append(r)
    return found


def schema_words(schema: KGSchema, relations_shown: bool) -> frozenset[str]:
    """The checker's own list of words the Brain may see: type labels, and relation labels in utility mode."""
    texts = list(set(schema.types.values())) + list(schema.clusters.values())
    if relations_shown:
        texts += list(schema.clusters)
    return frozenset(w for t in texts for w in checker_form(t).split())


@pytest.fixture(scope="module")
def world():
    return plant(BASE_QUESTIONS)


def plant(base_questions: int) -> tuple[KGSchema, list[Planted]]:
    """The synthetic KG's schema and ``FORMS`` planted variants of each of its questions."""
    syn = generate(SyntheticConfig(questions=base_questions, seed=11))
    schema = KGSchema.build(syn.triples, syn.entity_types)
    around: dict[str, list[tuple[str, str, str]]] = defaultdict(list)
    for triple in syn.triples:
        around[triple[0]].append(triple)
        around[triple[2]].append(triple)
    rng = random.Random(0)
    kinds = syn.entity_types
    planted: list[Planted] = []
    for question in syn.questions:
        topic = question.q_entities[0]
        if topic not in question.question:
            continue
        near = tuple(around[topic][:NEIGHBOURS])
        ends = [e for h, _, t in near for e in (h, t) if e not in question.q_entities]
        named = [e for e in ends if kinds.get(e) not in ("literal", "cvt", "type")]
        cvts = [e for e in ends if kinds.get(e) == "cvt"]
        dates = [e for e in ends if kinds.get(e) == "literal" and re.fullmatch(r"\d{4}-\d{2}-\d{2}", e)]
        for k in range(FORMS):
            text = question.question.replace(topic, odd_form(topic, k, rng))
            raw = {topic, *(e for e in ends if kinds.get(e) != "type")}
            if named:
                other = named[k % len(named)]
                text += f" Is it linked to {odd_form(other, (k + 3) % FORMS, rng)}?"
            if cvts:
                text += f" See record {cvts[k % len(cvts)]}."
            if dates:
                written = other_date_format(dates[k % len(dates)], k)
                text += f" It happened on {written}."
                raw.add(written)
            names = tuple(e for e in ends if kinds.get(e) != "type")  # what the Hand knows of its subgraph
            planted.append(Planted(text, question.q_entities, near, names, tuple(sorted(raw))))
    return schema, planted


REQUEST = re.compile(r"\[request (\d+)\]")


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

    The text checked is the raw body as received and, after it, the decoded message contents
    (JSON escapes such as ``\\u00e9`` would hide an accented name from a check of the raw bytes).
    """
    out = []
    for request in srv.chat_requests:
        raw = request.raw.decode("utf-8")
        decoded = "\n".join(str(m.get("content", "")) for m in json.loads(raw)["messages"])
        out.append((raw + "\n" + decoded, items[int(REQUEST.search(decoded).group(1))]))
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
    public = schema_words(schema, relations_shown=mode == "utility")
    assert [hit for body, item in bodies for hit in leaks(body, item.raw, public)] == []
    if mode == "privacy":
        relations = tuple(sorted({r for item in items for _, r, _ in item.triples}))
        assert [hit for body, _ in bodies for hit in leaks(body, relations)] == []


@pytest.mark.parametrize("mode,sample", [("utility", slice(0, None, 10)), ("privacy", slice(5, None, 40))])
def test_no_raw_string_reaches_the_brain(world, mode, sample):
    """A tenth (utility) and a fortieth (privacy) of the questions, every planted form included."""
    schema, planted = world
    check_wire(schema, planted[sample], mode)


@pytest.mark.slow
def test_no_raw_string_reaches_the_brain_10000(world):
    """All 10,000+ questions (about 5 minutes: one loopback request takes ~25 ms here)."""
    schema, planted = world
    assert len(planted) >= 10_000
    check_wire(schema, planted, "utility")


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
