"""The exposure ledger: what each Brain call revealed, booked at the egress guard."""

from __future__ import annotations

import asyncio

import pytest

from rg.llm.client import LLMError
from rg.llm.config import LLMConfig
from rg.privacy import ExposureLedger, ExposureTotals, KGSchema, PrivacyConfig, PrivacySession, brain_client
from rg.privacy.structure import Uniqueness
from tests.scripted_server import Reply, Script, ScriptedServer, Status

TRIPLES = [("Zed Quill", "directed_by", "Ann Vale"), ("Zed Quill", "release_year", "1999"),
           ("Ann Vale", "born_in", "Port Ruin")]


def schema() -> KGSchema:
    return KGSchema.build(TRIPLES, {"Zed Quill": "film", "Ann Vale": "person", "Port Ruin": "place",
                                    "1999": "literal"})


def test_ledger_counts_a_request_exactly():
    ledger = ExposureLedger(relation_views={"rel_01 (film→person)", "rel_02 (person→place)"})
    messages = [{"role": "system", "content": "sys"},
                {"role": "user", "content": "ent_00aa11bb -> [rel_01 (film→person)] -> ent_group_2 and ent_00aa11bb"}]
    ledger.record_sent("analyse", messages, attempts=2, prompt_tokens=30, completion_tokens=4)
    ledger.record_refused("analyse", "entity_name")
    ledger.record_structure("analyse", paths=3, nodes=12, edges=15, uniqueness=Uniqueness(11, 2, 1))
    stage = ledger.to_dict()["stages"]["analyse"]
    assert stage == {"brain_calls": 1, "requests": 2, "unsent": 0, "refused": {"entity_name": 1},
                     "request_chars": 3 + 1 + len(messages[1]["content"]), "prompt_tokens": 30,
                     "completion_tokens": 4, "pseudonyms": 2, "relations": 1, "paths": 3, "nodes": 12, "edges": 15,
                     "uniqueness_share": 2 / 11, "k": 1}
    assert ledger.to_dict()["brain_calls"] == 1


def test_totals_fold_questions():
    a, b = ExposureLedger(), ExposureLedger()
    a.record_sent("analyse", [{"role": "user", "content": "ent_0000aaaa"}], attempts=1)
    b.record_sent("analyse", [{"role": "user", "content": "ent_0000bbbb ent_0000cccc"}], attempts=3)
    b.record_refused("select", "relation")
    totals = ExposureTotals()
    for ledger in (a, b):
        totals.add(ledger.to_dict())
    out = totals.to_dict()
    assert out["questions"] == 2 and out["questions_with_refusals"] == 1 and out["refused"] == {"relation": 1}
    assert out["stages"]["analyse"]["brain_calls"] == 2 and out["stages"]["analyse"]["requests"] == 4
    assert out["stages"]["analyse"]["per_question"]["pseudonyms"] == pytest.approx(1.5)
    other = ExposureTotals()
    other.merge(totals)
    assert other.to_dict() == out


def test_totals_keep_the_mean_uniqueness_and_the_smallest_k():
    totals = ExposureTotals()
    for share, k in ((0.5, 3), (0.1, 2)):
        ledger = ExposureLedger()
        ledger.record_structure("explore", nodes=5, edges=4, uniqueness=Uniqueness(10, int(share * 10), k))
        totals.add(ledger.to_dict())
    stage = totals.to_dict()["stages"]["explore"]
    assert stage["uniqueness_share_mean"] == pytest.approx(0.3) and stage["k_min"] == 2
    assert stage["nodes"] == 10 and stage["per_question"]["edges"] == 4


def test_relations_are_counted_as_whole_labels():
    ledger = ExposureLedger(relation_views={"genre", "has_genre"})
    ledger.record_sent("s", [{"role": "user", "content": "a -> [has_genre] -> b"}], attempts=1)
    assert ledger.to_dict()["relations"] == 1  # 'genre' inside 'has_genre' is not a second relation


