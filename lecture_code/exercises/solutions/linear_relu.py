"""A solution to the GEMM notebook's exercise: ``out = relu(x Wᵀ + b)``, the bias and ReLU in the epilogue.

The skeleton's kernel (:mod:`lecture_code.exercises.skeletons.linear_relu`) with its epilogue written: after
the K loop, the tile's ``BLOCK_N`` bias entries are loaded once (masked with ``cols < N``: the last column
block runs past the end of the bias), broadcast over the tile's rows, added in fp32, and the ReLU applied,
before the one store. The bias and the ReLU cost no pass over memory: they are done where the tile already
is, in registers.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.runtime import dot_upcast

__all__ = ["linear_relu"]

BLOCK = 32


@triton.jit
def _linear_relu_kernel(
    x_ptr, w_ptr, bias_ptr, out_ptr, M, N, K,
    DOT_UPCAST: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):  # fmt: skip
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        x = tl.load(x_ptr + rows[:, None] * K + (k0 + ks)[None, :],
                    mask=(rows[:, None] < M) & ((k0 + ks)[None, :] < K), other=0.0)  # fmt: skip
        wt = tl.load(w_ptr + cols[None, :] * K + (k0 + ks)[:, None],  # Wᵀ tile [BLOCK_K, BLOCK_N]
                     mask=(cols[None, :] < N) & ((k0 + ks)[:, None] < K), other=0.0)  # fmt: skip
        if DOT_UPCAST:
            x, wt = x.to(tl.float32), wt.to(tl.float32)
        acc = tl.dot(x, wt, acc, input_precision="ieee")
    bias = tl.load(bias_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)
    z = acc + bias[None, :]  # the epilogue, in registers: the bias, then the ReLU
    acc = tl.where(z < 0, 0.0, z)  # as torch.relu: NaN stays NaN (tl.maximum(z, 0.0) would give 0)
    out_ptrs = out_ptr + rows[:, None] * N + cols[None, :]
    tl.store(out_ptrs, acc.to(out_ptr.dtype.element_ty), mask=(rows[:, None] < M) & (cols[None, :] < N))


def linear_relu(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """Fill ``out`` [M, N] with ``relu(x Wᵀ + b)``: x [M, K], weight [N, K], bias [N], all contiguous, one
    dtype (fp32 or fp16)."""
    M, K = x.shape
    N = weight.shape[0]
    grid = (triton.cdiv(M, BLOCK), triton.cdiv(N, BLOCK))
    _linear_relu_kernel[grid](
        x, weight, bias, out, M, N, K,
        DOT_UPCAST=dot_upcast(x.dtype), BLOCK_M=BLOCK, BLOCK_N=BLOCK, BLOCK_K=BLOCK,
    )  # fmt: skip
    return out
