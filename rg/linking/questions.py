"""Replace a question file's topic entities with linked ones; record every failure with its reason."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any, Sequence

from rg.data.records import BadRow
from rg.data.sample import Question
from rg.linking.linker import EntityLinker

LINKING_FILE = "linking.jsonl"
"""Per-question linking record written beside a source's shards."""


def link_questions(items: Sequence[Question | BadRow], linker: EntityLinker
                   ) -> tuple[list[Question | BadRow], list[dict[str, Any]]]:
    """Link each question from its text alone and put the linked entities in ``q_entities``.

    Only ``question.question`` reaches the linker (never the answers or the dataset's topic
    entities). A question that fails to link becomes a BadRow ``link_ambiguous`` or
    ``link_not_found`` whose detail names the mentions and candidates; BadRows pass through.

    Returns:
        The items in order, and one JSON-ready record per question (id, dataset topics, linked
        entities, failure, detail, mentions) for the linking report.
    """
    questions = [i for i in items if isinstance(i, Question)]
    results = iter(linker.link_many([q.question for q in questions]))
    out: list[Question | BadRow] = []
    records: list[dict[str, Any]] = []
    for item in items:
        if isinstance(item, BadRow):
            out.append(item)
            continue
        result = next(results)
        records.append({"id": item.id, "dataset_topics": list(item.q_entities), "linked": list(result.entities),
                        "failure": result.failure, "detail": result.detail,
                        "mentions": [[m.text, [c.entity_id for c in m.candidates], m.candidates[0].match]
                                     for m in result.mentions]})
        if result.failure is not None:
            reason = "link_ambiguous" if result.failure == "ambiguous" else "link_not_found"
            out.append(BadRow(item.id, 0, reason, f"{item.question!r}: {result.detail}"))
        else:
            out.append(replace(item, q_entities=result.entities))
    return out, records


def link_summary(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Counts of a linking report: linked, failures by reason, and agreement with the dataset's topics."""
    failures: dict[str, int] = {}
    agree = 0
    for r in records:
        if r["failure"]:
            failures[r["failure"]] = failures.get(r["failure"], 0) + 1
        elif set(r["linked"]) == set(r["dataset_topics"]):
            agree += 1
    linked = len(records) - sum(failures.values())
    return {"questions": len(records), "linked": linked, "failures": dict(sorted(failures.items())),
            "same_as_dataset_topics": agree, "differs_from_dataset_topics": linked - agree}


def write_link_records(records: Sequence[dict[str, Any]], path: str | Path) -> None:
    """Write the records as JSON lines (atomically)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".part")
    partial.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    partial.replace(path)
