"""Typed settings of live KG edits (:mod:`rg.kgedits`), validated once where an entry point reads them."""

from __future__ import annotations

from pydantic import Field, field_validator

from rg.config import Config


class KGEditsConfig(Config):
    """Live edits of the KG: the batch limits, whether new relations are allowed, and the durable edit log.

    The log is the source of truth: every acknowledged batch is in it (fsync before the reply), a
    restart replays it over the configured KG, and Hand replicas apply its records in order.
    """

    log_path: str = Field(description="The append-only edit log (created when absent). A relative path is made "
                                      "absolute where the config is read; on a cluster, storage the edit owner's "
                                      "node keeps across restarts.")
    max_batch: int = Field(1000, ge=1, le=1_000_000, description="Most edits in one batch; a larger batch is refused "
                                                                 "whole (HTTP 422).")
    allow_new_relations: bool = Field(False, description="Accept an added triple whose relation the KG does not hold "
                                                         "yet; false refuses it (a typo would otherwise make a "
                                                         "relation no question finds).")
    new_id_prefix: str = Field("rg.e.", min_length=1, max_length=32,
                               description="Prefix of the ids given to entities an edit adds (a random suffix "
                                           "follows; the id is written to the log, so every replica uses the same).")
    max_name_chars: int = Field(1000, ge=1, le=100_000, description="Longest entity name or relation an edit may "
                                                                    "carry.")

    @field_validator("new_id_prefix")
    @classmethod
    def _prefix(cls, value: str) -> str:
        if any(c.isspace() for c in value):
            raise ValueError(f"new_id_prefix {value!r} holds whitespace. Fix: e.g. rg.e.")
        return value
