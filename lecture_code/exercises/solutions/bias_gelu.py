"""A solution to notebook 04's exercise: ``out = gelu_tanh(x + bias)`` as one Triton kernel, tails masked.

GELU's tanh form, ``0.5·z·(1 + tanh(u))`` with ``u = √(2/π)·(z + 0.044715·z³)``, is the same number as
``z·σ(2u)``, since ``0.5·(1 + tanh(u)) = σ(2u)``: one ``tl.sigmoid``, no ``tanh`` needed, and no
``1 + tanh(u)`` cancellation for negative z. The arithmetic runs in fp32 and rounds once into ``out``.

The grid is (rows, column blocks). A row of N columns takes ``cdiv(N, BLOCK_N)`` programs, and the last one
runs past the row's end whenever N is not a multiple of BLOCK_N: ``mask = cols < N`` keeps its loads and
stores inside the row (without it, the store lands in the next row, or past the end of ``out`` on the last
row). Row offsets are ``row * N`` in int32: fine for the exercise's sizes; ``kernels/pointwise/bias_relu.py``
uses 64-bit offsets for tensors over 2³¹ elements.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

__all__ = ["bias_gelu"]

BLOCK_N = 64


@triton.jit
def _bias_gelu_kernel(x_ptr, bias_ptr, out_ptr, N, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = cols < N  # the masked tail
    z = tl.load(x_ptr + row * N + cols, mask=mask).to(tl.float32) + tl.load(bias_ptr + cols, mask=mask).to(
        tl.float32
    )
    u = 0.7978845608028654 * (z + 0.044715 * z * z * z)  # √(2/π)·(z + 0.044715·z³)
    y = z * tl.sigmoid(2.0 * u)
    tl.store(out_ptr + row * N + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


def bias_gelu(x: torch.Tensor, bias: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """Fill ``out`` (x's shape, contiguous) with ``gelu_tanh(x + bias)``; ``bias`` ``[N]``, x ``[..., N]``."""
    N = x.shape[-1]
    rows = x.numel() // N
    _bias_gelu_kernel[(rows, triton.cdiv(N, BLOCK_N))](x, bias, out, N, BLOCK_N=BLOCK_N)
    return out
