"""Per-question subgraphs cut from a global KG, written as resumable RoG-schema parquet shards.

A question file is split into shards of consecutive lines. Each shard becomes one parquet file
of :class:`~rg.data.sample.Sample` rows plus a ``.stats.json`` file written after it (both
fsynced, then renamed into place). A shard is done only when its stats file exists, its parquet
footer reads and holds the ``built`` rows the stats recorded (:mod:`rg.run.integrity`); any
other shard is planned again, with the reason, which is what makes the build resumable and
self-repairing. Lines that cannot
become a Sample (malformed, topic entity absent from the KG, no hop count) are counted by reason
in the stats, never dropped silently. This module is Ray-free; :mod:`rg.jobs.build_subgraphs` runs it
on Ray Data.

Cut through a KG store (:mod:`rg.subgraphs.store`), a question whose store query failed for a
transient reason (server down, timeout, 5xx; after the store's bounded retries) is counted under
``store_<reason>`` and as *unfinished*: the shard is written, so nothing else is lost, but it is
not trusted as finished, and the next run builds it again. After
:data:`STORE_FAILURES_IN_A_ROW` such failures in a row the rest of the shard is marked the same way
without asking the store, so a build against a stopped server ends in bounded time.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

from rg.data.records import BadRow
from rg.data.rog import write_rog_parquet
from rg.data.sample import Question, Sample
from rg.graph import KnowledgeGraph
from rg.run.integrity import check_parquet, write_json_atomic
from rg.stores.base import KGStore, StoreError
from rg.subgraphs.cut import Built, SubgraphConfig, Unbuildable, build_sample
from rg.subgraphs.store import build_store_sample

MAX_EXAMPLES = 5
"""Bad-row descriptions kept per shard and reason (counts are always complete)."""

STORE_FAILURES_IN_A_ROW = 3
"""Transient store failures in a row after which a shard's remaining questions are not tried."""


@dataclass
class ShardStats:
    """Counts for one shard (or, merged, for a whole question file)."""

    source: str
    shards: int = 0
    lines: int = 0
    built: int = 0
    covered: int = 0
    covered_uncapped: int = 0
    truncated: int = 0
    triples_total: int = 0
    triples_max: int = 0
    unfinished: int = 0
    bad: dict[str, int] = field(default_factory=dict)
    bad_examples: list[str] = field(default_factory=list)

    def add_bad(self, row: BadRow) -> None:
        self.bad[row.reason] = self.bad.get(row.reason, 0) + 1
        if self.bad[row.reason] <= MAX_EXAMPLES:
            self.bad_examples.append(row.describe())

    def add_built(self, built: Built) -> None:
        n = len(built.sample.triples)
        self.built += 1
        self.covered += built.covered
        self.covered_uncapped += built.covered_uncapped
        self.truncated += built.truncated
        self.triples_total += n
        self.triples_max = max(self.triples_max, n)

    def merge(self, other: "ShardStats") -> "ShardStats":
        bad = Counter(self.bad)
        bad.update(other.bad)
        return ShardStats(
            source=self.source,
            shards=self.shards + other.shards,
            lines=self.lines + other.lines,
            built=self.built + other.built,
            covered=self.covered + other.covered,
            covered_uncapped=self.covered_uncapped + other.covered_uncapped,
            truncated=self.truncated + other.truncated,
            triples_total=self.triples_total + other.triples_total,
            triples_max=max(self.triples_max, other.triples_max),
            unfinished=self.unfinished + other.unfinished,
            bad=dict(sorted(bad.items())),
            bad_examples=(self.bad_examples + other.bad_examples)[: 4 * MAX_EXAMPLES],
        )

    def summary(self) -> dict[str, Any]:
        """JSON-ready totals with derived rates."""
        out = asdict(self)
        out["bad_total"] = sum(self.bad.values())
        out["coverage"] = self.covered / self.built if self.built else None
        out["coverage_of_lines"] = self.covered / self.lines if self.lines else None
        out["cap_cost"] = self.covered_uncapped - self.covered
        out["mean_triples"] = self.triples_total / self.built if self.built else None
        return out


@dataclass(frozen=True)
class ShardTask:
    """One shard to build: the items of a run of question-file lines and where it goes."""

    source: str
    index: int
    parquet_path: str
    items: tuple[Question | BadRow, ...]
    rebuild_reason: str | None = None
    """Why an existing shard is built again (it was damaged); None for a new shard. Not sent to actors."""

    def to_json(self) -> str:
        rows = [
            {"bad": asdict(i)} if isinstance(i, BadRow) else {"question": i.to_record()} for i in self.items
        ]
        return json.dumps(
            {"source": self.source, "index": self.index, "parquet_path": self.parquet_path, "items": rows}
        )

    @classmethod
    def from_json(cls, text: str) -> "ShardTask":
        data = json.loads(text)
        items = tuple(
            BadRow(**row["bad"]) if "bad" in row else Question.from_record(row["question"])
            for row in data["items"]
        )
        return cls(data["source"], data["index"], data["parquet_path"], items)


