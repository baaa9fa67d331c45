"""Read the WebQSP side files: the canonical split and the evidence labels.

The files live under ``shared/data/splits`` (``webqsp_split.json.gz``) and
``shared/data/webqsp-evidence`` (``webqsp_test_labels.jsonl.gz``); the questions themselves are
RoG-schema files read with ``rg.data.rog``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from rg.data.records import BadRow, BadRowError, iter_text_lines, read_json_file


@dataclass(frozen=True)
class WebQSPLabels:
    """Evidence labels of one WebQSP question (a row of ``webqsp_test_labels.jsonl.gz``).

    Attributes:
        id: The question id (``WebQTest-N``), as in the RoG-schema file.
        evidence_triple_idx: Indices into the question's ``graph`` of the triples GPT-4o judged
            necessary (SubgraphRAG's released labels).
        answer_entity_in_graph: Whether an answer entity occurs in the question's graph.
        inferential_chains: Gold relation chains of the official WebQSP parses (may be empty).
    """

    id: str
    evidence_triple_idx: tuple[int, ...]
    answer_entity_in_graph: bool
    inferential_chains: tuple[tuple[str, ...], ...]


def read_webqsp_labels(path: str | Path) -> Iterator[WebQSPLabels]:
    """Yield the evidence labels of each question in a WebQSP labels JSON Lines file.

    Args:
        path: ``webqsp-evidence/webqsp_test_labels.jsonl.gz`` or a file of the same form.

    Raises:
        BadRowError: at the first line that is not a valid labels row.
    """
    source = str(path)
    for index, text in iter_text_lines(path):
        if isinstance(text, BadRow):
            raise BadRowError(text)
        if not text.strip():
            continue
        try:
            row = json.loads(text)
        except json.JSONDecodeError as err:
            raise BadRowError(BadRow(source, index, "malformed_json", str(err))) from err
        yield _labels_from_row(row, source, index)


def _labels_from_row(row: Any, source: str, index: int) -> WebQSPLabels:
    if not isinstance(row, dict):
        raise BadRowError(BadRow(source, index, "not_an_object", "expected a JSON object"))
    fields = ("id", "evidence_triple_idx", "answer_entity_in_graph", "inferential_chains")
    missing = [f for f in fields if f not in row]
    if missing:
        raise BadRowError(BadRow(source, index, "missing_column", f"lacks {missing}"))
    indices, chains = row["evidence_triple_idx"], row["inferential_chains"]
    valid = (
        isinstance(row["id"], str)
        and isinstance(indices, list)
        and all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in indices)
        and isinstance(row["answer_entity_in_graph"], bool)
        and isinstance(chains, list)
        and all(isinstance(c, list) and all(isinstance(r, str) for r in c) for c in chains)
    )
    if not valid:
        raise BadRowError(BadRow(source, index, "bad_value", f"unexpected value types in {row!r}"))
    return WebQSPLabels(
        id=row["id"],
        evidence_triple_idx=tuple(indices),
        answer_entity_in_graph=row["answer_entity_in_graph"],
        inferential_chains=tuple(tuple(c) for c in chains),
    )


def read_webqsp_split(path: str | Path) -> dict[str, tuple[str, ...]]:
    """Return the canonical WebQSP split: split name (``train``/``val``/``test``) → question ids.

    Args:
        path: ``splits/webqsp_split.json.gz``: ``{"unit": "id", "splits": {name: [ids]}, ...}``.

    Raises:
        ValueError: if the file is not of that form or an id is in two splits.
    """
    data = read_json_file(path)
    if not isinstance(data, dict) or not isinstance(data.get("splits"), dict):
        raise ValueError(f"{path}: expected a JSON object with a 'splits' object")
    if data.get("unit", "id") != "id":
        raise ValueError(f"{path}: split unit is {data['unit']!r}, expected 'id'")
    result: dict[str, tuple[str, ...]] = {}
    seen: dict[str, str] = {}
    for name, ids in data["splits"].items():
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            raise ValueError(f"{path}: split {name!r} must be a list of id strings")
        for question_id in ids:
            if question_id in seen:
                raise ValueError(
                    f"{path}: id {question_id!r} is in both {seen[question_id]!r} and {name!r}"
                )
            seen[question_id] = name
        result[name] = tuple(ids)
    return result
