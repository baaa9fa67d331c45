"""What machine a benchmark ran on: CPU model and the flags that decide torch's kernels, cores, threads,
load and the commit, recorded with every figure so a reader can tell which machine made it."""

from __future__ import annotations

import os
import platform
import subprocess
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


def machine() -> dict[str, Any]:
    """Everything above, plus cores, torch's threads and the 1-minute load average now."""
    import torch

    return {**cpu_facts(), "cores": os.cpu_count(), "torch_threads": torch.get_num_threads(),
            "load_1min": round(os.getloadavg()[0], 2), "commit": commit(), "python": platform.python_version()}
