"""What an edit batch says (by name or id) and what the log records (resolved ids).

A request names each end of a triple either by name (a string, or ``{"name": ...}``) or by id
(``{"id": ...}``); the relation is its label. :func:`rg.kgedits.resolve.resolve_batch` turns a
batch into an :class:`EditRecord` of id triples, giving new entities their ids; the record is what
the log holds and what every replica applies, so replicas never resolve a name themselves.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Literal, Union

from pydantic import BaseModel, ConfigDict, Field

Op = Literal["add", "delete"]
IdTriple = tuple[str, str, str]


class ById(BaseModel):
    """An entity named by its id in the store (``m.0abc``, or the entity string of an in-memory KG)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    id: str = Field(min_length=1)


class ByName(BaseModel):
    """An entity named by its name; a name the KG does not hold makes a new entity (``add`` only)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str = Field(min_length=1)


EntityRef = Union[str, ById, ByName]
"""A bare string is a name."""


class TripleEdit(BaseModel):
    """One edit: add or delete the triple ``(head, relation, tail)``."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    op: Op
    head: EntityRef
    relation: str = Field(min_length=1)
    tail: EntityRef

    def text(self) -> str:
        """The triple as the request wrote it (what an error names)."""
        return f"{self.op} ({_ref(self.head)}, {self.relation}, {_ref(self.tail)})"


class EditBatch(BaseModel):
    """``POST /v1/kg/edits`` and the CLI: edits applied together, all or none."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    edits: list[TripleEdit] = Field(min_length=1, description="Applied in one version, all or none.")


def _ref(ref: EntityRef) -> str:
    if isinstance(ref, ById):
        return f"id:{ref.id}"
    return ref.name if isinstance(ref, ByName) else ref


@dataclass(frozen=True)
class Problem:
    """Why one edit of a batch is refused.

    Attributes:
        index: The edit's position in the batch (None: the batch as a whole).
        triple: The edit as the request wrote it.
        reason: A short machine-readable cause (``unknown_relation``, ``ambiguous_name``, ...).
        detail: The cause and its fix in words.
    """

    index: int | None
    triple: str
    reason: str
    detail: str

    def to_dict(self) -> dict:
        loc = ["body", "edits"] + ([self.index] if self.index is not None else [])
        return {"loc": loc, "type": self.reason, "triple": self.triple, "msg": self.detail}


class EditRejected(ValueError):
    """A batch was refused; nothing of it is applied. ``problems`` name each bad edit and the reason."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        first = problems[0]
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        super().__init__(f"edit {first.index}: {first.triple}: {first.reason}: {first.detail}{more}")


@dataclass(frozen=True)
class EditRecord:
    """One applied batch as the log holds it: the version it makes and its id triples.

    Attributes:
        version: The KG version after this batch (the first batch makes version 1).
        adds: Triples added (ids).
        deletes: Triples deleted (ids).
        new_entities: Id → name of the entities this batch created.
        new_relations: Relations this batch introduced.
        unchanged: Edits that changed nothing (an add of a triple already there), as the request wrote them.
        time: Seconds since the epoch when the batch was accepted.
    """

    version: int
    adds: tuple[IdTriple, ...] = ()
    deletes: tuple[IdTriple, ...] = ()
    new_entities: dict[str, str] = field(default_factory=dict)
    new_relations: tuple[str, ...] = ()
    unchanged: tuple[str, ...] = ()
    time: float = field(default_factory=time.time)

    def to_dict(self) -> dict:
        return {"version": self.version, "adds": [list(t) for t in self.adds],
                "deletes": [list(t) for t in self.deletes], "new_entities": dict(self.new_entities),
                "new_relations": list(self.new_relations), "unchanged": list(self.unchanged), "time": self.time}

    @classmethod
    def from_dict(cls, data: dict) -> "EditRecord":
        return cls(version=int(data["version"]), adds=tuple(tuple(t) for t in data["adds"]),  # type: ignore[misc]
                   deletes=tuple(tuple(t) for t in data["deletes"]),  # type: ignore[misc]
                   new_entities=dict(data.get("new_entities", {})),
                   new_relations=tuple(data.get("new_relations", ())),
                   unchanged=tuple(data.get("unchanged", ())), time=float(data.get("time", 0.0)))

    def to_bytes(self) -> bytes:
        return json.dumps(self.to_dict(), ensure_ascii=False, separators=(",", ":")).encode("utf-8")

    @classmethod
    def from_bytes(cls, data: bytes) -> "EditRecord":
        return cls.from_dict(json.loads(data.decode("utf-8")))
