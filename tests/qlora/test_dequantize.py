"""The NF4 → 16-bit kernel (kernels.qlora.dequantize) against the pure-torch dequantization."""

from __future__ import annotations

import pytest
import torch

import kernels
from kernels.qlora.dequantize import dequantize_nf4_kernel
from kernels.qlora.nf4 import NF4_CODE, dequantize_nf4, quantize_nf4

DEVICE = kernels.default_device()


@pytest.mark.parametrize(
    "shape", [(1, 3), (3, 64), (7, 100), (129, 300), (64, 2050)]
)  # odd, straddling, >1 program
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
def test_equals_the_reference(shape, dtype, seed):
    q = quantize_nf4(torch.randn(shape, device=DEVICE) * 3)
    got = dequantize_nf4_kernel(q.packed, q.absmax(), NF4_CODE.to(DEVICE), q.shape, q.blocksize, dtype)
    assert got.device.type == DEVICE.type and got.dtype == dtype and got.shape == shape
    want = dequantize_nf4(q, dtype)
    if dtype != torch.bfloat16 or DEVICE.type == "cuda":
        assert torch.equal(got, want)  # the same fp32 product, rounded to nearest once
    else:  # the interpreter truncates fp32 → bf16 (round toward zero): one unit in the last place at most
        ulp = torch.finfo(dtype).eps * dequantize_nf4(q, torch.float32).abs()
        assert bool(((got.float() - want.float()).abs() <= ulp).all())
