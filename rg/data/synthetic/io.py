"""Write and read a synthetic KG folder: ``kg.txt`` (triples) and ``questions.jsonl``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

from rg.data.sample import Question, Triple

KG_FILE = "kg.txt"
QUESTIONS_FILE = "questions.jsonl"


def write_kg_folder(
    folder: str | Path, triples: Sequence[Triple], questions: Sequence[Question]
) -> None:
    """Write ``kg.txt`` and ``questions.jsonl`` into ``folder``.

    ``kg.txt`` holds one ``head<TAB>relation<TAB>tail`` line per triple (tabs, because Freebase
    names may contain ``|``); ``questions.jsonl`` one JSON object per question with the keys
    ``id, question, answer, q_entity, hops, relation_paths``.

    Args:
        folder: Destination; created if needed. Existing files are replaced.
        triples: The KG.
        questions: The questions.

    Raises:
        ValueError: if an entity or relation contains a tab or a line break.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    lines = []
    for triple in triples:
        if any(c in part for part in triple for c in "\t\n\r"):
            raise ValueError(f"triple {triple!r} holds a tab or line break; kg.txt cannot store it")
        lines.append("\t".join(triple) + "\n")
    (folder / KG_FILE).write_text("".join(lines), encoding="utf-8", newline="\n")
    records = "".join(json.dumps(q.to_record(), ensure_ascii=False) + "\n" for q in questions)
    (folder / QUESTIONS_FILE).write_text(records, encoding="utf-8", newline="\n")


def read_kg_folder(folder: str | Path) -> tuple[tuple[Triple, ...], tuple[Question, ...]]:
    """Read a folder written by :func:`write_kg_folder` back exactly.

    Args:
        folder: Folder holding ``kg.txt`` and ``questions.jsonl``.

    Returns:
        The triples and the questions, in file order.

    Raises:
        FileNotFoundError: if a file is missing.
        ValueError: if a line is malformed (the message gives file and line number).
    """
    folder = Path(folder)
    triples = []
    for where, line in _lines(folder / KG_FILE):
        parts = line.split("\t")
        if len(parts) != 3:
            raise ValueError(f"{where}: expected head<TAB>relation<TAB>tail, got {line!r}")
        triples.append((parts[0], parts[1], parts[2]))
    questions = []
    for where, line in _lines(folder / QUESTIONS_FILE):
        try:
            questions.append(Question.from_record(json.loads(line)))
        except (TypeError, ValueError) as err:  # includes json.JSONDecodeError
            raise ValueError(f"{where}: not a question record ({err!r})") from None
    return tuple(triples), tuple(questions)


def _lines(path: Path) -> list[tuple[str, str]]:
    """Non-empty lines of ``path`` split on ``\\n`` only, each with ``file:line`` for errors."""
    text = path.read_text(encoding="utf-8")
    return [(f"{path}:{n}", line) for n, line in enumerate(text.split("\n"), start=1) if line]
