"""rg.models.precision: what `precision` means on a device."""

from __future__ import annotations

import pytest
import torch

from rg.models.precision import dtype_name, native_bf16, resolve_dtype


def test_explicit_precisions_ignore_the_hardware():
    assert resolve_dtype("fp32") is torch.float32 and resolve_dtype("bf16", cuda=True) is torch.bfloat16
    assert dtype_name(torch.float32) == "fp32" and dtype_name(torch.bfloat16) == "bf16"
    with pytest.raises(ValueError, match="unknown precision 'fp16'. Fix: use 'auto', 'fp32' or 'bf16'"):
        resolve_dtype("fp16")  # type: ignore[arg-type]


@pytest.mark.parametrize("avx512_bf16, amx, expected", [
    (False, False, torch.float32), (True, False, torch.bfloat16), (False, True, torch.bfloat16),
])
def test_auto_is_bf16_only_on_a_cpu_with_bf16_units(monkeypatch, avx512_bf16, amx, expected):
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX512")
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: avx512_bf16, raising=False)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx, raising=False)
    assert resolve_dtype("auto", cuda=False) is expected


def test_auto_is_fp32_without_torch_s_avx512_kernels_or_when_torch_cannot_tell(monkeypatch):
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: True, raising=False)
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX2")  # ATEN_CPU_CAPABILITY=avx2
    assert resolve_dtype("auto", cuda=False) is torch.float32
    monkeypatch.setattr("platform.machine", lambda: "x86_64")
    with pytest.raises(ValueError, match="precision 'bf16' needs torch's AVX-512 CPU kernels, and this process runs "
                                         "its AVX2 ones .* Fix: use precision 'auto' \\(fp32 here\\) or 'fp32'"):
        resolve_dtype("bf16", cuda=False)
    assert resolve_dtype("bf16", cuda=True) is torch.bfloat16  # a GPU worker
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX512")
    monkeypatch.delattr(torch.cpu, "_is_avx512_bf16_supported", raising=False)
    monkeypatch.delattr(torch.cpu, "_is_amx_tile_supported", raising=False)
    assert not native_bf16(cuda=False) and resolve_dtype("auto", cuda=False) is torch.float32
