"""The per-question supervision record (:class:`Labels`) and its parquet files: the contract between
the stage that computes labels (:mod:`rg.supervision`, run by ``jobs.refine`` and the train jobs'
weak-label step) and the trainers, which only read them.

A :class:`Labels` row says which triples of a question's subgraph are positive, which paths
they came from, and how they were obtained: ``source="refined"`` when a path selector (an LLM
prompt or a local algorithm) chose them from the candidate pool (ReG, Zou et al. 2025, stage
S(I)), ``source="weak"`` when the selector failed and the weak shortest-path labels were kept,
with the reason. Every question gets a row; none is dropped silently.

Files are written atomically (a temporary file in the same folder, then ``os.replace``) with an
explicit pyarrow schema; :func:`read_labels` reads one file or a folder of part files.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path as FilePath
from typing import Any, Collection, Iterable, Iterator, Literal, Mapping, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from rg.run.integrity import DamagedFileError
from rg.data.records import write_parquet_atomic
from rg.graph.path import split_relation

LabelSource = Literal["refined", "weak"]
LABEL_SOURCES: tuple[LabelSource, ...] = ("refined", "weak")

LABELS_SCHEMA = pa.schema(
    [
        pa.field("id", pa.string(), nullable=False),
        pa.field("positive_triples", pa.list_(pa.int64()), nullable=False),
        pa.field("paths", pa.list_(pa.string()), nullable=False),
        pa.field("relation_paths", pa.list_(pa.list_(pa.string())), nullable=False),
        pa.field("source", pa.string(), nullable=False),
        pa.field("selector", pa.string(), nullable=False),
        pa.field("prompt_id", pa.string()),
        pa.field("fallback_reason", pa.string()),
        pa.field("prompt_tokens", pa.int64(), nullable=False),
        pa.field("completion_tokens", pa.int64(), nullable=False),
        pa.field("pool_before", pa.int64(), nullable=False),
        pa.field("pool_after", pa.int64(), nullable=False),
    ]
)
"""Columns of a labels parquet file, one row per question (``prompt_id`` and
``fallback_reason`` are nullable)."""


@dataclass(frozen=True)
class Labels:
    """Supervision of one question (DESIGN §3).

    Attributes:
        id: The question id (``Sample.id``).
        positive_triples: Indices into ``sample.triples`` of the positive triples, sorted, unique.
        paths: The positive paths rendered as ``h → [r] → t`` (one per grounding).
        relation_paths: The distinct relation chains of those paths, in first-seen order.
        source: ``refined`` when the selector's choice was used, ``weak`` when the weak labels
            were kept.
        selector: Name of the selector implementation (e.g. ``similarity:<encoder>``,
            ``llm:<model>``), also on weak rows, so a fallback names what failed.
        prompt_id: Id of the prompt template used, None for a local selector.
        fallback_reason: Why the weak labels were kept; None when refined.
        prompt_tokens: Prompt tokens spent on this question.
        completion_tokens: Completion tokens spent on this question.
        pool_before: Candidate paths before compression (``CandidatePool.size_before``).
        pool_after: Candidates after compression (``CandidatePool.size_after``).
    """

    id: str
    positive_triples: tuple[int, ...]
    paths: tuple[str, ...]
    relation_paths: tuple[tuple[str, ...], ...]
    source: LabelSource
    selector: str
    prompt_id: str | None = None
    fallback_reason: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    pool_before: int = 0
    pool_after: int = 0

    def __post_init__(self) -> None:
        if self.source not in LABEL_SOURCES:
            raise ValueError(
                f"labels {self.id!r}: source must be one of {LABEL_SOURCES}, got {self.source!r}"
            )
        if (self.source == "refined") != (self.fallback_reason is None):
            raise ValueError(
                f"labels {self.id!r}: fallback_reason must be None exactly when source is 'refined' "
                f"(got source={self.source!r}, fallback_reason={self.fallback_reason!r})"
            )

    def stale_positives(self, triples: Sequence[Sequence[str]]) -> list[int]:
        """Positives that cannot belong to the subgraph ``triples`` these labels are used with.

        Indices past the subgraph, and (when the row records relation paths) triples whose
        relation is on none of them: an index into a rebuilt subgraph (another cap or cut
        order) usually lands on an unrelated triple, and this catches it instead of training on it.
        """
        relations = {split_relation(step)[0] for path in self.relation_paths for step in path}
        return [
            i
            for i in self.positive_triples
            if not 0 <= i < len(triples) or (relations and triples[i][1] not in relations)
        ]

    def to_row(self) -> dict[str, Any]:
        """The row form (plain lists and scalars) matching :data:`LABELS_SCHEMA`."""
        return {
            "id": self.id,
            "positive_triples": list(self.positive_triples),
            "paths": list(self.paths),
            "relation_paths": [list(p) for p in self.relation_paths],
            "source": self.source,
            "selector": self.selector,
            "prompt_id": self.prompt_id,
            "fallback_reason": self.fallback_reason,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "pool_before": self.pool_before,
            "pool_after": self.pool_after,
        }

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> "Labels":
        """Inverse of :meth:`to_row`.

        Raises:
            ValueError: naming the missing columns or an invalid source.
        """
        missing = [name for name in LABELS_SCHEMA.names if name not in row]
        if missing:
            raise ValueError(f"labels row {row.get('id', '?')!r} lacks column(s) {missing}")
        return cls(
            id=str(row["id"]),
            positive_triples=tuple(int(t) for t in row["positive_triples"]),
            paths=tuple(str(p) for p in row["paths"]),
            relation_paths=tuple(tuple(str(r) for r in p) for p in row["relation_paths"]),
            source=row["source"],
            selector=str(row["selector"]),
            prompt_id=row["prompt_id"],
            fallback_reason=row["fallback_reason"],
            prompt_tokens=int(row["prompt_tokens"]),
            completion_tokens=int(row["completion_tokens"]),
            pool_before=int(row["pool_before"]),
            pool_after=int(row["pool_after"]),
        )


def write_labels(labels: Iterable[Labels], path: str | FilePath, batch_size: int = 4096) -> int:
    """Write labels to one parquet file atomically; return the number of rows.

    The file is written under a temporary name in the same folder and moved into place with
    ``os.replace``, so readers never see a partial file. Missing parent folders are created.

    Args:
        labels: Rows to write (consumed once, ``batch_size`` at a time).
        path: The parquet file to create or replace.
        batch_size: Rows per record batch.
    """
    return write_parquet_atomic((x.to_row() for x in labels), path, LABELS_SCHEMA, batch_size)


def iter_labels(path: str | FilePath) -> Iterator[Labels]:
    """Yield the labels in a parquet file, or in every ``*.parquet`` of a folder (sorted names).

    Files whose names start with ``.`` (temporary files of unfinished writes) are skipped.

    Raises:
        FileNotFoundError: if the path does not exist or a folder holds no parquet file.
        DamagedFileError: naming a file whose parquet footer does not read, and the fix.
        ValueError: if a file lacks a labels column.
    """
    for parquet in _label_files(path):
        for batch in parquet.iter_batches(columns=list(LABELS_SCHEMA.names)):
            for row in batch.to_pylist():
                yield Labels.from_row(row)


def label_ids(path: str | FilePath) -> set[str]:
    """The question ids that have a row in a labels file or folder, reading only the ``id`` column.

    Raises:
        As :func:`iter_labels`.
    """
    ids: set[str] = set()
    for parquet in _label_files(path):
        for batch in parquet.iter_batches(columns=["id"]):
            ids.update(batch.column("id").to_pylist())
    return ids


def _label_files(path: str | FilePath) -> Iterator[pq.ParquetFile]:
    """The label parquet files of ``path`` (a file, or a folder's ``*.parquet`` in sorted order), checked."""
    path = FilePath(path)
    if path.is_dir():
        files = sorted(p for p in path.glob("*.parquet") if not p.name.startswith("."))
        if not files:
            raise FileNotFoundError(f"{path} holds no .parquet label files")
    elif path.is_file():
        files = [path]
    else:
        raise FileNotFoundError(f"labels path {path} does not exist")
    for file in files:
        try:
            parquet = pq.ParquetFile(str(file))
        except (OSError, ValueError) as err:
            first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise DamagedFileError(
                f"{file}: not a readable labels parquet file ({first}). Fix: rerun jobs.refine with the same config "
                "(it drops damaged parts and redoes their questions)"
            ) from None
        missing = [n for n in LABELS_SCHEMA.names if n not in parquet.schema_arrow.names]
        if missing:
            raise ValueError(f"{file}: not a labels file, missing column(s) {missing}")
        yield parquet


def labels_by_id(path: str | FilePath, wanted: Collection[str] | None = None) -> dict[str, Labels]:
    """The labels of a file or folder by question id (only ``wanted`` ids when given).

    A question with two identical rows (a part rewritten while a job was killed) is kept once;
    two rows that differ are refused instead of letting file order pick one.

    Raises:
        ValueError: naming the question, both rows' sources and the fix.
        DamagedFileError, FileNotFoundError: as :func:`iter_labels`.
    """
    out: dict[str, Labels] = {}
    for row in iter_labels(path):
        if wanted is not None and row.id not in wanted:
            continue
        old = out.setdefault(row.id, row)
        if old != row:
            raise ValueError(
                f"{path}: question {row.id!r} has two different label rows ({old.source}/{old.selector} and "
                f"{row.source}/{row.selector}); two jobs wrote into one folder. Fix: rerun jobs.refine --fresh "
                "into this output_dir, or keep one of the folders"
            )
    return out


def read_labels(path: str | FilePath) -> list[Labels]:
    """All labels of a parquet file or folder of part files; see :func:`iter_labels`."""
    return list(iter_labels(path))
