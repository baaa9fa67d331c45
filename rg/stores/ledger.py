"""A per-question ledger of the queries a store sent: what, how many rows, how long, how it ended."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class QueryRecord:
    """One query (with its retries).

    Attributes:
        question: The question id active when it ran (None outside ``store.question(...)``).
        kind: What it asked, e.g. ``incident_out``, ``step_in``, ``name_lookup``.
        bindings: Ids or literals in its ``VALUES`` block.
        rows: Result rows (0 on failure).
        seconds: Wall time including retries and backoff.
        attempts: HTTP attempts made (1 when the first succeeded).
        error: None on success, else the failure reason (``unreachable``, ``timeout``,
            ``http_503``, ``bad_query``, ``truncated``).
    """

    question: str | None
    kind: str
    bindings: int
    rows: int
    seconds: float
    attempts: int
    error: str | None


@dataclass
class QueryLedger:
    """Every :class:`QueryRecord` of a store, in order."""

    records: list[QueryRecord] = field(default_factory=list)

    def add(self, record: QueryRecord) -> None:
        self.records.append(record)

    def for_question(self, question: str) -> list[QueryRecord]:
        return [r for r in self.records if r.question == question]

    def clear(self) -> None:
        self.records.clear()

    def summary(self) -> dict[str, Any]:
        """Totals per question: queries, rows, seconds, retries and errors by reason."""
        per: dict[str | None, dict[str, Any]] = defaultdict(
            lambda: {"queries": 0, "rows": 0, "seconds": 0.0, "retries": 0, "errors": {}})
        for r in self.records:
            s = per[r.question]
            s["queries"] += 1
            s["rows"] += r.rows
            s["seconds"] += r.seconds
            s["retries"] += r.attempts - 1
            if r.error:
                s["errors"][r.error] = s["errors"].get(r.error, 0) + 1
        return {str(k): v for k, v in per.items()}

    def to_rows(self) -> list[dict[str, Any]]:
        return [asdict(r) for r in self.records]
