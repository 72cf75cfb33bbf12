"""Your turn: a linear layer with its bias and ReLU in the GEMM's epilogue, ``out = relu(x Wᵀ + b)``.

The kernel below is a tiled matmul like the GEMM notebook's step 1 (a 2-D grid of output tiles; x, W and
out contiguous), the tile of ``b = Wᵀ`` loaded from W ``[N, K]`` directly: the K loop is written, the
accumulator ``acc`` holds this tile of ``x Wᵀ`` in fp32. Complete the epilogue (the TODO): load the tile's
``BLOCK_N`` entries of the bias (masked: the last column block runs past N), add them to every row of
``acc``, apply the ReLU as ``torch.relu`` does (a NaN stays NaN), then store. Check it with
``check_linear_relu(linear_relu.linear_relu)``.
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
    # TODO: the epilogue — load bias[cols] (masked), add it to every row of acc, apply the ReLU
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
