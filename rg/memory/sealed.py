"""An encrypted, append-only record file (AES-256-GCM), crash-safe and tamper-evident.

Layout: an 8-byte file magic, then frames. Every frame is
``FRAME_MAGIC (4) | length (4, big-endian) | version (1) | record id (16) | nonce (12) | ciphertext+tag``.
The first frame is a key check (a fixed plaintext under the all-zero record id): opening a file
with another key fails at once with :class:`~rg.memory.keys.MemoryKeyError`. Each record gets a
fresh random 12-byte nonce; the record id and the format version are bound as associated data, so
a frame cannot be moved under another id or replayed as another version.

Loading walks the frames: a frame that fails authentication (one flipped byte anywhere in it) is
refused and reported, and reading resumes at the next frame magic, so the rest load. An incomplete
frame at the end (a writer killed mid-append) is a *torn tail*: reported, dropped, and cut off
before the next append. Appends are one ``write`` and an ``fsync``; compaction writes the live
records to a temporary file in the same folder, fsyncs it and ``os.replace``-s the original.

One process writes a file at a time: :meth:`SealedLog.open` takes an OS file lock beside it
(released by :meth:`SealedLog.close` or when the process dies); :func:`read_sealed` only reads.
"""

from __future__ import annotations

import os
import secrets
import struct
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from filelock import FileLock, Timeout

from rg.memory.keys import KEY_BYTES, MemoryKeyError
from rg.run.integrity import fsync_dir

FILE_MAGIC = b"RGSEAL\x00\x01"
FRAME_MAGIC = b"\xa7RGf"
VERSION = 1
ID_BYTES = 16
NONCE_BYTES = 12
HEADER = struct.Struct(">4sI")
KEY_CHECK_ID = bytes(ID_BYTES)
KEY_CHECK = b"rg.memory key check"
AD_PREFIX = b"rg.memory.sealed"


class SealedFileError(RuntimeError):
    """The file is not a sealed record file, or another process holds its writer lock."""


@dataclass(frozen=True)
class Refused:
    """A frame that did not authenticate (tampered or damaged): where and why."""

    offset: int
    reason: str


@dataclass
class LoadReport:
    """What a load found.

    Attributes:
        records: (record id, plaintext) in file order.
        refused: Frames refused (their records are not in ``records``).
        torn_bytes: Bytes of an incomplete last frame (dropped; 0 when the file ends cleanly).
        good_end: Offset where the last complete frame ends.
    """

    records: list[tuple[bytes, bytes]] = field(default_factory=list)
    refused: list[Refused] = field(default_factory=list)
    torn_bytes: int = 0
    good_end: int = 0


def _ad(version: int, record_id: bytes) -> bytes:
    return AD_PREFIX + bytes([version]) + record_id


def seal_frame(aead: AESGCM, record_id: bytes, data: bytes) -> bytes:
    """One frame for ``data`` under ``record_id`` with a fresh nonce."""
    if len(record_id) != ID_BYTES:
        raise ValueError(f"record id must be {ID_BYTES} bytes, got {len(record_id)}")
    nonce = secrets.token_bytes(NONCE_BYTES)
    body = bytes([VERSION]) + record_id + nonce + aead.encrypt(nonce, data, _ad(VERSION, record_id))
    return HEADER.pack(FRAME_MAGIC, len(body)) + body


def _open_body(aead: AESGCM, body: bytes) -> tuple[bytes, bytes]:
    """(record id, plaintext); InvalidTag or ValueError when the body does not authenticate."""
    if len(body) < 1 + ID_BYTES + NONCE_BYTES + 16:
        raise ValueError("frame too short")
    version, record_id = body[0], body[1: 1 + ID_BYTES]
    if version != VERSION:
        raise ValueError(f"format version {version} (this code reads {VERSION})")
    nonce = body[1 + ID_BYTES: 1 + ID_BYTES + NONCE_BYTES]
    return record_id, aead.decrypt(nonce, body[1 + ID_BYTES + NONCE_BYTES:], _ad(version, record_id))


