"""A usage journal that survives kills and reruns: one JSON line per completed LLM call.

A job's in-memory :class:`~rg.llm.usage.UsageLedger` reaches the driver only with the batches
that finish, so calls made by a run that is killed (or whose answers are never written) vanish
from its report. The journal is appended by the client itself, in whatever process the call
ran (a Ray actor), as each call completes, with one ``O_APPEND`` write per line so that
concurrent actors do not interleave. :func:`read_journal` sums it into a ledger, over all runs
or one.

    journal = UsageJournal("out/llm_usage.jsonl", run="a1b2c3")
    client = OpenAICompatibleClient(cfg, journal=journal)
    read_journal("out/llm_usage.jsonl").total().calls
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from rg.llm.usage import Usage, UsageLedger


class UsageJournal:
    """Appends one line per booked call to a JSON Lines file.

    Args:
        path: The journal file (created with its folder on first use; on a cluster it must be on
            storage every node can write).
        run: Id of the run the calls belong to (one per job submission).
    """

    def __init__(self, path: str | Path, run: str) -> None:
        self.path = str(path)
        self.run = run

    def append(self, stage: str, side: str, usage: Usage, **extra: str) -> None:
        """Record one call; each line is written with a single ``write`` on an ``O_APPEND`` file."""
        line = json.dumps({"run": self.run, "time": time.time(), "stage": stage, "side": side,
                           "usage": usage.to_dict(), **extra}) + "\n"
        Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)


def read_journal(path: str | Path, run: str | None = None) -> UsageLedger:
    """Sum a journal into a ledger (every run, or only ``run``); a missing file is an empty ledger.

    A torn last line (a kill in mid-write) is skipped.
    """
    ledger = UsageLedger()
    path = Path(path)
    if not path.is_file():
        return ledger
    with path.open() as handle:
        for text in handle:
            try:
                entry = json.loads(text)
            except ValueError:
                continue
            if run is None or entry.get("run") == run:
                ledger.add(entry["stage"], entry["side"], Usage.from_dict(entry["usage"]))
    return ledger
