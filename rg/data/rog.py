"""Read and write datasets in the RoG schema (parquet, JSON Lines, Hugging Face).

The RoG schema is the one of the Hugging Face datasets ``rmanluo/RoG-webqsp`` and
``rmanluo/RoG-cwq`` (Luo et al., "Reasoning on Graphs", ICLR 2024): one row per question with the
columns ``id, question, answer, q_entity, a_entity, graph, choices``; ``graph`` is a list of
``[head, relation, tail]`` string triples. rg adds two optional columns, ``hops`` and
``relation_paths`` (see ``rg.data.sample.Sample``).

Readers come in two forms. ``read_rog`` yields ``Sample`` objects and raises ``BadRowError``
(naming the file, the line or row, and the problem) at the first bad row. ``iter_rog_rows``
yields ``(row_number, Sample | BadRow)`` so that a caller can count bad rows by reason and go
on. Problems with a whole file (it is missing, its parquet schema lacks a column, its suffix is
unknown) raise in both forms.

This module also holds the helpers that the other line-based readers share (``BadRow``,
``iter_text_lines``) and the readers of the WebQSP side files (canonical split, evidence labels).
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import os
import queue
import socket
import threading
import time
import urllib.parse
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Iterable, Iterator, Literal, Mapping, get_args

import pyarrow as pa
import pyarrow.parquet as pq

from rg.data.sample import ROG_COLUMNS, Sample

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
]
"""Why a line or row could not be read; the detail text of a ``BadRow`` says more."""

HFRoGName = Literal["rmanluo/RoG-webqsp", "rmanluo/RoG-cwq"]
"""The RoG datasets on the Hugging Face hub that ``load_hf_rog`` knows."""

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
_GZIP_MAGIC = b"\x1f\x8b"
_TRUE_VALUES = frozenset({"1", "ON", "YES", "TRUE"})
_OFFLINE_VARIABLES = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
_LOCAL_FILES_HINT = (
    "pass local RoG parquet/jsonl files instead, e.g. rg.data.rog.read_rog('path/to/test.parquet') "
    "(a folder of parquet shards works too)"
)


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


class HubUnavailableError(RuntimeError):
    """The Hugging Face hub cannot be used (offline flag set, or the endpoint is unreachable)."""


# --------------------------------------------------------------------------------------------
# Shared text helpers


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


# --------------------------------------------------------------------------------------------
# Reading RoG rows


def read_rog(path: str | Path) -> Iterator[Sample]:
    """Yield the Samples of a RoG-schema file or folder, stopping at the first bad row.

    Args:
        path: A ``.parquet``, ``.jsonl`` or ``.jsonl.gz`` file, or a folder of ``.parquet``
            shards (read in sorted file-name order).

    Raises:
        BadRowError: at the first row that is not a valid RoG row (names file, line/row, problem).
        ValueError: for an unsupported suffix, an unreadable parquet file or a parquet file that
            lacks a required column.
        FileNotFoundError: if the path does not exist or a folder holds no parquet files.
    """
    for _, item in iter_rog_rows(path):
        if isinstance(item, BadRow):
            raise BadRowError(item)
        yield item


def iter_rog_rows(path: str | Path) -> Iterator[tuple[int, Sample | BadRow]]:
    """Yield ``(row_number, Sample | BadRow)`` for every row, so bad rows can be counted.

    ``row_number`` is the 0-based position of the row in the whole input (for a folder, the
    shards are concatenated in sorted order); ``BadRow.line`` is the position within its own
    file. Blank lines of JSON Lines files are skipped (they hold no row) and not numbered.

    Args:
        path: As for ``read_rog``.

    Raises:
        ValueError, FileNotFoundError: for problems with a whole file, as for ``read_rog``.
    """
    row_number = 0
    for file in rog_files(path):
        rows = _iter_parquet_rows(file) if file.suffix == ".parquet" else _iter_jsonl_rows(file)
        for item in rows:
            yield row_number, item
            row_number += 1


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


def _iter_parquet_rows(path: Path, batch_size: int = 1024) -> Iterator[Sample | BadRow]:
    source = str(path)
    try:
        parquet = pq.ParquetFile(path)
    except (pa.ArrowInvalid, OSError) as err:
        raise ValueError(f"{path}: not a readable parquet file: {err}") from err
    names = parquet.schema_arrow.names
    missing = [c for c in REQUIRED_COLUMNS if c not in names]
    if missing:
        raise ValueError(
            f"{path}: missing RoG column(s) {missing}; found {names}, need {list(REQUIRED_COLUMNS)}"
        )
    columns = [c for c in (*REQUIRED_COLUMNS, *OPTIONAL_COLUMNS) if c in names]
    index = 0
    for batch in parquet.iter_batches(batch_size=batch_size, columns=columns):
        for row in batch.to_pylist():
            yield sample_from_row(row, source, index)
            index += 1


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
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex}.tmp")
    count = 0
    try:
        with pq.ParquetWriter(str(temporary), ROG_PARQUET_SCHEMA) as writer:
            batch: list[dict[str, Any]] = []
            for sample in samples:
                batch.append(sample.to_rog())
                if len(batch) == batch_size:
                    writer.write_table(pa.Table.from_pylist(batch, schema=ROG_PARQUET_SCHEMA))
                    count += len(batch)
                    batch = []
            if batch or count == 0:
                writer.write_table(pa.Table.from_pylist(batch, schema=ROG_PARQUET_SCHEMA))
                count += len(batch)
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)
    return count


# --------------------------------------------------------------------------------------------
# Hugging Face hub


def load_hf_rog(name: HFRoGName, split: str, probe_timeout: float = 3.0) -> Iterator[Sample]:
    """Load a RoG dataset from the Hugging Face hub with ``datasets`` and yield its Samples.

    All checks run before anything is downloaded, so without a network this fails within about
    ``probe_timeout`` seconds instead of waiting on ``load_dataset``'s retries: ``datasets``
    must be importable, ``HF_HUB_OFFLINE`` / ``HF_DATASETS_OFFLINE`` must not be set, and the
    hub endpoint configured in ``huggingface_hub`` (``HF_ENDPOINT``) must accept a connection.
    An offline flag is honoured by not touching the network at all; read cached or downloaded
    files with ``read_rog`` instead.

    Args:
        name: ``"rmanluo/RoG-webqsp"`` or ``"rmanluo/RoG-cwq"``.
        split: ``"train"``, ``"validation"`` or ``"test"``.
        probe_timeout: Seconds allowed for resolving and connecting to the hub endpoint.

    Raises:
        ValueError: for an unknown dataset name.
        ImportError: if ``datasets`` is not installed (``pip install 'rg[hf]'``).
        HubUnavailableError: if an offline flag is set or the hub cannot be reached.
    """
    known = get_args(HFRoGName)
    if name not in known:
        raise ValueError(f"unknown RoG dataset {name!r}; choose one of {list(known)}")
    if importlib.util.find_spec("datasets") is None:
        raise ImportError(
            "load_hf_rog needs the optional 'datasets' package: pip install 'rg[hf]'; or "
            + _LOCAL_FILES_HINT
        )
    check_hub_reachable(timeout=probe_timeout)
    import datasets

    return _samples_from_hf(datasets.load_dataset(name, split=split), f"{name}[{split}]")


def check_hub_reachable(endpoint: str | None = None, timeout: float = 3.0) -> str:
    """Return the hub endpoint if it can be used now, else raise HubUnavailableError quickly.

    Args:
        endpoint: URL to probe; defaults to ``huggingface_hub``'s configured endpoint.
        timeout: Seconds allowed in total for the DNS lookup and the TCP connection.

    Raises:
        HubUnavailableError: if ``HF_HUB_OFFLINE`` or ``HF_DATASETS_OFFLINE`` is set, or the
            endpoint (or the proxy configured for it) does not accept a connection in time.
        ImportError: if ``endpoint`` is None and ``huggingface_hub`` is not installed.
    """
    for variable in _OFFLINE_VARIABLES:
        if os.environ.get(variable, "").strip().upper() in _TRUE_VALUES:
            raise HubUnavailableError(
                f"{variable} is set, so the Hugging Face hub is not contacted; " + _LOCAL_FILES_HINT
            )
    if endpoint is None:
        try:
            from huggingface_hub import constants
        except ImportError as err:
            raise ImportError(
                "finding the hub endpoint needs 'huggingface_hub': pip install 'rg[hf]'"
            ) from err
        endpoint = constants.ENDPOINT
    problem = probe_endpoint(endpoint, timeout)
    if problem is not None:
        raise HubUnavailableError(
            f"the Hugging Face hub at {endpoint} is unreachable ({problem}); " + _LOCAL_FILES_HINT
        )
    return endpoint


def probe_endpoint(url: str, timeout: float) -> str | None:
    """Try a TCP connection to an http(s) URL's host (or its proxy); return None or the problem.

    The DNS lookup runs in a daemon thread so that a resolver which hangs cannot exceed
    ``timeout`` either.

    Args:
        url: An ``http://`` or ``https://`` URL.
        timeout: Seconds allowed in total.
    """
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f"{url!r} is not an http(s) URL"
    host, port = parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)
    proxy = urllib.request.getproxies().get(parts.scheme)
    if proxy and not urllib.request.proxy_bypass(host):
        proxy_parts = urllib.parse.urlsplit(proxy if "://" in proxy else f"http://{proxy}")
        if proxy_parts.hostname:
            host, port = proxy_parts.hostname, proxy_parts.port or 80
    deadline = time.monotonic() + timeout
    try:
        addresses = _resolve(host, port, timeout)
    except OSError as err:
        return f"cannot resolve {host}: {err}"
    last_error: OSError | None = None
    for family, kind, proto, _, address in addresses:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        try:
            with socket.socket(family, kind, proto) as connection:
                connection.settimeout(remaining)
                connection.connect(address)
                return None
        except OSError as err:
            last_error = err
    return f"cannot connect to {host}:{port}: {last_error or 'timed out'}"


def _resolve(host: str, port: int, timeout: float) -> list[tuple[Any, ...]]:
    answers: queue.Queue[list[tuple[Any, ...]] | OSError] = queue.Queue(maxsize=1)

    def lookup() -> None:
        try:
            answers.put(socket.getaddrinfo(host, port, type=socket.SOCK_STREAM))
        except OSError as err:
            answers.put(err)

    threading.Thread(target=lookup, name="rg-hub-dns", daemon=True).start()
    try:
        answer = answers.get(timeout=timeout)
    except queue.Empty as err:
        raise TimeoutError(f"DNS lookup took more than {timeout} s") from err
    if isinstance(answer, OSError):
        raise answer
    return answer


def _samples_from_hf(dataset: Iterable[Mapping[str, Any]], source: str) -> Iterator[Sample]:
    for index, row in enumerate(dataset):
        item = sample_from_row(row, source, index)
        if isinstance(item, BadRow):
            raise BadRowError(item)
        yield item


# --------------------------------------------------------------------------------------------
# WebQSP side files (shared/data/webqsp-evidence, shared/data/splits)


@dataclass(frozen=True)
class WebQSPLabels:
    """Evidence labels of one WebQSP question (a row of ``webqsp_test_labels.jsonl.gz``).

    Attributes:
        id: The question id (``WebQTest-N``), as in the RoG-schema file.
        evidence_triple_idx: Indices into the question's ``graph`` of the triples GPT-4o judged
            necessary (SubgraphRAG's released labels).
        answer_entity_in_graph: Whether an answer entity occurs in the question's graph.
        inferential_chains: Gold relation chains of the official WebQSP parses (may be empty).
    """

    id: str
    evidence_triple_idx: tuple[int, ...]
    answer_entity_in_graph: bool
    inferential_chains: tuple[tuple[str, ...], ...]


def read_webqsp_labels(path: str | Path) -> Iterator[WebQSPLabels]:
    """Yield the evidence labels of each question in a WebQSP labels JSON Lines file.

    Args:
        path: ``webqsp-evidence/webqsp_test_labels.jsonl.gz`` or a file of the same form.

    Raises:
        BadRowError: at the first line that is not a valid labels row.
    """
    source = str(path)
    for index, text in iter_text_lines(path):
        if isinstance(text, BadRow):
            raise BadRowError(text)
        if not text.strip():
            continue
        try:
            row = json.loads(text)
        except json.JSONDecodeError as err:
            raise BadRowError(BadRow(source, index, "malformed_json", str(err))) from err
        yield _labels_from_row(row, source, index)


def _labels_from_row(row: Any, source: str, index: int) -> WebQSPLabels:
    if not isinstance(row, dict):
        raise BadRowError(BadRow(source, index, "not_an_object", "expected a JSON object"))
    fields = ("id", "evidence_triple_idx", "answer_entity_in_graph", "inferential_chains")
    missing = [f for f in fields if f not in row]
    if missing:
        raise BadRowError(BadRow(source, index, "missing_column", f"lacks {missing}"))
    indices, chains = row["evidence_triple_idx"], row["inferential_chains"]
    valid = (
        isinstance(row["id"], str)
        and isinstance(indices, list)
        and all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in indices)
        and isinstance(row["answer_entity_in_graph"], bool)
        and isinstance(chains, list)
        and all(isinstance(c, list) and all(isinstance(r, str) for r in c) for c in chains)
    )
    if not valid:
        raise BadRowError(BadRow(source, index, "bad_value", f"unexpected value types in {row!r}"))
    return WebQSPLabels(
        id=row["id"],
        evidence_triple_idx=tuple(indices),
        answer_entity_in_graph=row["answer_entity_in_graph"],
        inferential_chains=tuple(tuple(c) for c in chains),
    )


def read_webqsp_split(path: str | Path) -> dict[str, tuple[str, ...]]:
    """Return the canonical WebQSP split: split name (``train``/``val``/``test``) → question ids.

    Args:
        path: ``splits/webqsp_split.json.gz``: ``{"unit": "id", "splits": {name: [ids]}, ...}``.

    Raises:
        ValueError: if the file is not of that form or an id is in two splits.
    """
    data = read_json_file(path)
    if not isinstance(data, dict) or not isinstance(data.get("splits"), dict):
        raise ValueError(f"{path}: expected a JSON object with a 'splits' object")
    if data.get("unit", "id") != "id":
        raise ValueError(f"{path}: split unit is {data['unit']!r}, expected 'id'")
    result: dict[str, tuple[str, ...]] = {}
    seen: dict[str, str] = {}
    for name, ids in data["splits"].items():
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            raise ValueError(f"{path}: split {name!r} must be a list of id strings")
        for question_id in ids:
            if question_id in seen:
                raise ValueError(
                    f"{path}: id {question_id!r} is in both {seen[question_id]!r} and {name!r}"
                )
            seen[question_id] = name
        result[name] = tuple(ids)
    return result
