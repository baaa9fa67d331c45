"""The number format a local model's frozen weights run in: ``fp32``, ``bf16`` or ``auto``.

A LoRA adapter trains in fp32 either way (peft keeps adapter weights in fp32 over a bf16 base);
only the frozen base weights, and so the activations that flow through them, are bfloat16 with
``bf16``. On a CPU with native bfloat16 matrix units (AVX512-BF16 or AMX tiles, e.g. Xeon 4th
generation and later) a bf16 matmul runs about 5× faster than fp32, and SmolLM2-135M reads a 310-token
prompt about 1.8× faster; on a CPU without them bf16 is emulated and slower than fp32, which is why
``auto`` asks the hardware::

    dtype = resolve_dtype("auto")     # torch.bfloat16 on this AMX machine, torch.float32 on a laptop
"""

from __future__ import annotations

import platform
from typing import Literal

import torch

Precision = Literal["auto", "fp32", "bf16"]
"""``auto``: bf16 where the device computes it natively (see :func:`native_bf16`), else fp32."""


def native_bf16(cuda: bool | None = None) -> bool:
    """Whether this process's device multiplies bfloat16 natively.

    Args:
        cuda: Ask about the current CUDA device (default: when one is available), else the CPU.
    """
    if cuda is None:
        cuda = torch.cuda.is_available()
    if cuda:
        return bool(torch.cuda.is_bf16_supported())
    if not _avx512_kernels():
        return False
    # torch exposes the CPU's bf16 units only as private probes (torch 2.4-2.14 have both); a torch
    # without them is treated as a CPU without bf16 units
    probes = [getattr(torch.cpu, name, None) for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")]
    return any(bool(probe()) for probe in probes if probe is not None)


def _avx512_kernels() -> bool:
    """Whether torch dispatches to its AVX-512 CPU kernels here. Its bf16 attention needs them: with
    ``ATEN_CPU_CAPABILITY=avx2`` (the tests' setting) it fails ("pack_vnni2 is only supported when avx512
    is supported") even on a CPU that has AVX-512."""
    return torch.backends.cpu.get_cpu_capability() == "AVX512"


def resolve_dtype(precision: Precision, cuda: bool | None = None) -> torch.dtype:
    """The dtype of the frozen weights for ``precision`` on this process's device (``cuda`` as in
    :func:`native_bf16`).

    Raises:
        ValueError: for an unknown precision, or ``bf16`` on an x86 CPU whose torch runs without its
            AVX-512 kernels (its bf16 attention would fail at the first forward pass).
    """
    on_cuda = torch.cuda.is_available() if cuda is None else cuda
    if precision == "fp32":
        return torch.float32
    if precision == "bf16":
        if not on_cuda and _x86() and not _avx512_kernels():
            raise ValueError(f"precision 'bf16' needs torch's AVX-512 CPU kernels, and this process runs its "
                             f"{torch.backends.cpu.get_cpu_capability()} ones (the CPU, or ATEN_CPU_CAPABILITY). "
                             "Fix: use precision 'auto' (fp32 here) or 'fp32'")
        return torch.bfloat16
    if precision == "auto":
        return torch.bfloat16 if native_bf16(on_cuda) else torch.float32
    raise ValueError(f"unknown precision {precision!r}. Fix: use 'auto', 'fp32' or 'bf16'")


def dtype_name(dtype: torch.dtype) -> str:
    """``fp32`` / ``bf16``: how reports name the dtype a run used."""
    return {torch.float32: "fp32", torch.bfloat16: "bf16"}.get(dtype, str(dtype).removeprefix("torch."))


def _x86() -> bool:
    return platform.machine().lower() in ("x86_64", "amd64")
