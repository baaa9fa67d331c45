"""A quiet console for jobs: the job's own lines, progress bars, tables and errors on the terminal;
Ray's INFO lines, its C++ ``core_worker`` messages and dependencies' warnings in the run's log file.

:func:`quiet_console` points the process's standard error (file descriptor 2, which Ray's C++ core
writes to, and ``sys.stderr``, which Ray's Python handlers look up at every record) at a log file,
and keeps a duplicate of the terminal's standard error for what the user reads. Code that writes for
the user asks :func:`user_stream` for it: progress bars, one-line errors, notices. Warnings are
captured into the log. The log's path is printed once; ``--verbose`` leaves everything on the
terminal. On leaving, standard error is restored before an unexpected error's traceback is printed,
so errors stay visible.

The terminal's descriptor is passed in the environment as ``<pid>:<fd>`` (:data:`CONSOLE_ENV`), so a
process that inherited the variable (a Ray worker) writes to its own standard error instead.
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

CONSOLE_ENV = "RG_CONSOLE"
"""``<pid>:<fd>`` of the terminal's standard error while a quiet console is open in process ``pid``."""
LOG_DIR_ENV = "RG_LOG_DIR"
"""Folder of the run logs (default: ``<temp dir>/rg-logs``)."""


def user_stream() -> TextIO:
    """Where the user reads: the terminal while a quiet console is open in this process, else ``sys.stderr``."""
    pid, _, fd = os.environ.get(CONSOLE_ENV, "").partition(":")
    if pid != str(os.getpid()) or not fd.isdigit():
        return sys.stderr
    return open(int(fd), "w", buffering=1, closefd=False, encoding=getattr(sys.stderr, "encoding", None) or "utf-8",
                errors="replace")


def log_path(module: str, folder: str | Path | None = None) -> Path:
    """A new log file's path for one run of ``module``."""
    root = Path(folder or os.environ.get(LOG_DIR_ENV) or Path(tempfile.gettempdir()) / "rg-logs")
    root.mkdir(parents=True, exist_ok=True)
    return root / f"{module}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"


@contextmanager
def quiet_console(module: str, verbose: bool = False, folder: str | Path | None = None) -> Iterator[Path | None]:
    """Send standard error to the run's log for the duration (module docstring); yields the log's path,
    None with ``verbose`` (nothing is redirected)."""
    if verbose:
        yield None
        return
    path = log_path(module, folder)
    sys.stdout.flush()
    sys.stderr.flush()
    log = open(path, "a", buffering=1, encoding="utf-8")
    terminal = os.dup(2)
    os.dup2(log.fileno(), 2)
    os.environ[CONSOLE_ENV] = f"{os.getpid()}:{terminal}"
    warnings_logger = logging.getLogger("py.warnings")
    handler = logging.StreamHandler(log)
    warnings_logger.addHandler(handler)
    propagate, warnings_logger.propagate = warnings_logger.propagate, False
    logging.captureWarnings(True)
    print(f"Ray's and dependencies' messages: {path} (--verbose shows them here)", file=user_stream())
    try:
        yield path
    finally:
        logging.captureWarnings(False)
        warnings_logger.removeHandler(handler)
        warnings_logger.propagate = propagate
        sys.stderr.flush()
        os.dup2(terminal, 2)
        os.close(terminal)
        os.environ.pop(CONSOLE_ENV, None)
        log.close()
