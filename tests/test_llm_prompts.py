"""Prompt templates render chat messages; the registry is immutable and names known ids."""

from __future__ import annotations

import dataclasses
import pickle

import pytest

from rg.llm.prompts import PromptRegistry, PromptTemplate

# A tiny generic template for these tests only (the real task prompts live beside their parsers).
ECHO = PromptTemplate(
    id="echo_topic",
    version=1,
    system="You repeat the topic of a sentence.",
    instructions="""
        Read the sentence and reply with its topic in one word.
        Answer on one line as `topic: WORD`.
    """,
    example="Sentence: Cats sleep a lot.\ntopic: cats",
    task_format="Sentence: {sentence}\nLanguage: {language}",
)
ECHO_V2 = dataclasses.replace(ECHO, version=2, system="Repeat the topic.")


def test_render_builds_system_and_user_messages():
    messages = ECHO.render(sentence="Dogs bark {loudly}.", language="en")
    assert [m["role"] for m in messages] == ["system", "user"]
    assert messages[0]["content"] == "You repeat the topic of a sentence."
    assert messages[1]["content"] == (
        "Read the sentence and reply with its topic in one word.\n"
        "Answer on one line as `topic: WORD`.\n\n"
        "Example:\nSentence: Cats sleep a lot.\ntopic: cats\n\n"
        "Task:\nSentence: Dogs bark {loudly}.\nLanguage: en"
    )
    assert ECHO.fields == ("sentence", "language")
    assert ECHO.full_id == "echo_topic@v1"


def test_empty_example_is_omitted():
    bare = dataclasses.replace(ECHO, example="")
    assert "Example:" not in bare.render(sentence="x", language="en")[1]["content"]


def test_render_names_missing_and_unexpected_fields():
    with pytest.raises(ValueError, match=r"echo_topic@v1: missing fields \['language'\], unexpected fields \['lang'\]"):
        ECHO.render(sentence="x", lang="en")


@pytest.mark.parametrize(
    ("change", "pattern"),
    [
        ({"id": "Echo@1"}, "must match"),
        ({"version": 0}, "version must be an integer >= 1"),
        ({"system": "  "}, "`system` is empty"),
        ({"task_format": "Sentence: {}"}, "must be a plain name"),
        ({"task_format": "Sentence: {s.upper}"}, "must be a plain name"),
        ({"task_format": "Sentence: {s"}, "not a valid format string"),
    ],
)
def test_bad_templates_fail_at_definition(change, pattern):
    with pytest.raises(ValueError, match=pattern):
        dataclasses.replace(ECHO, **change)


def test_templates_are_frozen_and_digest_tracks_wording():
    with pytest.raises(dataclasses.FrozenInstanceError):
        ECHO.version = 3  # type: ignore[misc]
    assert ECHO.digest == dataclasses.replace(ECHO).digest
    assert ECHO.digest != dataclasses.replace(ECHO, instructions="Reply with the topic.").digest


def test_registry_lookup_by_id_and_full_id():
    registry = PromptRegistry((ECHO, ECHO_V2))
    assert registry.get("echo_topic") is ECHO_V2
    assert registry.get("echo_topic@v1") is ECHO
    assert "echo_topic@v2" in registry and "echo_topic@v3" not in registry
    assert registry.ids() == ("echo_topic",) and len(registry) == 2


def test_registry_errors_list_known_ids():
    registry = PromptRegistry((ECHO,))
    with pytest.raises(KeyError, match=r"unknown prompt 'select'; registered: \['echo_topic@v1'\]"):
        registry.get("select")
    with pytest.raises(KeyError, match="unknown prompt 'echo_topic@v9'"):
        registry.get("echo_topic@v9")
    with pytest.raises(ValueError, match="echo_topic@v1 is registered twice"):
        PromptRegistry((ECHO, dataclasses.replace(ECHO)))


def test_registry_is_immutable_and_picklable():
    registry = PromptRegistry((ECHO,))
    with pytest.raises(AttributeError, match="immutable"):
        registry._by_full_id = {}  # type: ignore[misc]
    with pytest.raises(TypeError):
        registry._by_full_id["x"] = ECHO  # type: ignore[index]
    bigger = registry.extended((ECHO_V2,))
    assert len(registry) == 1 and len(bigger) == 2
    assert list(pickle.loads(pickle.dumps(bigger))) == [ECHO, ECHO_V2]
