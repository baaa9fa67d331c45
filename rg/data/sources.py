"""Readers for the global-KG inputs of the subgraph builder: KB files and question files.

KB formats: ``metaqa`` (``head|relation|tail``) and ``tsv`` (``head<TAB>relation<TAB>tail``,
used for Freebase-style names that may contain ``|``). Question formats: ``metaqa``
(``question with [topic]<TAB>a1|a2``) and ``jsonl`` (one :meth:`Question.to_record` per line).
Every reader yields bad lines as :class:`~rg.data.records.BadRow` instead of dropping them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator, Literal

from pydantic import Field

from rg.config import Config
from rg.data.metaqa import read_metaqa_kb_rows, read_metaqa_questions
from rg.run.paths import resolve_data_path
from rg.data.records import BadRow, iter_text_lines
from rg.data.sample import Question, Triple
from rg.graph import KnowledgeGraph

KBFormat = Literal["metaqa", "tsv"]
QuestionFormat = Literal["metaqa", "jsonl"]


class KBSource(Config):
    """The global KG file."""

    path: str = Field(description="KB file; `@shared/...` is relative to the shared data folder.")
    format: KBFormat = Field(description="`metaqa`: head|rel|tail; `tsv`: tab-separated.")


def load_kb(source: KBSource) -> tuple[KnowledgeGraph, dict[str, int]]:
    """The KB of ``source`` as a graph (triple ids in file order), with bad lines counted by reason.

    Raises:
        FileNotFoundError: if the file does not exist (the message names the resolved path).
    """
    path = resolve_data_path(source.path)
    if not path.exists():
        raise FileNotFoundError(f"KB file {path} (from {source.path!r}) does not exist; check the `kb.path` setting")
    triples, bad = [], {}
    for _, item in read_kb_rows(path, source.format):
        if isinstance(item, BadRow):
            bad[item.reason] = bad.get(item.reason, 0) + 1
        else:
            triples.append(item)
    return KnowledgeGraph.from_triples(triples), bad


def read_kb_rows(path: str | Path, fmt: KBFormat) -> Iterator[tuple[int, Triple | BadRow]]:
    """Yield ``(line index, Triple | BadRow)`` for a KB file in format ``fmt``."""
    if fmt == "metaqa":
        yield from read_metaqa_kb_rows(path)
        return
    source = str(path)
    for index, text in iter_text_lines(path):
        if isinstance(text, BadRow):
            yield index, text
        elif not text.strip():
            yield index, BadRow(source, index, "blank_line", "empty line in a KB file")
        else:
            parts = text.split("\t")
            if len(parts) != 3:
                yield index, BadRow(source, index, "wrong_field_count", f"{text!r} is not head<TAB>relation<TAB>tail")
            elif not all(parts):
                yield index, BadRow(source, index, "empty_field", f"{text!r} has an empty part")
            else:
                yield index, (parts[0], parts[1], parts[2])


def read_question_rows(
    path: str | Path, fmt: QuestionFormat, hops: int | None = None, split_name: str = "test"
) -> Iterator[tuple[int, Question | BadRow]]:
    """Yield ``(line index, Question | BadRow)`` for a question file.

    Args:
        path: The file.
        fmt: ``metaqa`` or ``jsonl``.
        hops: Hop count of a MetaQA file (required for ``metaqa``).
        split_name: Split name used in MetaQA ids.
    """
    if fmt == "metaqa":
        if hops is None:
            raise ValueError(f"{path}: MetaQA question files need `hops` (1, 2 or 3)")
        yield from enumerate(read_metaqa_questions(path, hops, split_name))  # one item per line
        return
    source = str(path)
    for index, text in iter_text_lines(path):
        if isinstance(text, BadRow):
            yield index, text
            continue
        if not text.strip():
            yield index, BadRow(source, index, "blank_line", "empty line in a question file")
            continue
        try:
            row = json.loads(text)
        except json.JSONDecodeError as err:
            yield index, BadRow(source, index, "malformed_json", str(err))
            continue
        if not isinstance(row, dict):
            yield index, BadRow(source, index, "not_an_object", f"line holds a {type(row).__name__}")
            continue
        try:
            question = Question.from_record(row)
        except ValueError as err:
            yield index, BadRow(source, index, "missing_column", str(err))
            continue
        if not question.q_entities:
            yield index, BadRow(source, index, "no_topic", f"question {question.id!r} has no q_entity")
        elif not question.answers:
            yield index, BadRow(source, index, "empty_answers", f"question {question.id!r} has no answer")
        else:
            yield index, question
