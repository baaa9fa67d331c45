"""Read and write datasets in the RoG schema (parquet and JSON Lines).

The RoG schema is the one of the Hugging Face datasets ``rmanluo/RoG-webqsp`` and
``rmanluo/RoG-cwq`` (Luo et al., "Reasoning on Graphs", ICLR 2024): one row per question with the
columns ``id, question, answer, q_entity, a_entity, graph, choices``; ``graph`` is a list of
``[head, relation, tail]`` string triples. rg adds two optional columns, ``hops`` and
``relation_paths`` (see ``rg.data.sample.Sample``).

Readers come in two forms. ``read_rog`` yields ``Sample`` objects and raises ``BadRowError``
(naming the file, the line or row, and the problem) at the first bad row. ``iter_rog_rows``
yields ``(row_number, Sample | BadRow)`` so that a caller can count bad rows by reason and go
on. Problems with a whole file (it is missing, its parquet schema lacks a column, its suffix is
unknown) raise in both forms. Loading from the Hugging Face hub is in ``rg.data.hf``.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any, Collection, Iterable, Iterator, Mapping

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from rg.run.integrity import DamagedFileError
from rg.data.records import BadRow, BadRowError, BadRowReason, iter_text_lines, write_parquet_atomic
from rg.data.sample import ROG_COLUMNS, Sample

REQUIRED_COLUMNS = tuple(c for c in ROG_COLUMNS if c != "choices")
"""RoG columns every row must have (``choices`` may be absent and then reads as empty)."""

OPTIONAL_COLUMNS = ("choices", "hops", "relation_paths")
"""Columns read when present: RoG's ``choices`` and rg's ``hops`` and ``relation_paths``."""

ROG_PARQUET_SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("question", pa.string()),
        ("answer", pa.list_(pa.string())),
        ("q_entity", pa.list_(pa.string())),
        ("a_entity", pa.list_(pa.string())),
        ("graph", pa.list_(pa.list_(pa.string()))),
        ("choices", pa.list_(pa.string())),
        ("hops", pa.int64()),
        ("relation_paths", pa.list_(pa.list_(pa.string()))),
    ]
)
"""The parquet schema ``write_rog_parquet`` writes (``hops`` is nullable)."""

_LIST_COLUMNS = ("answer", "q_entity", "a_entity", "choices")


def read_rog(path: str | Path, graph: bool = True) -> Iterator[Sample]:
    """Yield the Samples of a RoG-schema file or folder, stopping at the first bad row.

    Args:
        path: A ``.parquet``, ``.jsonl`` or ``.jsonl.gz`` file, or a folder of ``.parquet``
            shards (read in sorted file-name order).
        graph: False leaves the subgraphs out (``triples`` empty; parquet files do not read
            that column).

    Raises:
        BadRowError: at the first row that is not a valid RoG row (names file, line/row, problem).
        ValueError: for an unsupported suffix, an unreadable parquet file or a parquet file that
            lacks a required column.
        FileNotFoundError: if the path does not exist or a folder holds no parquet files.
    """
    for _, item in iter_rog_rows(path, graph):
        if isinstance(item, BadRow):
            raise BadRowError(item)
        yield item if graph or not item.triples else replace(item, triples=())


def iter_rog_rows(path: str | Path, graph: bool = True) -> Iterator[tuple[int, Sample | BadRow]]:
    """Yield ``(row_number, Sample | BadRow)`` for every row, so bad rows can be counted.

    ``row_number`` is the 0-based position of the row in the whole input (for a folder, the
    shards are concatenated in sorted order); ``BadRow.line`` is the position within its own
    file. Blank lines of JSON Lines files are skipped (they hold no row) and not numbered.

    Args:
        path: As for ``read_rog``.
        graph: False skips the ``graph`` column of parquet files (rows get no triples).

    Raises:
        ValueError, FileNotFoundError: for problems with a whole file, as for ``read_rog``.
    """
    row_number = 0
    for file in rog_files(path):
        rows = _iter_parquet_rows(file, graph) if file.suffix == ".parquet" else _iter_jsonl_rows(file)
        for item in rows:
            yield row_number, item
            row_number += 1


def read_rog_selected(path: str | Path, ids: Collection[str], graph: bool = True) -> Iterator[Sample]:
    """Yield the Samples whose id is in ``ids``, in input order, stopping at the first bad row.

    Parquet shards are filtered on their ``id`` column before any row is decoded, so taking a
    few hundred questions out of a multi-GB folder of 3-hop subgraphs costs little memory.

    Args:
        path: As for ``read_rog``.
        ids: The question ids to keep; ids absent from the input are ignored.
        graph: False leaves the subgraphs out (``triples`` empty; parquet shards then do not
            even read that column), for jobs that need only questions, topics and answers.

    Raises:
        As ``read_rog``.
    """
    keep = set(ids)
    wanted = pa.array(sorted(keep), type=pa.string())
    for file in rog_files(path):
        if file.suffix != ".parquet":
            for item in _iter_jsonl_rows(file):
                if isinstance(item, BadRow):
                    raise BadRowError(item)
                if item.id in keep:
                    yield item if graph else replace(item, triples=())
            continue
        for item in _iter_selected_parquet_rows(file, wanted, graph):
            if isinstance(item, BadRow):
                raise BadRowError(item)
            yield item


def rog_files(path: str | Path) -> list[Path]:
    """Return the files that make up a RoG input: the file itself or a folder's parquet shards.

    Raises:
        FileNotFoundError: if the path does not exist or a folder holds no ``.parquet`` file.
        ValueError: if a file's suffix is not ``.parquet``, ``.jsonl`` or ``.jsonl.gz``.
    """
    path = Path(path)
    if path.is_dir():
        shards = sorted(p for p in path.iterdir() if p.suffix == ".parquet" and p.is_file())
        if not shards:
            raise FileNotFoundError(f"{path} is a folder without .parquet shards")
        return shards
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist")
    if path.suffix == ".parquet" or path.name.endswith((".jsonl", ".jsonl.gz")):
        return [path]
    raise ValueError(
        f"{path}: unsupported RoG file; expected .parquet, .jsonl, .jsonl.gz or a folder of "
        ".parquet shards"
    )


def _iter_jsonl_rows(path: Path) -> Iterator[Sample | BadRow]:
    source = str(path)
    for index, text in iter_text_lines(path):
        if isinstance(text, BadRow):
            yield text
            continue
        if not text.strip():
            continue
        try:
            row = json.loads(text)
        except json.JSONDecodeError as err:
            yield BadRow(source, index, "malformed_json", str(err))
            continue
        if not isinstance(row, dict):
            detail = f"expected a JSON object, got {text[:60]!r}"
            yield BadRow(source, index, "not_an_object", detail)
            continue
        yield sample_from_row(row, source, index)


def _open_parquet(path: Path) -> pq.ParquetFile:
    """Open a RoG parquet file, or raise a one-line :class:`DamagedFileError` naming it and the fix."""
    try:
        return pq.ParquetFile(path)
    except (pa.ArrowInvalid, OSError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise DamagedFileError(
            f"{path}: not a readable parquet file ({first}). Fix: rebuild it (rerun jobs.build_subgraphs "
            "with the same config; it rebuilds damaged shards) or replace the file"
        ) from None


def _parquet_batches(path: Path, batch_size: int = 64, graph: bool = True) -> Iterator[tuple[int, pa.RecordBatch]]:
    """``(index of the batch's first row, batch)`` over a RoG parquet file's known columns.

    Batches are small (64 rows) because one 3-hop MetaQA row can hold thousands of triples;
    ``graph=False`` leaves that column out.
    """
    parquet = _open_parquet(path)
    names = parquet.schema_arrow.names
    missing = [c for c in REQUIRED_COLUMNS if c not in names]
    if missing:
        raise ValueError(
            f"{path}: missing RoG column(s) {missing}; found {names}, need {list(REQUIRED_COLUMNS)}"
        )
    columns = [c for c in (*REQUIRED_COLUMNS, *OPTIONAL_COLUMNS) if c in names and (graph or c != "graph")]
    index = 0
    for batch in parquet.iter_batches(batch_size=batch_size, columns=columns):
        yield index, batch
        index += batch.num_rows


def _iter_parquet_rows(path: Path, graph: bool = True) -> Iterator[Sample | BadRow]:
    for index, batch in _parquet_batches(path, graph=graph):
        for offset, row in enumerate(batch.to_pylist()):
            yield sample_from_row(row if graph else {**row, "graph": []}, str(path), index + offset)


def _iter_selected_parquet_rows(path: Path, ids: pa.Array, graph: bool = True) -> Iterator[Sample | BadRow]:
    for index, batch in _parquet_batches(path, graph=graph):
        mask = pc.is_in(batch.column("id"), value_set=ids)
        positions = pc.indices_nonzero(mask).to_pylist()
        for offset, row in zip(positions, batch.filter(mask).to_pylist()):
            yield sample_from_row(row if graph else {**row, "graph": []}, str(path), index + offset)


def sample_from_row(row: Mapping[str, Any], source: str, line: int) -> Sample | BadRow:
    """Validate one RoG-schema row and return its Sample, or a BadRow saying what is wrong.

    Args:
        row: A mapping with the RoG columns (and optionally ``hops``, ``relation_paths``).
        source: The file the row comes from (for the BadRow).
        line: The row's 0-based line or row index in ``source``.
    """
    missing = [c for c in REQUIRED_COLUMNS if c not in row]
    if missing:
        return BadRow(source, line, "missing_column", f"lacks RoG column(s) {missing}")
    problem = _row_problem(row)
    if problem is not None:
        reason, detail = problem
        return BadRow(source, line, reason, f"row {row.get('id')!r}: {detail}")
    return Sample.from_rog(row)


def _row_problem(row: Mapping[str, Any]) -> tuple[BadRowReason, str] | None:
    if row["id"] is None or isinstance(row["id"], (bool, list, dict)):
        return "bad_value", f"id must be a string, got {row['id']!r}"
    if not isinstance(row["question"], str):
        return "bad_value", f"question must be a string, got {row['question']!r}"
    for column in _LIST_COLUMNS:
        if not _is_str_list(row.get(column)):
            return "bad_value", f"{column} must be a list of strings, got {row.get(column)!r}"
    graph = row["graph"]
    if graph is not None and not isinstance(graph, (list, tuple)):
        return "bad_value", f"graph must be a list of triples, got {type(graph).__name__}"
    for position, triple in enumerate(graph or ()):
        if not isinstance(triple, (list, tuple)) or len(triple) != 3:
            return "bad_triple", f"graph[{position}] = {triple!r} is not a [head, relation, tail]"
        if not all(isinstance(part, str) for part in triple):
            return "bad_triple", f"graph[{position}] = {triple!r} has a part that is not a string"
    hops = row.get("hops")
    if not _is_hops(hops):
        return "bad_value", f"hops must be an integer or null, got {hops!r}"
    paths = row.get("relation_paths")
    if paths is not None and not (
        isinstance(paths, (list, tuple)) and all(_is_str_list(p) for p in paths)
    ):
        return "bad_value", f"relation_paths must be a list of lists of strings, got {paths!r}"
    return None


def _is_str_list(value: Any) -> bool:
    if value is None or isinstance(value, str):
        return True
    return isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value)


def _is_hops(value: Any) -> bool:
    if value is None:
        return True
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return True
    # pandas turns a nullable integer column into floats with NaN for missing values.
    return isinstance(value, float) and (value != value or value.is_integer())


# --------------------------------------------------------------------------------------------
# Writing


def write_rog_parquet(samples: Iterable[Sample], path: str | Path, batch_size: int = 1024) -> int:
    """Write Samples as a RoG-schema parquet file, atomically; return the number of rows.

    The columns are ``ROG_PARQUET_SCHEMA``: the RoG columns plus rg's ``hops`` and
    ``relation_paths``. The file is written under a temporary name in the same folder and moved
    into place with ``os.replace``, so readers never see a half-written file. ``read_rog`` on the
    result gives back Samples equal to the ones written.

    Args:
        samples: The Samples to write (consumed once, ``batch_size`` at a time).
        path: The parquet file to create or replace; missing parent folders are created.
        batch_size: Rows per record batch.
    """
    return write_parquet_atomic((s.to_rog() for s in samples), path, ROG_PARQUET_SCHEMA, batch_size)