def parse(data: bytes, key: bytes, source: str = "<bytes>") -> LoadReport:
    """Every record of a sealed file's bytes (module docstring).

    Raises:
        SealedFileError: when the bytes do not start like a sealed file.
        MemoryKeyError: when the key check does not open with ``key``.
    """
    if not data.startswith(FILE_MAGIC):
        raise SealedFileError(f"{source} is not a sealed memory file (bad magic). Fix: point memory paths at files "
                              "this code wrote, or at a new path")
    aead = AESGCM(key)
    report = LoadReport(good_end=len(FILE_MAGIC))
    pos, size, checked = len(FILE_MAGIC), len(data), False
    while pos < size:
        head = data[pos: pos + HEADER.size]
        magic, length = HEADER.unpack(head) if len(head) == HEADER.size else (b"", 0)
        end = pos + HEADER.size + length
        if magic != FRAME_MAGIC or end > size:
            nxt = data.find(FRAME_MAGIC, pos + 1)
            if nxt == -1:  # an incomplete last frame: a write cut short
                report.torn_bytes = size - pos
                break
            report.refused.append(Refused(pos, "damaged frame header"))
            pos = nxt
            continue
        try:
            record_id, plain = _open_body(aead, data[pos + HEADER.size: end])
        except (InvalidTag, ValueError) as err:
            if not checked:
                raise MemoryKeyError(f"{source}: the key does not open this file (its key check fails). Fix: use the "
                                     "key the file was written with (memory.key.env / memory.key.file)") from None
            report.refused.append(Refused(pos, f"authentication failed ({type(err).__name__})"))
            nxt = data.find(FRAME_MAGIC, pos + 1)
            pos = nxt if nxt != -1 else size
            report.good_end = pos
            continue
        if not checked:
            if record_id != KEY_CHECK_ID or plain != KEY_CHECK:
                raise SealedFileError(f"{source}: the first frame is not the key check")
            checked = True
        else:
            report.records.append((record_id, plain))
        pos = end
        report.good_end = end
    if not checked:
        raise MemoryKeyError(f"{source}: the key check frame is missing or damaged; the file cannot be opened safely. "
                             "Fix: restore the file from a copy or move it away to start a new memory")
    return report


def read_sealed(path: str | Path, key: bytes) -> LoadReport:
    """Read a sealed file without taking its writer lock."""
    return parse(Path(path).read_bytes(), key, str(path))


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


class SealedLog:
    """The single writer of one sealed file (module docstring).

    Args:
        path: The file (created with its folder when missing).
        key: 32 key bytes (:func:`rg.memory.keys.load_key`).

    Raises:
        SealedFileError: when another process holds the writer lock.
        MemoryKeyError: when the key does not open an existing file.
    """

    def __init__(self, path: str | Path, key: bytes) -> None:
        if len(key) != KEY_BYTES:
            raise MemoryKeyError(f"the key has {len(key)} bytes, not {KEY_BYTES}")
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._aead = AESGCM(key)
        self._key = key
        self._lock = FileLock(str(self.path) + ".lock")
        try:
            self._lock.acquire(timeout=0)
        except Timeout:
            raise SealedFileError(f"{self.path} is open for writing by another process (lock {self._lock.lock_file}). "
                                  "Fix: let one owner write it (the memory's Ray actor) or use another path") from None
        if not self.path.exists() or self.path.stat().st_size == 0:
            self._create()
        self.report = self.load()
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        if self.report.torn_bytes:  # cut the torn frame off before anything is appended after it
            os.truncate(self.path, self.report.good_end)
            os.fsync(self._fd)

    def _header(self) -> bytes:
        return FILE_MAGIC + seal_frame(self._aead, KEY_CHECK_ID, KEY_CHECK)

    def _create(self) -> None:
        tmp = self.path.with_name(self.path.name + ".new")
        tmp.write_bytes(self._header())
        with open(tmp, "rb+") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, self.path)
        fsync_dir(self.path.parent)

    def load(self) -> LoadReport:
        """Every readable record of the file now (refusals and a torn tail reported)."""
        return read_sealed(self.path, self._key)

    @staticmethod
    def new_id() -> bytes:
        return secrets.token_bytes(ID_BYTES)

    def append(self, data: bytes, record_id: bytes | None = None) -> bytes:
        """Append one record durably (write + fsync); returns its id."""
        record_id = record_id if record_id is not None else self.new_id()
        _write_all(self._fd, seal_frame(self._aead, record_id, data))
        os.fsync(self._fd)
        return record_id

    def append_many(self, items: Iterable[tuple[bytes, bytes]]) -> int:
        """Append (id, data) records with one fsync at the end; returns how many."""
        frames = [seal_frame(self._aead, rid, data) for rid, data in items]
        if frames:
            _write_all(self._fd, b"".join(frames))
            os.fsync(self._fd)
        return len(frames)

    def compact(self, items: Iterable[tuple[bytes, bytes]]) -> int:
        """Replace the file by exactly ``items`` (fresh nonces), atomically; returns how many."""
        tmp = self.path.with_name(self.path.name + ".compact")
        frames = [seal_frame(self._aead, rid, data) for rid, data in items]
        with open(tmp, "wb") as handle:
            handle.write(self._header() + b"".join(frames))
            handle.flush()
            os.fsync(handle.fileno())
        os.close(self._fd)
        os.replace(tmp, self.path)
        fsync_dir(self.path.parent)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        return len(frames)

    def size(self) -> int:
        return self.path.stat().st_size

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        if self._lock.is_locked:
            self._lock.release()

    def __enter__(self) -> "SealedLog":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
