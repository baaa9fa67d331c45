"""Typed records for questions and their subgraphs (the RoG dataset schema).

The RoG schema (Hugging Face ``rmanluo/RoG-webqsp`` / ``RoG-cwq``) stores one row per question
with the columns ``id, question, answer, q_entity, a_entity, graph, choices``. ``Sample`` is the
in-memory form of such a row with descriptive field names; ``to_rog`` / ``from_rog`` convert.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

Triple = tuple[str, str, str]

ROG_COLUMNS = ("id", "question", "answer", "q_entity", "a_entity", "graph", "choices")


@dataclass(frozen=True)
class Question:
    """A question without its subgraph, as read from a question file.

    Attributes:
        id: Stable identifier (unique within a dataset).
        question: Natural-language question text.
        answers: Gold answer strings (entity names or literals).
        q_entities: Topic entities named in the question.
        hops: Number of reasoning hops when the dataset states it (MetaQA, synthetic), else None.
        relation_paths: Gold relation paths when known (synthetic data, WebQSP parses); a
            relation followed from tail to head is written ``rel^-1``.
    """

    id: str
    question: str
    answers: tuple[str, ...]
    q_entities: tuple[str, ...]
    hops: int | None = None
    relation_paths: tuple[tuple[str, ...], ...] = ()

    def to_record(self) -> dict[str, Any]:
        """The question-file (jsonl) form: ``id, question, answer, q_entity, hops, relation_paths``."""
        return {
            "id": self.id,
            "question": self.question,
            "answer": list(self.answers),
            "q_entity": list(self.q_entities),
            "hops": self.hops,
            "relation_paths": [list(p) for p in self.relation_paths],
        }

    @classmethod
    def from_record(cls, row: Mapping[str, Any]) -> "Question":
        """Inverse of :meth:`to_record`; ``hops`` and ``relation_paths`` are optional.

        Raises:
            ValueError: naming the missing or ill-typed key.
        """
        for key in ("id", "question", "answer", "q_entity"):
            if key not in row:
                raise ValueError(f"question record lacks key {key!r}")
        hops = row.get("hops")
        if hops is not None and (isinstance(hops, bool) or not isinstance(hops, int)):
            raise ValueError(f"question record {row['id']!r}: hops must be an integer, got {hops!r}")
        return cls(
            id=str(row["id"]),
            question=str(row["question"]),
            answers=_strs(row["answer"]),
            q_entities=_strs(row["q_entity"]),
            hops=hops,
            relation_paths=tuple(_strs(p) for p in (row.get("relation_paths") or ())),
        )


@dataclass(frozen=True)
class Sample:
    """One question with its subgraph (the RoG schema).

    Attributes:
        id: Stable identifier.
        question: Natural-language question text.
        answers: Gold answer strings (RoG column ``answer``).
        q_entities: Topic entities (RoG column ``q_entity``).
        a_entities: Answer entities as they appear in the KG (RoG column ``a_entity``).
        triples: The question's subgraph as ``(head, relation, tail)`` string triples (RoG
            column ``graph``). Parallel relations between one pair are distinct triples.
        choices: Answer choices for multiple-choice datasets (RoG column ``choices``).
        hops: Number of reasoning hops when known.
        relation_paths: Gold relation paths when known (``rel^-1`` marks a reversed step).
    """

    id: str
    question: str
    answers: tuple[str, ...]
    q_entities: tuple[str, ...]
    a_entities: tuple[str, ...]
    triples: tuple[Triple, ...]
    choices: tuple[str, ...] = ()
    hops: int | None = None
    relation_paths: tuple[tuple[str, ...], ...] = field(default=())

    def to_rog(self) -> dict[str, Any]:
        """Return the row in the RoG schema plus rg's optional ``hops``/``relation_paths``."""
        return {
            "id": self.id,
            "question": self.question,
            "answer": list(self.answers),
            "q_entity": list(self.q_entities),
            "a_entity": list(self.a_entities),
            "graph": [list(t) for t in self.triples],
            "choices": list(self.choices),
            "hops": self.hops,
            "relation_paths": [list(p) for p in self.relation_paths],
        }

    @classmethod
    def from_rog(cls, row: Mapping[str, Any]) -> "Sample":
        """Build a Sample from a RoG-schema row (extra rg columns are optional).

        Raises:
            ValueError: if a required RoG column is missing or a triple does not have 3 parts.
        """
        missing = [c for c in ROG_COLUMNS if c not in row and c != "choices"]
        if missing:
            raise ValueError(
                f"row {row.get('id', '?')!r} lacks RoG column(s) {missing}; a RoG row needs "
                f"{list(ROG_COLUMNS)}"
            )
        triples = []
        for t in row["graph"] if row["graph"] is not None else ():
            t = list(t)
            if len(t) != 3:
                raise ValueError(
                    f"row {row['id']!r}: graph entry {t!r} is not a (head, relation, tail) triple"
                )
            triples.append((str(t[0]), str(t[1]), str(t[2])))
        hops = row.get("hops")
        return cls(
            id=str(row["id"]),
            question=str(row["question"]),
            answers=_strs(row["answer"]),
            q_entities=_strs(row["q_entity"]),
            a_entities=_strs(row["a_entity"]),
            triples=tuple(triples),
            choices=_strs(row.get("choices")),
            hops=None if hops is None or hops != hops else int(hops),
            relation_paths=tuple(_strs(p) for p in (row.get("relation_paths") or ())),
        )


def _strs(values: Any) -> tuple[str, ...]:
    if values is None:
        return ()
    if isinstance(values, str):
        return (values,)
    return tuple(str(v) for v in values)
