"""The refine job's labels folder: verified part files, resume state and fallback retries.

The refine job writes every finished batch as one labels part (``part-<hex>.parquet``) plus a
stats file (``part-<hex>.stats.json``: rows, LLM calls whose answers the part holds, run id),
each fsynced and renamed into place (:mod:`rg.run.integrity`). On resume a part is trusted
only when its footer reads with the row count its stats recorded; any other part is moved
aside as ``.damaged-part-<hex>.parquet`` (hidden from readers) and its questions are redone.

Questions that fell back to their weak labels for a *transient* reason (the endpoint was down,
timed out, rate limited or answered 5xx) are asked again on the next run by default: their
rows are taken out of the parts (rewritten without them) before the run starts.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator, Literal

from rg.run.integrity import DamagedFileError, check_parquet, parquet_rows, write_json_atomic
from rg.llm.client import RETRYABLE
from rg.data.labels import Labels, iter_labels, write_labels

RetryFallbacks = Literal["transient", "all", "none"]
TRANSIENT_FALLBACKS: frozenset[str] = frozenset(f"llm_{reason}" for reason in RETRYABLE)
"""Fallback reasons of calls that failed for a passing reason (connection, timeout, 429, 5xx)."""

DAMAGED_PREFIX = ".damaged-"


@dataclass(frozen=True)
class Part:
    """One trusted labels part file and its stats."""

    path: Path
    rows: int
    llm_calls: int
    run: str


def stats_path(part: Path) -> Path:
    """The stats file of labels part ``part``."""
    return part.with_suffix(".stats.json")


def write_part(folder: Path, labels: list[Labels], llm_calls: int, run: str) -> Path:
    """Write a labels part and then its stats file; return the part's path."""
    path = folder / f"part-{uuid.uuid4().hex[:12]}.parquet"
    rows = write_labels(labels, path)
    write_json_atomic({"rows": rows, "llm_calls": llm_calls, "run": run}, stats_path(path))
    return path


def scan_parts(folder: Path) -> tuple[list[Part], list[dict[str, str]]]:
    """The trusted parts of ``folder``, and the damaged ones (moved aside) with their reasons.

    A part whose footer does not read, or whose row count differs from its stats, is damaged:
    it is renamed to ``.damaged-<name>`` so no reader sees them, and its questions count as not
    done. A part without a stats file (written by an rg without them, or killed between the two
    renames: the parquet itself was fsynced and renamed whole) is adopted when its footer
    reads: its stats are written from the footer, with no LLM calls booked to it.
    """
    parts, damaged = [], []
    for path in sorted(folder.glob("part-*.parquet")):
        stats = None
        if stats_path(path).is_file():
            try:
                stats = json.loads(stats_path(path).read_text())
            except ValueError:
                stats = None
        if stats is None:
            stats = _adopt(path)
        # without stats, -1 rows: the check then reports why the footer does not read
        problem = check_parquet(path, -1 if stats is None else int(stats.get("rows", -1)))
        if problem is None:
            assert stats is not None
            parts.append(Part(path, int(stats["rows"]), int(stats.get("llm_calls", 0)), str(stats.get("run", ""))))
            continue
        path.rename(path.with_name(DAMAGED_PREFIX + path.name))
        stats_path(path).unlink(missing_ok=True)
        damaged.append({"part": str(path), "reason": problem})
    return parts, damaged


def _adopt(path: Path) -> dict | None:
    """Stats for a part without them, from its footer; None when the footer does not read."""
    try:
        rows = parquet_rows(path)
    except DamagedFileError:
        return None
    stats = {"rows": rows, "llm_calls": 0, "run": "adopted"}
    write_json_atomic(stats, stats_path(path))
    return stats


def retry_ids(parts: Iterable[Part], policy: RetryFallbacks) -> set[str]:
    """Ids of weak-fallback rows to ask again under ``policy``."""
    if policy == "none":
        return set()
    out = set()
    for part in parts:
        for row in iter_labels(part.path):
            if row.source == "weak" and (policy == "all" or row.fallback_reason in TRANSIENT_FALLBACKS):
                out.add(row.id)
    return out


def remove_ids(parts: list[Part], ids: set[str]) -> list[Part]:
    """Rewrite the parts that hold any of ``ids`` without those rows; return the parts now present.

    The new part is written (with stats) before the old one is deleted, so a kill in between
    leaves identical duplicate rows, never a lost one.
    """
    if not ids:
        return parts
    kept = []
    for part in parts:
        rows = list(iter_labels(part.path))
        remaining = [r for r in rows if r.id not in ids]
        if len(remaining) == len(rows):
            kept.append(part)
            continue
        if remaining:
            new = write_part(part.path.parent, remaining, part.llm_calls, part.run)
            kept.append(Part(new, len(remaining), part.llm_calls, part.run))
        else:  # keep the record of calls spent on it
            write_json_atomic({"rows": 0, "llm_calls": part.llm_calls, "run": part.run},
                              part.path.with_name(f"calls-{part.path.stem}.json"))
        part.path.unlink()
        stats_path(part.path).unlink(missing_ok=True)
    return kept


def written_calls(folder: Path) -> int:
    """LLM calls whose answers reached a trusted part (or a part later rewritten for a retry)."""
    total = 0
    for path in list(folder.glob("part-*.stats.json")) + list(folder.glob("calls-*.json")):
        try:
            total += int(json.loads(path.read_text()).get("llm_calls", 0))
        except ValueError:
            continue
    return total


def iter_part_labels(parts: Iterable[Part]) -> Iterator[Labels]:
    """Every row of the given parts."""
    for part in parts:
        yield from iter_labels(part.path)
