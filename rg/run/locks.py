"""One writer per output: a job holds a lock on its output location for its lifetime.

Two jobs writing into one folder would double every row (and every LLM call) and leave which
one wins to file order. :func:`output_lock` takes an operating-system file lock (``filelock``,
``flock`` on POSIX) beside the output folder — beside, so that ``--fresh`` may delete the folder
while holding it — and records who holds it. A second job into the same place fails at once
with :class:`OutputLockedError` naming the holder. The kernel drops the lock when its process
dies, so a lock left by a killed job is simply taken over.

Outputs at a URI (``s3://``, ``gs://``) cannot be locked this way: a job stages them in a local
folder (locked here) and holds a lock object at the URI instead (:mod:`rg.run.remote`).
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from filelock import FileLock, Timeout

from rg.run.integrity import write_json_atomic


class OutputLockedError(RuntimeError):
    """Another live job holds the lock on an output location; the message names it and the fix."""


def lock_paths(output: str | Path) -> tuple[Path, Path]:
    """``(lock file, holder record)`` of an output folder or file: hidden files beside it."""
    output = Path(output).resolve()
    return output.parent / f".{output.name}.rg-lock", output.parent / f".{output.name}.rg-lock.json"


def describe_holder(record: Path) -> str:
    """The holder of a lock in words (pid, host, command, start time), as far as it is recorded."""
    try:
        data = json.loads(record.read_text())
    except (OSError, ValueError):
        return "another process (no holder record)"
    since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(data.get("since", 0)))
    return f"pid {data.get('pid')} on {data.get('host')} ({data.get('command')}, since {since})"


@contextmanager
def output_lock(output: str | Path, job: str, key: str = "output_dir") -> Iterator[None]:
    """Hold the lock on ``output`` for the duration of the ``with`` block.

    Args:
        output: The job's output folder (or file); created parents are not needed.
        job: The job's name for the holder record, e.g. ``jobs.refine``.
        key: The config key that names ``output`` (for the error message).

    Raises:
        OutputLockedError: at once when a live process holds the lock.
    """
    if "://" in str(output):
        yield
        return
    lock_file, record = lock_paths(output)
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(lock_file), timeout=0)
    try:
        lock.acquire()
    except Timeout:
        raise OutputLockedError(
            f"{key} {Path(output).resolve()} is in use by {describe_holder(record)}. "
            f"Fix: wait for that job to finish (or stop it), or set another `{key}`"
        ) from None
    try:
        write_json_atomic(
            {"pid": os.getpid(), "host": socket.gethostname(), "command": f"{job} {' '.join(sys.argv[1:])}".strip(),
             "since": time.time()},
            record,
        )
        yield
    finally:
        record.unlink(missing_ok=True)
        lock.release()
