"""Records of unreadable input and the text-file helpers that every line-based reader shares.

A reader that meets a line or row it cannot read reports it as a :class:`BadRow` (file, line,
reason, detail) instead of dropping it, so callers can count bad rows by reason and go on; the
strict readers raise :class:`BadRowError` at the first one. ``open_binary`` and
``iter_text_lines`` read plain or gzip-compressed files (detected by content) line by line.
"""

from __future__ import annotations

import gzip
import json
import os
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Iterable, Iterator, Literal

if TYPE_CHECKING:
    import pyarrow as pa

BadRowReason = Literal[
    "bad_encoding",
    "blank_line",
    "malformed_json",
    "not_an_object",
    "missing_column",
    "bad_value",
    "bad_triple",
    "wrong_field_count",
    "empty_field",
    "ambiguous_relation",
    "no_tab",
    "no_topic",
    "empty_answers",
    "topic_not_in_kg",
    "no_hops",
    "duplicate_id",
    "link_ambiguous",
    "link_not_found",
]
"""Why a line or row could not be read; the detail text of a ``BadRow`` says more."""

_GZIP_MAGIC = b"\x1f\x8b"


@dataclass(frozen=True)
class BadRow:
    """A line or row that could not be read, kept so callers can count and report it.

    Attributes:
        source: The file the line or row comes from.
        line: 0-based index of the line (text files) or row (parquet) within ``source``; for
            MetaQA files it is the same index that question ids and the canonical split use.
        reason: What kind of problem it is.
        detail: What exactly is wrong, for a human.
    """

    source: str
    line: int
    reason: BadRowReason
    detail: str

    def describe(self) -> str:
        """Return ``source:N: reason: detail`` with N 1-based, as editors and compilers count."""
        return f"{self.source}:{self.line + 1}: {self.reason}: {self.detail}"


class BadRowError(ValueError):
    """Raised by the strict readers at the first bad row; ``bad_row`` holds the details."""

    def __init__(self, bad_row: BadRow) -> None:
        super().__init__(bad_row.describe())
        self.bad_row = bad_row


def open_binary(path: str | Path) -> IO[bytes]:
    """Open a file for reading bytes, decompressing it when it is gzip (detected by content).

    Args:
        path: A plain or gzip-compressed file.

    Raises:
        FileNotFoundError: if ``path`` does not exist.
    """
    path = Path(path)
    with path.open("rb") as probe:
        magic = probe.read(2)
    return gzip.open(path, "rb") if magic == _GZIP_MAGIC else path.open("rb")


def iter_text_lines(path: str | Path) -> Iterator[tuple[int, str | BadRow]]:
    """Yield ``(line_index, text)`` for each line of a UTF-8 text file (plain or gzip).

    Lines are split on ``\\n`` only; the line ending (``\\n`` or ``\\r\\n``) is removed. A line
    that is not valid UTF-8 is yielded as a ``BadRow`` with reason ``bad_encoding``, so one bad
    byte does not stop the file.

    Args:
        path: The file to read.
    """
    with open_binary(path) as handle:
        for index, raw in enumerate(handle):
            raw = raw.rstrip(b"\n").rstrip(b"\r")
            try:
                yield index, raw.decode("utf-8")
            except UnicodeDecodeError as err:
                yield index, BadRow(str(path), index, "bad_encoding", f"not UTF-8: {err}")


def read_json_file(path: str | Path) -> Any:
    """Return the JSON value stored in a plain or gzip-compressed file.

    Raises:
        ValueError: naming the file when it is not valid JSON.
    """
    with open_binary(path) as handle:
        try:
            return json.load(handle)
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise ValueError(f"{path}: not valid JSON: {err}") from err


def write_parquet_atomic(
    rows: Iterable[dict[str, Any]], path: str | Path, schema: "pa.Schema", batch_size: int = 1024
) -> int:
    """Write dict rows as one parquet file, atomically; return the number of rows.

    The file is written under a temporary name in the same folder, flushed to disk and moved
    into place with ``os.replace`` (:func:`rg.run.integrity.commit_file`), so readers never see
    a half-written file, even after a power loss; on failure the temporary file is
    removed and any existing file is left untouched. Missing parent folders are created. An
    empty input still writes a file with the schema.

    Args:
        rows: Mappings with the schema's columns (consumed once, ``batch_size`` at a time).
        path: The parquet file to create or replace.
        schema: The pyarrow schema of the file.
        batch_size: Rows per record batch.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    from rg.run.integrity import commit_file

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex}.tmp")
    count = 0
    try:
        with pq.ParquetWriter(str(temporary), schema) as writer:
            batch: list[dict[str, Any]] = []
            for row in rows:
                batch.append(row)
                if len(batch) == batch_size:
                    writer.write_table(pa.Table.from_pylist(batch, schema=schema))
                    count += len(batch)
                    batch = []
            if batch or count == 0:
                writer.write_table(pa.Table.from_pylist(batch, schema=schema))
                count += len(batch)
        commit_file(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)
    return count