def buildable_samples(kg: KnowledgeGraph, questions: Sequence[Question], config: SubgraphConfig) -> list[Sample]:
    """The samples of the questions whose subgraph can be cut, in question order (the unbuildable
    ones are left out: small in-process sets for benches and tests; the build job reports them)."""
    samples = []
    for question in questions:
        try:
            samples.append(build_sample(kg, question, config).sample)
        except Unbuildable:
            continue
    return samples


def shard_paths(out_dir: str | Path, source: str, index: int) -> tuple[Path, Path]:
    """``(parquet, stats)`` paths of shard ``index`` of question source ``source``."""
    base = Path(out_dir) / source / f"shard-{index:05d}"
    return base.with_suffix(".parquet"), base.with_suffix(".stats.json")


def plan_shards(
    source: str, items: Sequence[Question | BadRow], shard_size: int, out_dir: str | Path
) -> tuple[list[ShardTask], list[ShardStats]]:
    """Split a question file's items into shards; return the pending tasks and the stats of
    shards already done (read back from their stats files, for the final report).

    A shard is done only when :func:`finished_shard` trusts it; a shard whose files exist but
    fail the check is pending again with its ``rebuild_reason`` set.
    """
    if shard_size < 1:
        raise ValueError(f"shard_size must be >= 1, got {shard_size}")
    pending, done = [], []
    for index, start in enumerate(range(0, len(items), shard_size)):
        parquet, stats_path = shard_paths(out_dir, source, index)
        stats, reason = finished_shard(parquet, stats_path)
        if stats is not None:
            done.append(stats)
        else:
            pending.append(ShardTask(source, index, str(parquet), tuple(items[start : start + shard_size]), reason))
    return pending, done


def finished_shard(parquet: Path, stats_path: Path) -> tuple[ShardStats | None, str | None]:
    """``(stats, None)`` for a shard that can be trusted, else ``(None, why it is damaged)``.

    ``(None, None)`` means the shard was never started (neither file exists).
    """
    if not parquet.exists() and not stats_path.exists():
        return None, None
    stats = None
    if stats_path.is_file():
        try:
            stats = ShardStats(**json.loads(stats_path.read_text()))
        except (ValueError, TypeError) as err:
            return None, f"unreadable stats file {stats_path.name} ({err})"
    problem = check_parquet(parquet, None if stats is None else stats.built)
    if problem is not None:
        return None, problem
    if stats is not None and stats.unfinished:
        failed = ", ".join(f"{k} × {n}" for k, n in stats.bad.items() if k.startswith("store_"))
        return None, f"{stats.unfinished} questions were not built on store errors ({failed}); built again"
    return stats, None


def run_shard(kg: KnowledgeGraph | KGStore, task: ShardTask, config: SubgraphConfig) -> ShardStats:
    """Build every question of ``task`` from ``kg`` (the in-memory graph or a KG store), write its
    parquet then its stats file (both durable and atomic)."""
    build = build_sample if isinstance(kg, KnowledgeGraph) else build_store_sample
    stats = ShardStats(source=task.source, shards=1, lines=len(task.items))
    samples = []
    failing: StoreError | None = None
    in_a_row = 0
    for item in task.items:
        if isinstance(item, BadRow):
            stats.add_bad(item)
            continue
        if in_a_row >= STORE_FAILURES_IN_A_ROW and failing is not None:
            stats.unfinished += 1
            stats.add_bad(BadRow(item.id, 0, f"store_{failing.reason}",  # type: ignore[arg-type]
                                 f"{item.id}: not tried after {in_a_row} store failures in a row ({failing})"))
            continue
        try:
            built = build(kg, item, config)  # type: ignore[arg-type]
        except Unbuildable as err:
            stats.add_bad(BadRow(item.id, 0, err.reason, err.detail))  # type: ignore[arg-type]
            continue
        except StoreError as err:
            if not err.transient:
                stats.add_bad(BadRow(item.id, 0, f"store_{err.reason}", f"{item.id}: {err}"))  # type: ignore[arg-type]
                continue
            failing, in_a_row = err, in_a_row + 1
            stats.unfinished += 1
            stats.add_bad(BadRow(item.id, 0, f"store_{err.reason}", f"{item.id}: {err}"))  # type: ignore[arg-type]
            continue
        in_a_row = 0
        stats.add_built(built)
        samples.append(built.sample)
    parquet = Path(task.parquet_path)
    parquet.parent.mkdir(parents=True, exist_ok=True)
    stats_path = parquet.with_suffix(".stats.json")
    stats_path.unlink(missing_ok=True)  # a rebuilt shard is untrusted until its new stats land
    write_rog_parquet(samples, parquet)
    write_json_atomic(asdict(stats), stats_path)
    return stats
