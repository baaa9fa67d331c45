"""Typed config of entity linking: ``linking: {...}`` (or ``linking: true``) in job configs."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator

from rg.config import Config
from rg.text.encoder import EncoderConfig

UNNAMED_ID = r"^[mg]\.[0-9a-z_]+$"
"""Freebase machine ids (``m.0abc``, ``g.11x``): nodes named by such an id have no name to link to."""


class LinkingConfig(Config):
    """How topic entities are found in a raw question (:class:`~rg.linking.linker.EntityLinker`).

    Exact and alias matches come first; ``dense`` says when the remaining words are aligned to
    entity names by embedding similarity (PrivGemo's DRM alignment).
    """

    index_dir: str | None = Field(
        None, description="Folder of the saved name index (built there once per KG, then reloaded). None: the job "
                          "chooses `<output_dir>/linking-index`; the QA job needs it set.")
    max_ngram: int = Field(20, ge=1, le=40, description="Longest word n-gram tried as a mention.")
    dense: Literal["fallback", "remaining", "off"] = Field(
        "fallback", description="Dense alignment: `fallback` only when no exact or alias match was found, "
                                "`remaining` on every question's words left after exact matches, `off` never.")
    threshold: float = Field(0.8, gt=0.0, le=1.0, description="Lowest cosine similarity a dense match may have.")
    case_hint: bool = Field(
        True, description="In a question where some matched span has a capital letter or a digit, drop the "
                          "all-lowercase spans (template words like `film` that are also tag names). "
                          "Lower-case-only questions are unaffected.")
    vocabulary_hint: bool = Field(
        True, description="In a question without any capital letter (typed in lower case), a span holding a word the "
                          "packaged encoder's vocabulary lacks (a rare word such as a place name) counts as written "
                          "with a capital for `case_hint` and `prefer_multiword`; off without the package.")
    prefer_multiword: bool = Field(
        True, description="When some matched span has several words, drop the one-word spans written in lowercase "
                          "(common nouns like `president` next to a full name).")
    top_k: int = Field(5, ge=1, le=100, description="Nearest entity names fetched per n-gram in dense alignment.")
    on_ambiguous: Literal["fail", "all"] = Field(
        "fail", description="A mention naming several KG nodes: `fail` records the question as ambiguous with the "
                            "candidate set; `all` takes every candidate as a topic entity.")
    unnamed_pattern: str | None = Field(
        UNNAMED_ID, description="Entity ids matching this regex have no name and are left out of the index "
                                "(Freebase m./g. ids); None indexes every entity.")
    encoder: EncoderConfig = Field(default_factory=EncoderConfig, description="Text encoder of names and mentions.")

    @field_validator("dense", mode="before")
    @classmethod
    def _yaml_off(cls, value: Any) -> Any:
        # YAML 1.1 reads an unquoted `off` as false: `dense: off` and `--set linking.dense=off` mean "off"
        return "off" if value is False else value

    @field_validator("unnamed_pattern")
    @classmethod
    def _regex(cls, value: str | None) -> str | None:
        import re

        if value is not None:
            try:
                re.compile(value)
            except re.error as err:
                raise ValueError(f"unnamed_pattern {value!r} is not a regex ({err}). Fix: e.g. {UNNAMED_ID!r}")
        return value


def linking_setting(value: Any) -> Any:
    """``linking: true`` means the defaults, ``false`` means off; anything else is validated as is.

    Used as a ``field_validator(mode="before")`` by the job configs that accept ``linking``.
    """
    if value is True:
        return {}
    if value is False:
        return None
    return value
