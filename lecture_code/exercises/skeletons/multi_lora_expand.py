"""Your turn: the multi-LoRA expand ``y[i] += t[i] B[id(i)]ᵀ``, rows with id −1 untouched (notebook 08).

The launcher is written: one program per (token, block of ``BLOCK_N`` output columns), the simplest grid,
``BLOCK_R`` the rank padded to a power of two (``tl.arange`` needs one). The kernel finds its row and
column block; its body is left to you (the TODO): read the token's adapter id and return at once when it is
−1 (then the row keeps its bits), load ``t[row]`` ([r], masked ``rs < R``) and the ``[BLOCK_N, r]`` tile of
``B[id]``, sum ``B t`` over r in fp32, add y's old values and store once, masked ``cols < N`` (the last
column block runs past the row's end). y, t and B are contiguous: ``y[row, c]`` is at ``row * N + c``,
``t[row, k]`` at ``row * R + k``, ``B[l, c, k]`` at ``(l * N + c) * R + k``. Check it with
``check_multi_lora_expand(multi_lora_expand.multi_lora_expand)``.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

__all__ = ["multi_lora_expand"]

BLOCK_N = 32


@triton.jit
def _expand_kernel(y_ptr, t_ptr, b_ptr, ids_ptr, N, R, BLOCK_N: tl.constexpr, BLOCK_R: tl.constexpr):
    # unused until you write the body (hence the noqa)
    row = tl.program_id(0)  # noqa: F841
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)  # noqa: F841
    rs = tl.arange(0, BLOCK_R)  # noqa: F841
    # TODO: the adapter id of `row` (return if −1); t[row] and B[id]'s tile; y[row, cols] += B t, masked


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
