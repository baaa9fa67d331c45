"""The planner trained on questions as a privacy session masks them for the Brain (``PlannerConfig.mask_names``):
the exact planner form of a masked question, the session's masking reproduced without a Hand, equal to what
the controller sends the Brain, the encoder's masking built from the KB file, and the config rule."""

from __future__ import annotations

import json

import pytest

from rg.config import ConfigError, validate_config
from rg.graph import KnowledgeGraph
from rg.privacy import KGSchema
from rg.privacy.wording import SessionWording
from rg.reasoning.dualtower import DualTowerConfig, build_controller
from rg.jobs.train_planner import with_protocol
from rg.reasoning.dualtower.local_brain import planner_question, protocol_drift
from rg.reasoning.dualtower.prompts import protocol_words
from rg.retrievers.planner import PlannerConfig
from rg.retrievers.planner.model import PlanEncoder, prompt_question
from rg.retrievers.planner.prompt import brain_wording
from rg.stores.memory import MemoryStore
from tests.dualtower_world import TRIPLES, trained_planner

# the film graph with tags that are ordinary words, as MetaQA's are ("director" is also a word of the Brain's
# prompts, so it is public and stays as written; "writer" is not)
TAGGED = (*TRIPLES, ("Heat", "has_tags", "writer"), ("Casino", "has_tags", "director"), ("Top Gun", "has_tags", "jets"))
TINY = {"tiny": {"layers": 1, "hidden": 32, "heads": 2, "max_positions": 48}, "max_prompt_tokens": 32}


def test_brain_wording_exact_outputs():
    masked = "which films was TE_1 (person) the ent_3f9a2c1d (has_tags.tail) for [topic entities: TE_2 (film)]"
    assert brain_wording(masked, True, True) == "which films was <e> the <n> for"
    assert brain_wording(masked, True, False) == "which films was <e> the ent_3f9a2c1d (has_tags.tail) for"
    assert brain_wording(masked, False, False) == "which films was TE_1 (person) the ent_3f9a2c1d (has_tags.tail) for"
    assert brain_wording("did TE_1 (film) and lit_00ff (literal) meet in year 1995", True, True) == (
        "did <e> and <n> meet in year 1995")
    assert brain_wording("a comment_abc (x) stays", True, True) == "a comment_abc (x) stays"  # not a pseudonym


@pytest.mark.parametrize("question, topics, planner_form", [
    ("which films was Michael Mann the writer for", ("Michael Mann",), "which films was <e> the <n> for"),
    ("which films was Michael Mann the director for", ("Michael Mann",), "which films was <e> the director for"),
    ("who directed Casino, the film with Robert De Niro", ("Casino",), "who directed <e>, the film with <n>"),
    ("who starred in Top Gun", ("Top Gun",), "who starred in <e>"),
])
def test_the_session_wording_is_what_the_controller_sends_the_brain(question, topics, planner_form):
    schema = KGSchema.build(TAGGED)
    wording = SessionWording(schema, protocol=protocol_words())
    masked = wording(question, topics)
    assert "TE_1 (" in masked and not any(t in masked for t in topics)
    controller = build_controller(DualTowerConfig(privacy={"mode": "utility"}, similarity="lexical"), schema,
                                  store=MemoryStore(KnowledgeGraph.from_triples(TAGGED)),
                                  planner=trained_planner(epochs=1))
    result = controller.answer(question, list(topics))
    sent = [json.loads(p)["question"] for p in result.brain_payloads if json.loads(p)["kind"] == "analysis"]
    assert sent, result.faults
    config = PlannerConfig(**TINY, mask_topics=True, mask_names={"kb": {"path": "unused.tsv", "format": "tsv"},
                                                                 "protocol": sorted(protocol_words())})
    # pseudonyms differ per session; the planner's form of both is the same text
    assert {planner_question(q, config) for q in sent} == {brain_wording(masked, True, True)} == {planner_form}


def test_the_encoder_masks_as_the_session_from_the_kb_file(tmp_path):
    kb = tmp_path / "kb.tsv"
    kb.write_text("".join(f"{h}\t{r}\t{t}\n" for h, r, t in TAGGED))
    asked = PlannerConfig(**TINY, mask_topics=True, mask_names={"kb": {"path": str(kb), "format": "tsv"}})
    config = with_protocol(asked)  # as the training job records them
    assert set(config.mask_names.protocol) == protocol_words() and not protocol_drift(config)
    encoder = PlanEncoder(config, tokenizer=_no_tokenizer())
    assert encoder.wording is not None  # built from the file on first use
    assert encoder.prompt_question("which films was Michael Mann the writer for", ["Michael Mann"]) == (
        "which films was <e> the <n> for")
    assert encoder.prompt_question("which films was Michael Mann the director for", ["Michael Mann"]) == (
        "which films was <e> the director for")  # a word of the Brain's prompts: public
    # the relation's own words are the schema's, public: "starred" stays although nothing else would
    assert encoder.prompt_question("who starred in Top Gun", ["Top Gun"]) == "who starred in <e>"
    plain = config.model_copy(update={"mask_names": None})
    assert prompt_question(plain, "which films was Michael Mann the writer for", ["Michael Mann"]) == (
        "which films was <e> the writer for")


def test_a_planner_trained_with_other_protocol_words_is_named_drifted():
    config = PlannerConfig(**TINY, mask_topics=True, mask_names={"kb": {"path": "kb.tsv", "format": "tsv"},
                                                                 "protocol": ["tag", "wholly_other"]})
    drift = protocol_drift(config)
    assert "wholly_other" in drift and "question" in drift and "tag" not in drift
    assert not protocol_drift(PlannerConfig(**TINY, mask_topics=True))


def test_mask_names_needs_mask_topics():
    with pytest.raises(ConfigError, match="mask_topics: true"):
        validate_config({**TINY, "mask_names": {"kb": {"path": "kb.tsv", "format": "tsv"}}}, PlannerConfig)


def _no_tokenizer():
    """The smallest tokenizer a :class:`PlanEncoder` accepts: the planner's path markers, no words."""
    from rg.retrievers.planner.tokenizer import train_tokenizer
    from rg.retrievers.planner.config import TokenizerConfig

    return train_tokenizer(["x"], ["directed_by"], TokenizerConfig())
