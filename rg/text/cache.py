"""On-disk embedding cache keyed by (model id, text), shared safely by several processes.

One SQLite file (stdlib ``sqlite3``) holds float32 vectors as little-endian blobs under the key
``(model_id, sha256(text))``. The database runs in WAL mode, so readers never block the single
writer and several Ray workers can share one cache folder on a local disk. Every operation opens
its own short-lived connection (the cache object pickles cleanly into Ray actors), waits up to
``timeout_s`` for a lock, and retries a bounded number of times when SQLite still reports the
database as busy. WAL needs a local file system; do not put the cache on NFS.
"""

from __future__ import annotations

import hashlib
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import numpy as np

T = TypeVar("T")

CACHE_FILENAME = "embeddings.sqlite3"
_DTYPE = np.dtype("<f4")
_CHUNK = 500  # keys per SELECT, well below SQLite's host-parameter limit

_SCHEMA = """
CREATE TABLE IF NOT EXISTS embeddings (
    model_id TEXT NOT NULL,
    text_key BLOB NOT NULL,
    dim INTEGER NOT NULL,
    vector BLOB NOT NULL,
    PRIMARY KEY (model_id, text_key)
) WITHOUT ROWID
"""


@dataclass
class CacheCounters:
    """Lookup counters of one :class:`EmbeddingCache` object (not shared across processes).

    Attributes:
        hits: Distinct texts found in the cache.
        misses: Distinct texts looked up but absent.
        writes: Vectors offered for storage (already-present keys are left unchanged).
    """

    hits: int = 0
    misses: int = 0
    writes: int = 0


def text_key(text: str) -> bytes:
    """The 32-byte storage key of ``text`` (SHA-256 of its UTF-8 bytes)."""
    return hashlib.sha256(text.encode("utf-8")).digest()


def _chunks(items: Sequence[T], size: int) -> Iterator[Sequence[T]]:
    """Consecutive slices of ``items`` with at most ``size`` elements."""
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _is_busy(err: sqlite3.OperationalError) -> bool:
    """Whether an SQLite error is a transient lock conflict worth retrying."""
    message = str(err).lower()
    return "locked" in message or "busy" in message


class EmbeddingCache:
    """Persistent map from (model id, text) to a float32 vector.

    Args:
        directory: Folder of the cache file (created if missing).
        timeout_s: How long one operation waits for a database lock before failing.
        max_retries: How many more times a busy operation is retried (with backoff).

    Example::

        cache = EmbeddingCache("outputs/encoder_cache")
        cache.put_many("my-model", ["a b"], np.ones((1, 4), np.float32))
        cache.get_many("my-model", ["a b", "c"])  # {"a b": array([1., 1., 1., 1.])}
    """

    def __init__(self, directory: str | Path, *, timeout_s: float = 30.0, max_retries: int = 5) -> None:
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        if max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {max_retries}")
        self.path = Path(directory).expanduser() / CACHE_FILENAME
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.counters = CacheCounters()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._run(self._create_schema)

    def _connect(self) -> sqlite3.Connection:
        """Open a connection that waits up to ``timeout_s`` for locks."""
        conn = sqlite3.connect(self.path, timeout=self.timeout_s)
        conn.execute("PRAGMA synchronous=NORMAL")
        return conn

    def _run(self, operation: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``operation`` in one transaction, retrying a bounded number of times when busy."""
        for attempt in range(self.max_retries + 1):
            try:
                with closing(self._connect()) as conn, conn:
                    return operation(conn)
            except sqlite3.OperationalError as err:
                if not _is_busy(err) or attempt == self.max_retries:
                    raise
                time.sleep(min(0.05 * 2**attempt, 2.0))
        raise AssertionError("unreachable: the last attempt returns or raises")

    @staticmethod
    def _create_schema(conn: sqlite3.Connection) -> None:
        """Switch the file to WAL mode and create the table if needed."""
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(_SCHEMA)

    def get_many(self, model_id: str, texts: Sequence[str]) -> dict[str, np.ndarray]:
        """Look up vectors; updates :attr:`counters` once per distinct text.

        Args:
            model_id: The encoder's :attr:`~rg.text.TextEncoder.model_id`.
            texts: Texts to look up (duplicates allowed).

        Returns:
            The found texts mapped to their float32 vectors; absent texts are left out.
        """
        by_key = {text_key(t): t for t in texts}
        keys = list(by_key)

        def select(conn: sqlite3.Connection) -> list[tuple[bytes, int, bytes]]:
            rows: list[tuple[bytes, int, bytes]] = []
            for chunk in _chunks(keys, _CHUNK):
                marks = ",".join("?" * len(chunk))
                query = f"SELECT text_key, dim, vector FROM embeddings WHERE model_id = ? AND text_key IN ({marks})"
                rows += conn.execute(query, (model_id, *chunk)).fetchall()
            return rows

        rows = self._run(select) if keys else []
        found = {
            by_key[key]: np.frombuffer(blob, dtype=_DTYPE, count=dim).astype(np.float32)
            for key, dim, blob in rows
        }
        self.counters.hits += len(found)
        self.counters.misses += len(keys) - len(found)
        return found

    def put_many(self, model_id: str, texts: Sequence[str], vectors: np.ndarray) -> None:
        """Store one vector per text in one transaction; existing entries are kept.

        Args:
            model_id: The encoder's model id.
            texts: Texts, aligned with the rows of ``vectors``.
            vectors: Shape ``(len(texts), D)``; stored as float32.
        """
        vectors = np.asarray(vectors)
        if vectors.ndim != 2 or vectors.shape[0] != len(texts):
            raise ValueError(f"expected vectors of shape ({len(texts)}, D), got {vectors.shape}")
        dim = vectors.shape[1]
        rows = [
            (model_id, text_key(t), dim, np.ascontiguousarray(v, dtype=_DTYPE).tobytes())
            for t, v in zip(texts, vectors)
        ]

        def insert(conn: sqlite3.Connection) -> None:
            conn.executemany(
                "INSERT OR IGNORE INTO embeddings (model_id, text_key, dim, vector) VALUES (?, ?, ?, ?)", rows
            )

        if rows:
            self._run(insert)
        self.counters.writes += len(rows)

    def count(self, model_id: str | None = None) -> int:
        """Number of stored vectors, for one model id or for all of them."""

        def select(conn: sqlite3.Connection) -> int:
            if model_id is None:
                row = conn.execute("SELECT COUNT(*) FROM embeddings").fetchone()
            else:
                query = "SELECT COUNT(*) FROM embeddings WHERE model_id = ?"
                row = conn.execute(query, (model_id,)).fetchone()
            return int(row[0])

        return self._run(select)
