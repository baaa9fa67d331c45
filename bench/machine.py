"""What machine a benchmark ran on: CPU model and the flags that decide torch's kernels, cores, threads,
load and the commit, recorded with every figure so a reader can tell which machine made it.

Every benchmark writes its report through :func:`write_report`, which adds one ``machine`` block
(:meth:`RunRecord.facts`): the command, commit, CPU model and flags, cores, torch threads, the
1-minute load average before and after, and the run's wall seconds. Absolute times move 3-4x
between CPUs (an AVX2-only Xeon against an AVX512-BF16 EPYC), so the targets are ratios to a
baseline timed in the same run and these facts say which machine made the absolute figures.
"""

from __future__ import annotations

import json
import os
import platform
import shlex
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile", "amx_int8")
"""CPU flags that change what torch runs: AVX2 only, AVX-512, native bf16 (AVX512-BF16, AMX)."""


def cpu_facts(cpuinfo: str | None = None) -> dict[str, Any]:
    """CPU model and which of :data:`FLAGS` it has (from ``/proc/cpuinfo``; empty elsewhere)."""
    if cpuinfo is None:
        path = Path("/proc/cpuinfo")
        cpuinfo = path.read_text() if path.exists() else ""
    model, flags = platform.processor() or platform.machine(), set()
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name" and value.strip():
            model = value.strip()
        elif key.strip() == "flags":
            flags = set(value.split())
    return {"cpu_model": model, "cpu_flags": {flag: flag in flags for flag in FLAGS}}


def commit() -> str | None:
    """The checkout's commit, with ``+dirty`` when it has uncommitted changes; None outside git."""
    root = Path(__file__).resolve().parents[1]
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True)
        dirty = subprocess.run(["git", "status", "--porcelain"], cwd=root, capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def _torch_threads() -> int | None:
    """torch's intra-op threads, or None when torch is not installed."""
    try:
        import torch
    except ImportError:
        return None
    return torch.get_num_threads()


def machine() -> dict[str, Any]:
    """Everything above, plus cores, torch's threads and the 1-minute load average now."""
    return {**cpu_facts(), "cores": os.cpu_count(), "torch_threads": _torch_threads(),
            "load_1min": round(os.getloadavg()[0], 2), "commit": commit(), "python": platform.python_version()}


class RunRecord:
    """One benchmark run: started when made (load and clock read then), closed by :meth:`facts`.

    Args:
        module: the benchmark's module (``bench.graph_ops``), for the command line it records.
        argv: the arguments it was called with (``sys.argv[1:]`` when None).
    """

    def __init__(self, module: str, argv: Sequence[str] | None = None) -> None:
        args = list(sys.argv[1:] if argv is None else argv)
        self.command = " ".join(["python", "-m", module, *(shlex.quote(str(a)) for a in args)])
        self.commit = commit()
        self.load_before = round(os.getloadavg()[0], 2)
        self.began = time.perf_counter()

    def facts(self) -> dict[str, Any]:
        """The ``machine`` block: command, commit, CPU, cores, torch threads (as the run left them), load before
        and after, wall seconds since the record was made."""
        return {"command": self.command, "commit": self.commit, **cpu_facts(), "cores": os.cpu_count(),
                "torch_threads": _torch_threads(), "python": platform.python_version(),
                "load_1min_before": self.load_before, "load_1min_after": round(os.getloadavg()[0], 2),
                "wall_seconds": round(time.perf_counter() - self.began, 1)}


def write_report(out: Path | str, report: dict[str, Any], record: RunRecord, indent: int = 2) -> dict[str, Any]:
    """Add ``record``'s ``machine`` block to ``report`` and write it whole to ``out`` (JSON); returns the report."""
    report["machine"] = record.facts()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=indent) + "\n")
    return report
