"""Validate an edit batch against the current KG and resolve it to id triples (all or nothing).

Every edit is checked before anything is applied, and every problem is reported with the edit's
position, the triple as the request wrote it and the reason, so a client fixes a batch in one go.
"""

from __future__ import annotations

import secrets
import unicodedata
from typing import Protocol, Sequence

from rg.kgedits.config import KGEditsConfig
from rg.kgedits.model import ById, ByName, EditBatch, EditRecord, EditRejected, EntityRef, IdTriple, Problem

MAX_LISTED = 5


class EditTarget(Protocol):
    """What validation needs to know of a store (the in-memory and the SPARQL store both answer it)."""

    def entity_ids_by_name(self, name: str) -> list[str]: ...

    def has_entity(self, entity_id: str) -> bool: ...

    def has_relation(self, relation: str) -> bool: ...

    def has_triple(self, head: str, relation: str, tail: str) -> bool: ...


def malformed(text: str, limit: int) -> str | None:
    """Why ``text`` cannot be a name or relation (None when it can)."""
    if not text.strip():
        return "is empty or only whitespace"
    if len(text) > limit:
        return f"has {len(text)} characters; the limit is {limit} (kg_edits.max_name_chars)"
    bad = next((c for c in text if unicodedata.category(c) in ("Cc", "Cs")), None)
    if bad is not None:
        return f"holds the control character U+{ord(bad):04X}"
    return None


class _Resolver:
    def __init__(self, target: EditTarget, config: KGEditsConfig, version: int) -> None:
        self.target, self.config, self.version = target, config, version
        self.new_entities: dict[str, str] = {}  # id -> name
        self.new_by_name: dict[str, str] = {}  # name -> id
        self.new_relations: dict[str, None] = {}
        self.problems: list[Problem] = []

    def refuse(self, index: int, text: str, reason: str, detail: str) -> None:
        self.problems.append(Problem(index, text, reason, detail))

    def entity(self, ref: EntityRef, creating: bool, index: int, text: str, end: str) -> str | None:
        if isinstance(ref, ById):
            if self.target.has_entity(ref.id):
                return ref.id
            self.refuse(index, text, "unknown_id", f"the {end} id {ref.id!r} is not in the KG. Fix: give the entity "
                                                   "by name to create it, or correct the id")
            return None
        name = ref.name if isinstance(ref, ByName) else ref
        why = malformed(name, self.config.max_name_chars)
        if why is not None:
            self.refuse(index, text, "malformed", f"the {end} name {why}. Fix: send a printable name")
            return None
        ids = self.target.entity_ids_by_name(name)
        if len(ids) == 1:
            return ids[0]
        if len(ids) > 1:
            listed = ", ".join(ids[:MAX_LISTED]) + (" ..." if len(ids) > MAX_LISTED else "")
            self.refuse(index, text, "ambiguous_name", f"{len(ids)} entities are named {name!r} ({listed}). Fix: give "
                                                       f"the {end} by id: {{\"id\": ...}}")
            return None
        if name in self.new_by_name:
            return self.new_by_name[name]
        if not creating:
            self.refuse(index, text, "unknown_name", f"no entity is named {name!r}, so there is no such triple to "
                                                     "delete. Fix: check the name, or give the entity by id")
            return None
        new_id = self._new_id()
        self.new_by_name[name], self.new_entities[new_id] = new_id, name
        return new_id

    def _new_id(self) -> str:
        for _ in range(16):  # bounded: a 48-bit random suffix practically never collides
            candidate = f"{self.config.new_id_prefix}{secrets.token_hex(6)}"
            if candidate not in self.new_entities and not self.target.has_entity(candidate):
                return candidate
        raise RuntimeError("could not draw a free entity id in 16 tries. Fix: choose another kg_edits.new_id_prefix")

    def relation(self, relation: str, creating: bool, index: int, text: str) -> str | None:
        why = malformed(relation, self.config.max_name_chars)
        if why is not None:
            self.refuse(index, text, "malformed", f"the relation {why}. Fix: send a printable relation label")
            return None
        if self.target.has_relation(relation) or relation in self.new_relations:
            return relation
        if not creating:
            self.refuse(index, text, "unknown_relation", f"the KG holds no relation {relation!r}, so there is no such "
                                                         "triple to delete. Fix: check the relation's spelling")
            return None
        if not self.config.allow_new_relations:
            self.refuse(index, text, "unknown_relation", f"the KG holds no relation {relation!r} and "
                                                         "kg_edits.allow_new_relations is false. Fix: check the "
                                                         "spelling, or set kg_edits.allow_new_relations: true")
            return None
        self.new_relations[relation] = None
        return relation


