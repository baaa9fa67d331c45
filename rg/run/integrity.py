"""Files are verified before they are trusted: durable atomic writes and parquet checks.

Every result file of a resumable job (a subgraph shard, a labels part) is written under a
temporary name, flushed to disk (``fsync``) and only then renamed into place; a small JSON
*stats* file written after it records how many rows it holds. On resume a file counts as finished
only when its stats file exists, its parquet footer reads and the footer's row count equals the
recorded one (:func:`check_parquet`). A file that fails is damaged (a truncated copy, a disk
that lost the tail, a kill between the two renames): the job rebuilds or redoes it and says so,
and a reader that meets one raises :class:`DamagedFileError`, whose one-line message names the
file and the fix.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any


class DamagedFileError(ValueError):
    """A data file cannot be read or does not match its recorded stats; the message names the fix."""


class EmptyInputError(ValueError):
    """A job's input holds no rows; the message blames the input and names the config key."""


def fsync_dir(folder: str | Path) -> None:
    """Flush a folder's entries (a rename into it) to disk; a no-op where folders cannot be opened."""
    try:
        fd = os.open(str(folder), os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some file systems do not support fsync on folders; the rename itself is still atomic
    finally:
        os.close(fd)


def commit_file(temporary: str | Path, path: str | Path) -> None:
    """Make ``temporary`` durable and move it to ``path`` atomically (fsync, rename, fsync folder)."""
    with open(temporary, "rb") as handle:
        os.fsync(handle.fileno())
    os.replace(temporary, path)
    fsync_dir(Path(path).parent)


def write_json_atomic(data: Any, path: str | Path) -> None:
    """Write ``data`` as JSON to ``path`` durably and atomically (see :func:`commit_file`)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex}.tmp")
    try:
        temporary.write_text(json.dumps(data))
        commit_file(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


def parquet_rows(path: str | Path) -> int:
    """The row count in a parquet file's footer.

    Raises:
        DamagedFileError: if the file is missing or its footer cannot be read.
    """
    import pyarrow.parquet as pq

    try:
        return int(pq.ParquetFile(str(path)).metadata.num_rows)
    except (OSError, ValueError) as err:  # pyarrow raises ArrowInvalid (a ValueError) or OSError
        raise DamagedFileError(f"{path}: not a readable parquet file ({_short(err)})") from None


def check_parquet(path: str | Path, expected_rows: int | None) -> str | None:
    """Why ``path`` cannot be trusted, or None when its footer reads and holds ``expected_rows`` rows.

    Args:
        path: The parquet file.
        expected_rows: The row count its stats recorded; None when there are no stats (then the
            file is unfinished, whatever its footer says).
    """
    if expected_rows is None:
        return "no stats file (the write did not finish)"
    try:
        rows = parquet_rows(path)
    except DamagedFileError as err:
        return str(err).split(": ", 1)[1]
    if rows != expected_rows:
        return f"holds {rows} rows, its stats recorded {expected_rows}"
    return None


def require_parquet(path: str | Path, fix: str) -> int:
    """The row count of a readable parquet file; else raise a one-line :class:`DamagedFileError`.

    Args:
        path: The file.
        fix: What the user should do, e.g. ``rerun jobs.build_subgraphs with the same config``.
    """
    try:
        return parquet_rows(path)
    except DamagedFileError as err:
        raise DamagedFileError(f"{err}. Fix: {fix}") from None


def _short(err: Exception) -> str:
    text = str(err).strip().splitlines()
    return text[0] if text else type(err).__name__
