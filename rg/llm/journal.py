"""A usage journal that survives kills and reruns: one JSON line per completed LLM call.

A job's in-memory :class:`~rg.llm.usage.UsageLedger` reaches the driver only with the batches
that finish, so calls made by a run that is killed (or whose answers are never written) vanish
from its report. The journal is appended by the client itself, in whatever process the call
ran (a Ray actor), as each call completes, with one ``O_APPEND`` write per line so that
concurrent actors do not interleave. :func:`read_journal` sums it into a ledger, over all runs
or one.

    journal = UsageJournal(Path(output_dir) / JOURNAL_FILE, run=new_run_id())
    client = OpenAICompatibleClient(cfg, journal=journal)
    read_journal(journal.path).total().calls              # every run's calls
    journal_usage(journal.path, journal.run)              # the report's two ledgers

Every LLM stage books here in the same format: refine (``rg.jobs.refine``), the QA evaluation's
LLM reader and the dual tower's LLM Brain (``rg.jobs.evaluate_qa``) and the Serve BrainProxy
(``serve.brain_proxy``). Each entry records the side (``hand`` or ``brain``) of the client that
made the call, so :meth:`~rg.llm.usage.UsageLedger.by_side` of a read journal is the usage per side.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path
from typing import Any

from rg.llm.usage import SIDES, Usage, UsageLedger

JOURNAL_FILE = "llm_usage.jsonl"
"""The journal's name beside a job's outputs: one line per LLM call of every run into that folder."""


def new_run_id() -> str:
    """A fresh run id (12 hex digits), one per job submission or Serve replica."""
    return uuid.uuid4().hex[:12]


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


def usage_by_side(ledger: UsageLedger) -> dict[str, dict[str, int | float]]:
    """``{side: usage}`` for both sides (``hand`` and ``brain``; a side with no call is all zeros)."""
    sides = ledger.by_side()
    return {side: sides.get(side, Usage()).to_dict() for side in SIDES}


def journal_usage(path: str | Path, run: str) -> dict[str, Any]:
    """The report keys of a job whose calls are all journaled: ``llm_usage_this_run`` (this run's
    entries), ``llm_usage_all_runs`` (every run's, killed runs included; same shape,
    :meth:`UsageLedger.to_dict`) and ``llm_usage_all_runs_by_side`` (:func:`usage_by_side`)."""
    every = read_journal(path)
    return {"llm_journal": str(Path(path).resolve()), "llm_usage_this_run": read_journal(path, run).to_dict(),
            "llm_usage_all_runs": every.to_dict(), "llm_usage_all_runs_by_side": usage_by_side(every)}