def resolve_batch(batch: EditBatch, target: EditTarget, config: KGEditsConfig, version: int) -> EditRecord:
    """The record that applying ``batch`` to ``target`` (now at ``version``) makes.

    Args:
        batch: The edits, by name or id.
        target: The KG as it is now (a pinned snapshot, so nothing moves while the batch is checked).
        config: Limits and the new-relation rule.
        version: The KG's version now; the record makes ``version + 1``.

    Raises:
        EditRejected: naming every bad edit (malformed, unknown or ambiguous entity, unknown relation, a delete of
            a triple the KG does not hold, an add and a delete of one triple) or a batch over ``max_batch``.
    """
    if len(batch.edits) > config.max_batch:
        raise EditRejected([Problem(None, f"{len(batch.edits)} edits", "batch_too_large",
                                    f"the batch has {len(batch.edits)} edits; the limit is {config.max_batch} "
                                    "(kg_edits.max_batch). Fix: split it into smaller batches")])
    r = _Resolver(target, config, version)
    adds: dict[IdTriple, int] = {}
    deletes: dict[IdTriple, int] = {}
    unchanged: list[str] = []
    for i, edit in enumerate(batch.edits):
        text, creating = edit.text(), edit.op == "add"
        head = r.entity(edit.head, creating, i, text, "head")
        relation = r.relation(edit.relation, creating, i, text)
        tail = r.entity(edit.tail, creating, i, text, "tail")
        if head is None or relation is None or tail is None:
            continue
        triple = (head, relation, tail)
        other = deletes if creating else adds
        if triple in other:
            r.refuse(i, text, "conflict", f"edit {other[triple]} of this batch does the opposite to the same triple. "
                                          "Fix: keep one of them")
            continue
        known = head not in r.new_entities and tail not in r.new_entities and relation not in r.new_relations
        exists = known and target.has_triple(*triple)
        if creating:
            if exists:
                unchanged.append(text)
            else:
                adds.setdefault(triple, i)
        elif not exists:
            r.refuse(i, text, "no_such_triple", "the KG does not hold this triple. Fix: check the names and relation "
                                                "(GET the entity's triples first)")
        else:
            deletes.setdefault(triple, i)
    if r.problems:
        raise EditRejected(r.problems)
    used = {e for t in adds for e in (t[0], t[2])}
    return EditRecord(version=version + 1, adds=tuple(adds), deletes=tuple(deletes),
                      new_entities={k: v for k, v in r.new_entities.items() if k in used},
                      new_relations=tuple(r.new_relations), unchanged=tuple(unchanged))


def parse_tsv(text: str, op: str, source: str) -> list[dict]:
    """Edits from tab-separated ``head<TAB>relation<TAB>tail`` lines (by name; ``id:`` before an end gives
    it by id); blank lines and ``#`` comments are skipped.

    Raises:
        EditRejected: for a line without exactly three fields, naming the file and line.
    """
    edits, problems = [], []
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        parts = line.split("\t")
        if len(parts) != 3:
            problems.append(Problem(None, f"{source}:{n}: {line!r}", "malformed",
                                    f"the line has {len(parts)} tab-separated fields, expected 3 "
                                    "(head, relation, tail). Fix: separate them with tabs"))
            continue
        h, rel, t = (p.strip() for p in parts)
        edits.append({"op": op, "head": _tsv_ref(h), "relation": rel, "tail": _tsv_ref(t)})
    if problems:
        raise EditRejected(problems)
    return edits


def _tsv_ref(text: str) -> str | dict:
    return {"id": text[3:]} if text.startswith("id:") else text


def affected(records: Sequence[EditRecord]) -> set[IdTriple]:
    """Every triple that ``records`` deleted (what memories resting on them must drop)."""
    return {t for rec in records for t in rec.deletes}
