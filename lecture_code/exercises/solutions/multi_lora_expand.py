"""A solution to notebook 08's exercise: the multi-LoRA expand ``y[i] += t[i] B[id(i)]ᵀ``, −1 rows untouched.

One program per (token, block of ``BLOCK_N`` output columns), the simplest grid (Punica's BGMV: one token
at a time; :mod:`kernels.multi_lora.shrink_expand` groups tokens by adapter instead, so a program reuses one
adapter's B for a block of rows). A program reads its token's adapter id first and returns at once when it is
−1: it loads nothing and stores nothing, so the row keeps its bits. Otherwise it loads ``t[i]`` ([r], padded
with zeros to ``BLOCK_R``, the next power of two, since ``tl.arange`` needs one) and the ``[BLOCK_N, r]`` tile
of ``B[id]``, sums ``B t`` over r in fp32, adds y's old values and stores once, rounded to y's dtype.

Two masks: ``rs < r`` for the padded rank, and ``cols < N`` for the last column block of a row, which runs
past the row's end whenever N is not a multiple of ``BLOCK_N``: without it the store lands in the next
row's first columns, or past the end of y on the last row. Offsets are int32 products: fine for the
exercise's sizes (``kernels/multi_lora/shrink_expand.py`` uses int64).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

__all__ = ["multi_lora_expand"]

BLOCK_N = 32


@triton.jit
def _expand_kernel(y_ptr, t_ptr, b_ptr, ids_ptr, N, R, BLOCK_N: tl.constexpr, BLOCK_R: tl.constexpr):
    row = tl.program_id(0)
    lora = tl.load(ids_ptr + row)
    if lora < 0:  # no adapter: the row is not touched
        return
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    rs = tl.arange(0, BLOCK_R)
    col_mask = cols < N  # the masked tail
    r_mask = rs < R
    t = tl.load(t_ptr + row * R + rs, mask=r_mask, other=0.0).to(tl.float32)
    b = tl.load(
        b_ptr + lora * N * R + cols[:, None] * R + rs[None, :],
        mask=col_mask[:, None] & r_mask[None, :],
        other=0.0,
    ).to(tl.float32)
    y_ptrs = y_ptr + row * N + cols
    acc = tl.load(y_ptrs, mask=col_mask, other=0.0).to(tl.float32) + tl.sum(b * t[None, :], axis=1)
    tl.store(y_ptrs, acc.to(y_ptr.dtype.element_ty), mask=col_mask)


def multi_lora_expand(
    y: torch.Tensor, t: torch.Tensor, lora_b: torch.Tensor, adapter_ids: torch.Tensor
) -> torch.Tensor:
    """``y[i] += t[i] B[id(i)]ᵀ`` in place for ``id(i) ≥ 0``; returns y. y [T, N], t [T, r], lora_b
    [L, N, r] (all contiguous, one dtype), adapter_ids [T] int (−1 = no adapter: the row is not touched)."""
    T, N = y.shape
    R = t.shape[1]
    _expand_kernel[(T, triton.cdiv(N, BLOCK_N))](
        y, t, lora_b, adapter_ids, N, R, BLOCK_N=BLOCK_N, BLOCK_R=triton.next_power_of_2(R)
    )
    return y
