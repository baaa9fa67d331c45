"""The sealed record file: tamper evidence, wrong key, torn tails, crash safety, no plaintext."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from rg.memory.keys import KeyConfig, MemoryKeyError, load_key, new_key_hex, parse_key
from rg.memory.sealed import FRAME_MAGIC, SealedFileError, SealedLog, read_sealed

KEY = bytes(range(32))


def test_round_trip_and_reload(tmp_path):
    path = tmp_path / "log.sealed"
    with SealedLog(path, KEY) as log:
        ids = [log.append(f"record {i}".encode()) for i in range(5)]
    report = read_sealed(path, KEY)
    assert [rid for rid, _ in report.records] == ids
    assert [d for _, d in report.records] == [f"record {i}".encode() for i in range(5)]
    assert report.refused == [] and report.torn_bytes == 0


def test_fresh_nonce_per_record(tmp_path):
    path = tmp_path / "log.sealed"
    with SealedLog(path, KEY) as log:
        log.append(b"same", b"\x01" * 16)
        first = path.read_bytes()
        log.append(b"same", b"\x01" * 16)
    data = path.read_bytes()
    a, b = data[len(first) - 40:len(first)], data[-40:]
    assert a != b  # same id and plaintext, different nonce and ciphertext


def test_no_plaintext_in_bytes(tmp_path):
    path = tmp_path / "log.sealed"
    secret = b'{"indicator": "Alan Turing", "field": "answers"}'
    with SealedLog(path, KEY) as log:
        log.append(secret)
    data = path.read_bytes()
    for needle in (b"Alan", b"Turing", b"indicator", b"answers", b"field"):
        assert needle not in data


@pytest.mark.parametrize("where", ["body", "length", "magic", "nonce", "tag"])
def test_one_flipped_byte_refuses_only_that_record(tmp_path, where):
    path = tmp_path / "log.sealed"
    with SealedLog(path, KEY) as log:
        for i in range(5):
            log.append(f"record number {i}".encode())
    data = bytearray(path.read_bytes())
    starts = [i for i in range(len(data)) if data[i:i + 4] == FRAME_MAGIC]
    third = starts[3]  # frame 0 is the key check; this is record 2
    offset = {"magic": 1, "length": 6, "nonce": 8 + 1 + 16 + 3, "body": 8 + 1 + 16 + 12 + 2, "tag": starts[4] - third - 1}
    data[third + offset[where]] ^= 0x40
    path.write_bytes(bytes(data))
    report = read_sealed(path, KEY)
    assert [d for _, d in report.records] == [f"record number {i}".encode() for i in (0, 1, 3, 4)]
    assert len(report.refused) == 1 and report.refused[0].offset == third


def test_wrong_key_is_a_clear_error(tmp_path):
    path = tmp_path / "log.sealed"
    with SealedLog(path, KEY) as log:
        log.append(b"x")
    with pytest.raises(MemoryKeyError, match="key"):
        read_sealed(path, bytes(32))
    with pytest.raises(MemoryKeyError, match="memory.key"):
        SealedLog(path, bytes(32))


def test_not_a_sealed_file(tmp_path):
    path = tmp_path / "plain.txt"
    path.write_bytes(b"hello world")
    with pytest.raises(SealedFileError, match="not a sealed memory file"):
        read_sealed(path, KEY)


def test_torn_tail_dropped_and_cut_before_next_append(tmp_path):
    path = tmp_path / "log.sealed"
    with SealedLog(path, KEY) as log:
        log.append(b"one")
        log.append(b"two")
    data = path.read_bytes()
    path.write_bytes(data[:-7])  # the last write cut short
    report = read_sealed(path, KEY)
    assert [d for _, d in report.records] == [b"one"] and report.torn_bytes > 0 and not report.refused
    with SealedLog(path, KEY) as log:
        log.append(b"three")
    report = read_sealed(path, KEY)
    assert [d for _, d in report.records] == [b"one", b"three"] and report.torn_bytes == 0


def test_compaction_replaces_atomically(tmp_path):
    path = tmp_path / "log.sealed"
    with SealedLog(path, KEY) as log:
        for i in range(10):
            log.append(b"old %d" % i)
        before = log.size()
        log.compact([(b"\x02" * 16, b"kept")])
        assert log.size() < before
        log.append(b"after")
    report = read_sealed(path, KEY)
    assert [d for _, d in report.records] == [b"kept", b"after"]
    assert not list(tmp_path.glob("*.compact"))


def test_one_writer(tmp_path):
    path = tmp_path / "log.sealed"
    with SealedLog(path, KEY):
        with pytest.raises(SealedFileError, match="another process"):
            SealedLog(path, KEY)


def test_key_sources(tmp_path, monkeypatch):
    monkeypatch.delenv("RG_TEST_MEMKEY", raising=False)
    with pytest.raises(MemoryKeyError, match="RG_TEST_MEMKEY is not set"):
        load_key(KeyConfig(env="RG_TEST_MEMKEY"))
    monkeypatch.setenv("RG_TEST_MEMKEY", new_key_hex())
    assert len(load_key(KeyConfig(env="RG_TEST_MEMKEY"))) == 32
    with pytest.raises(MemoryKeyError, match="memory.key.file"):
        load_key(KeyConfig(file=str(tmp_path / "missing.key")))
    (tmp_path / "k").write_text("abc")
    with pytest.raises(MemoryKeyError, match="not a key|bytes"):
        load_key(KeyConfig(file=str(tmp_path / "k")))
    assert parse_key(KEY, "raw") == KEY


WRITER = """
import sys
from rg.memory.sealed import SealedLog
log = SealedLog(sys.argv[1], bytes(range(32)))
for i in range(20_000):  # bounded (about 60 MB); the test kills it long before
    log.append(b"record %06d " % i + b"x" * 3000)
    print(i, flush=True)
"""


def test_sigkill_mid_append_loses_at_most_the_record_in_flight(tmp_path):
    path = tmp_path / "log.sealed"
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path)], stdout=subprocess.PIPE, text=True)
    acked = -1
    started = time.monotonic()
    try:
        while acked < 40 and time.monotonic() - started < 30:
            line = proc.stdout.readline()
            if not line:
                break
            acked = int(line)
    finally:  # the writer never outlives the test
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    for line in proc.stdout:  # acknowledgements written before the kill
        acked = int(line)
    proc.stdout.close()
    assert acked >= 40
    report = read_sealed(path, KEY)
    n = len(report.records)
    assert n in (acked + 1, acked + 2), (n, acked)  # every acknowledged record, plus at most the one in flight
    assert [d[:14] for _, d in report.records] == [b"record %06d " % i for i in range(n)]
    assert not report.refused
    with SealedLog(path, KEY) as log:  # reopening cuts any torn tail; appends go on cleanly
        log.append(b"after the crash")
    assert read_sealed(path, KEY).records[-1][1] == b"after the crash"
