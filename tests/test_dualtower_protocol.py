"""The Brain protocol's own words are public: an entity named like a payload key or a prompt word (MetaQA tags
films ``tag`` and ``film``) no longer makes the guard refuse every request, and every other name stays guarded."""

from __future__ import annotations

import json

import pytest

from rg.graph import KnowledgeGraph
from rg.privacy import EgressRefused, KGSchema, PrivacyConfig, PrivacySession
from rg.reasoning.dualtower import DualTowerConfig, build_controller
from rg.reasoning.dualtower.payload import AnalysisPayload, TopicView, seal
from rg.reasoning.dualtower.prompts import BRAIN_TEMPLATES, protocol_words
from rg.stores.memory import MemoryStore
from tests.dualtower_world import TRIPLES, trained_planner

TAGGED = (*TRIPLES, ("Casino", "has_tags", "tag"), ("Casino", "has_tags", "film"), ("Heat", "has_tags", "heist"))


def session(protocol: frozenset[str]) -> PrivacySession:
    s = PrivacySession(PrivacyConfig(mode="utility"), KGSchema.build(TAGGED), protocol=protocol)
    s.expose(TAGGED, ["Casino"], DualTowerConfig().sanitiser)  # the working subgraph's names are guarded
    return s


def analysis(s: PrivacySession) -> AnalysisPayload:
    return AnalysisPayload(question=s.mask_question("who directed Casino", ["Casino"]).text,
                           topics=(TopicView(tag="TE_1", node=s.entity("Casino", topic=True)),),
                           relation_paths=(("directed_by",),), max_depth=3)


def test_without_the_protocol_words_a_tag_named_tag_refuses_the_payload_and_film_every_llm_request():
    with session(frozenset()) as s:
        with pytest.raises(EgressRefused):
            seal(analysis(s), s.guard)  # the key "tag"
        with pytest.raises(EgressRefused):
            s.guard.check_messages(BRAIN_TEMPLATES[0].render(payload="{}"))  # the example's "?film"


def test_with_them_payloads_and_prompts_pass_and_every_other_name_is_still_refused():
    with session(protocol_words()) as s:
        sealed = seal(analysis(s), s.guard)
        for template in BRAIN_TEMPLATES:
            s.guard.check_messages(template.render(**{field: sealed.text for field in template.fields}))
        for raw in ("Casino", "heist", "Martin Scorsese", "Nicholas Pileggi"):
            with pytest.raises(EgressRefused):
                s.guard.check(f"the answer is {raw}")
        # a protocol word the question writes stays as written; any other KG name is masked
        masked = s.mask_question("which film with the tag heist did Martin Scorsese direct", ["Martin Scorsese"],
                                 names=["film", "tag", "heist"])
        assert masked.text.startswith("which film with the tag ent_") and "heist" not in masked.text


def test_the_controller_asks_the_brain_about_a_film_tagged_tag():
    schema = KGSchema.build(TAGGED)
    controller = build_controller(DualTowerConfig(privacy={"mode": "utility"}, similarity="lexical"), schema,
                                  store=MemoryStore(KnowledgeGraph.from_triples(TAGGED)),
                                  planner=trained_planner(epochs=1))
    result = controller.answer("who directed Casino", ["Casino"])
    assert not any(f.reason == "egress_refused" for f in result.faults), result.faults
    kinds = [json.loads(p)["kind"] for p in result.brain_payloads]
    assert "analysis" in kinds
    assert not any(raw in p for p in result.brain_payloads for raw in ("Casino", "heist", "Scorsese", "Pileggi"))


def test_the_protocol_words_hold_every_payload_key_and_the_hands_fixed_words():
    words = protocol_words()
    assert {"tag", "node", "kind", "question", "topics", "relation_paths", "max_depth", "candidates", "branches",
            "indicator", "keep", "follow_up", "tried", "missing", "analysis", "selection", "prediction"} <= words
    assert {"role", "system", "user", "content", "film", "verify", "cvts"} <= words
    assert "casino" not in words and "heist" not in words