def test_a_call_that_never_got_out_is_unsent_not_exposed():
    import socket

    with socket.socket() as probe:  # a loopback port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with PrivacySession(PrivacyConfig(mode="utility"), schema()) as session:
        client = brain_client(LLMConfig(base_url=f"http://127.0.0.1:{port}/v1", model="m", side="brain",
                                        max_retries=1, backoff_s=0.0), session)
        with pytest.raises(LLMError) as failed:
            asyncio.run(client.complete([{"role": "user", "content": "ent_0000aaaa"}], stage="s", prompt_id="p@1"))
        record = session.exposure.to_dict()["stages"]["s"]
    assert failed.value.reason == "connection"
    assert (record["brain_calls"], record["requests"], record["unsent"], record["pseudonyms"]) == (0, 0, 1, 0)


def test_guarded_client_books_sent_failed_and_refused_calls():
    script = Script([Reply("ok"), Status(500), Status(500)])
    with ScriptedServer(script) as srv, PrivacySession(PrivacyConfig(mode="privacy"), schema()) as session:
        view = session.anonymise_triples(TRIPLES, ["Zed Quill"])
        masked = session.mask_question("who directed Zed Quill", ["Zed Quill"])
        client = brain_client(LLMConfig(base_url=srv.base_url, model="m", side="brain", max_retries=1,
                                        backoff_s=0.0), session)
        good = [{"role": "user", "content": masked.text + "\n" + "\n".join(" ".join(t) for t in view)}]

        async def run() -> None:
            await client.complete(good, stage="analyse", prompt_id="p@1")
            with pytest.raises(LLMError):
                await client.complete(good, stage="select", prompt_id="p@1")  # 500 twice: sent, then failed
            with pytest.raises(LLMError) as refused:
                await client.complete([{"role": "user", "content": "about Ann Vale"}], stage="select", prompt_id="p@1")
            assert refused.value.reason == "egress_refused"
            await client.aclose()

        asyncio.run(run())
        record = session.exposure.to_dict()
    assert len(srv.chat_requests) == 3
    analyse, select = record["stages"]["analyse"], record["stages"]["select"]
    assert analyse["brain_calls"] == 1 and analyse["requests"] == 1
    assert analyse["pseudonyms"] == 3  # Zed Quill, Ann Vale, Port Ruin; the year is coarsened, not pseudonymised
    assert analyse["relations"] == 3 and analyse["prompt_tokens"] > 0  # three relations, each its own cluster
    assert select["brain_calls"] == 1 and select["requests"] == 2 and select["refused"] == {"entity_name": 1}
    assert record["refused"] == {"entity_name": 1} and record["brain_calls"] == 2
    # the refused request named Ann Vale: neither the report nor the ledger's own sets hold a raw name
    held = {p for s in session.exposure.stages.values() for p in (*s.pseudonyms, *s.relations)}
    assert not any(name in " ".join(held) + str(record) for name in ("Ann", "Vale", "Zed", "Quill", "Port Ruin"))


def test_side_totals_sum_the_stages_and_keep_refusals_by_category():
    from rg.pipeline.stages import exposure_line
    from rg.privacy.exposure import side_totals

    ledger = ExposureLedger({"directed_by"})
    first, second = "who directed ent_3f9a (film)", "ent_3f9a → [directed_by] → ent_77aa (person)"
    ledger.record_sent("analysis", [{"role": "user", "content": first}], attempts=2, prompt_tokens=7,
                       completion_tokens=3)
    ledger.record_sent("selection", [{"role": "user", "content": second}], attempts=1)
    ledger.record_structure("selection", paths=4)
    ledger.record_refused("selection", "alias")
    record = ledger.to_dict()
    totals = side_totals(record["stages"], record["refused"], {"calls": 2, "prompt_tokens": 40})
    assert totals["brain"] == {"brain_calls": 2, "requests": 3, "unsent": 0, "request_chars": len(first) + len(second),
                               "prompt_tokens": 7, "completion_tokens": 3,
                               "shown": {"pseudonyms": 3, "relations": 1, "paths": 4}, "refused": {"alias": 1}}
    assert totals["hand"] == {"calls": 2, "prompt_tokens": 40, "completion_tokens": 0, "sees": "raw KG (trusted, local)"}
    assert exposure_line(totals) == "Brain sent 3 requests, 72 chars, 3 pseudonyms; 1 refused (alias 1)"
