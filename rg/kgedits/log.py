"""The durable, append-only edit log: one framed record per accepted batch, fsynced before the reply.

Layout: a header line ``RGKGEDITLOG1\\n``, then records, each::

    b"RGE1" | length (uint32, big-endian) | CRC-32 of the payload (uint32) | payload (JSON of an EditRecord)

An append is one ``write`` of the whole frame and an ``fsync`` (the folder is fsynced when the file
is created), so a batch acknowledged to a client survives a crash of the process or the machine.
A crash *during* an append can leave a torn last record (a short frame, or a payload whose CRC does
not match). :meth:`EditLog.open` detects it, names it (offset, bytes, reason) in
:attr:`LogReport.torn`, keeps a copy of its bytes beside the log (``<log>.torn-<offset>``), cuts it
off and replays the records before it: the torn batch was never acknowledged, since its fsync had
not returned. Damage anywhere but at the end is not a torn append and fails loudly
(:class:`EditLogError`), as do versions that are not consecutive. One process writes a log at a
time (an OS file lock beside it, as :class:`rg.memory.sealed.SealedLog` does).
"""

from __future__ import annotations

import os
import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from filelock import FileLock, Timeout

from rg.kgedits.model import EditRecord
from rg.run.integrity import fsync_dir

HEADER = b"RGKGEDITLOG1\n"
FRAME = struct.Struct(">4sII")
MAGIC = b"RGE1"


class EditLogError(RuntimeError):
    """The log cannot be used: not an edit log, damaged before its end, versions out of order, or locked."""


@dataclass(frozen=True)
class TornRecord:
    """A torn last record, cut off on open.

    Attributes:
        offset: Byte offset where it began.
        size: Bytes it had.
        reason: ``short_frame``, ``short_payload``, ``checksum`` or ``bad_payload``.
        saved_to: Where its bytes were kept.
    """

    offset: int
    size: int
    reason: str
    saved_to: str

    def describe(self) -> str:
        return (f"torn last record at byte {self.offset} ({self.size} bytes, {self.reason}): an append that did not "
                f"finish, never acknowledged; cut off, bytes kept in {self.saved_to}")


@dataclass
class LogReport:
    """What opening the log found: the records to replay and the torn tail, if any."""

    records: list[EditRecord] = field(default_factory=list)
    torn: TornRecord | None = None


def frame(record: EditRecord) -> bytes:
    payload = record.to_bytes()
    return FRAME.pack(MAGIC, len(payload), zlib.crc32(payload)) + payload


def scan(data: bytes, path: str) -> tuple[list[EditRecord], int, str | None]:
    """Records of a log's bytes, the offset where the valid part ends, and why it ends there (None: at EOF).

    Raises:
        EditLogError: for a bad header or damage followed by more data.
    """
    if not data.startswith(HEADER):
        raise EditLogError(f"{path} is not an rg edit log (its first bytes are {data[:16]!r}). Fix: point "
                           "kg_edits.log_path at an edit log or at a new file")
    records: list[EditRecord] = []
    at = len(HEADER)
    while at < len(data):
        rest = len(data) - at
        if rest < FRAME.size:
            return records, at, "short_frame"
        magic, length, crc = FRAME.unpack_from(data, at)
        if magic != MAGIC:
            raise EditLogError(f"{path}: no record frame at byte {at} (found {data[at:at + 4]!r}); the log is damaged "
                               "before its end, which a crash during an append cannot do. Fix: restore the log from a "
                               "copy; the records before this byte are intact")
        end = at + FRAME.size + length
        if end > len(data):
            return records, at, "short_payload"
        payload = data[at + FRAME.size:end]
        last = end == len(data)
        if zlib.crc32(payload) != crc:
            if last:
                return records, at, "checksum"
            raise EditLogError(f"{path}: the record at byte {at} fails its checksum and more records follow; the log "
                               "is damaged before its end. Fix: restore the log from a copy")
        try:
            record = EditRecord.from_bytes(payload)
        except (ValueError, KeyError, TypeError) as err:
            if last:
                return records, at, "bad_payload"
            raise EditLogError(f"{path}: the record at byte {at} does not parse ({err})") from None
        expected = (records[-1].version if records else 0) + 1
        if record.version != expected:
            raise EditLogError(f"{path}: the record at byte {at} is version {record.version}, expected {expected}: "
                               "versions must be consecutive. Fix: restore the log from a copy")
        records.append(record)
        at = end
    return records, at, None


def read_log(path: str | Path) -> LogReport:
    """Read a log without taking its writer lock or cutting a torn tail (what the CLI's ``--check`` prints)."""
    path = Path(path)
    if not path.exists():
        return LogReport()
    data = path.read_bytes()
    records, end, reason = scan(data, str(path))
    torn = TornRecord(end, len(data) - end, reason, "") if reason is not None else None
    return LogReport(records, torn)


class EditLog:
    """The open, locked log of one writer (module docstring). Use :meth:`open`; close with :meth:`close`."""

    def __init__(self, path: Path, fd: int, lock: FileLock, report: LogReport) -> None:
        self.path, self._fd, self._lock, self.report = path, fd, lock, report
        self.records: list[EditRecord] = list(report.records)  # record i makes version i + 1

    @property
    def version(self) -> int:
        return len(self.records)

    @classmethod
    def open(cls, path: str | Path) -> "EditLog":
        """Open (or create) the log for appending: take the lock, read every record, cut a torn tail.

        Raises:
            EditLogError: when another process holds the log, or it is damaged before its end.
        """
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        lock = FileLock(str(path) + ".lock")
        try:
            lock.acquire(timeout=0)
        except Timeout:
            raise EditLogError(f"{path} is open for writing by another process (lock {lock.lock_file}). Fix: stop the "
                               "other writer (one edit owner per log), or use another kg_edits.log_path") from None
        try:
            report = cls._prepare(path)
            fd = os.open(path, os.O_WRONLY | os.O_APPEND)
        except BaseException:
            lock.release()
            raise
        return cls(path, fd, lock, report)

    @staticmethod
    def _prepare(path: Path) -> LogReport:
        if not path.exists() or path.stat().st_size == 0:
            with open(path, "wb") as handle:
                handle.write(HEADER)
                handle.flush()
                os.fsync(handle.fileno())
            fsync_dir(path.parent)
            return LogReport()
        data = path.read_bytes()
        records, end, reason = scan(data, str(path))
        torn = None
        if reason is not None:
            saved = path.with_name(f"{path.name}.torn-{end}")
            saved.write_bytes(data[end:])
            torn = TornRecord(end, len(data) - end, reason, str(saved))
            with open(path, "r+b") as handle:
                handle.truncate(end)
                handle.flush()
                os.fsync(handle.fileno())
        return LogReport(records, torn)

    def append(self, record: EditRecord) -> None:
        """Write one record and fsync; returns once it is durable.

        Raises:
            EditLogError: when the record's version does not follow the log's.
        """
        if record.version != self.version + 1:
            raise EditLogError(f"record version {record.version} does not follow the log's {self.version}")
        data = frame(record)
        written = os.write(self._fd, data)
        if written != len(data):
            raise OSError(f"short write to {self.path}: {written} of {len(data)} bytes")
        os.fsync(self._fd)
        self.records.append(record)

    def records_since(self, version: int) -> list[EditRecord]:
        """Records after ``version`` (in order)."""
        return self.records[max(version, 0):]

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        self._lock.release()

    def __enter__(self) -> "EditLog":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
