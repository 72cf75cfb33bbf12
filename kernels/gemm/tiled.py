"""Step 1 of the GEMM build-up: a tiled matmul, one program per output tile (Triton tutorial 03's kernel).

Math: ``C = A·B``, A ``[M, K]``, B ``[K, N]``, C ``[M, N]``: ``C[i, j] = Σ_k A[i, k]·B[k, j]``.
FLOPs: 2·M·N·K. Bytes: at least (M·K + K·N + M·N)·e (element size e), each matrix crossing memory once.

The program of output tile (pid_m, pid_n) keeps a ``BLOCK_M × BLOCK_N`` fp32 accumulator in registers and
walks K: each step loads a ``BLOCK_M × BLOCK_K`` tile of A and a ``BLOCK_K × BLOCK_N`` tile of B and adds
their product (``tl.dot``: tensor cores on a GPU). Each tile of A is read once per column block of C, each
tile of B once per row block: from DRAM, without a cache, the program reads (BLOCK_M + BLOCK_N)·K·e bytes for
2·BLOCK_M·BLOCK_N·K FLOPs, so bigger tiles mean fewer bytes per FLOP. Edges: masks on the loads (rows ≥ M,
columns ≥ N and the K tail read as 0, which adds nothing) and on the store; any M, N, K and any strides.

Programs are numbered row by row (``pid_m = pid // num_pid_n``); step 2 (:mod:`kernels.gemm.grouped`)
changes only that order. The accumulator is fp32 whatever the inputs, rounded once at the store. Offsets:
rows and columns in int64; along K in int32 (``int32_offsets`` copies an operand whose K stride is too large).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.gemm.checks import check_operands, output
from kernels.gemm.tiles import Tiles, default_tiles
from kernels.launch import cdiv, input_precision, int32_offsets
from kernels.runtime import dot_upcast

__all__ = ["matmul_tiled"]


@triton.jit
def _matmul_tiled_kernel(
    a_ptr, b_ptr, c_ptr, M, N, K,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
    DOT_UPCAST: tl.constexpr, INPUT_PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):  # fmt: skip
    # One program per output tile, numbered row by row.
    pid = tl.program_id(0)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    pid_m = pid // num_pid_n
    pid_n = pid % num_pid_n
    rows = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
    cols = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)).to(tl.int64)
    ks = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + rows[:, None] * stride_am + ks[None, :] * stride_ak
    b_ptrs = b_ptr + ks[:, None] * stride_bk + cols[None, :] * stride_bn
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - k * BLOCK_K  # the last step's tile runs past K: those columns of A and rows of B read 0
        a = tl.load(a_ptrs, mask=(rows[:, None] < M) & (ks[None, :] < k_left), other=0.0)
        b = tl.load(b_ptrs, mask=(ks[:, None] < k_left) & (cols[None, :] < N), other=0.0)
        if DOT_UPCAST:  # bf16 under the interpreter (triton-lang/triton#11584): multiply in fp32
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    c_ptrs = c_ptr + rows[:, None] * stride_cm + cols[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(rows[:, None] < M) & (cols[None, :] < N))


def matmul_tiled(
    a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None, tiles: Tiles | None = None
) -> torch.Tensor:
    """``a @ b`` by the tiled kernel: a ``[M, K]``, b ``[K, N]`` (any strides, fp32/fp16/bf16) → ``[M, N]``,
    written into ``out`` if given. ``tiles``: :func:`kernels.gemm.tiles.default_tiles` if None."""
    check_operands("matmul_tiled", a, b)
    (M, K), N = a.shape, b.shape[1]
    out = output("matmul_tiled", out, a, N, {"a": a, "b": b})
    if M == 0 or N == 0:
        return out
    if K == 0:
        return out.zero_()
    t = tiles or default_tiles(M, N, K, a.dtype)
    a, b = int32_offsets(a, (1,)), int32_offsets(b, (0,))
    grid = (cdiv(M, t.block_m) * cdiv(N, t.block_n),)
    _matmul_tiled_kernel[grid](
        a, b, out, M, N, K, *a.stride(), *b.stride(), *out.stride(),
        DOT_UPCAST=dot_upcast(a.dtype), INPUT_PRECISION=input_precision(a.dtype),
        BLOCK_M=t.block_m, BLOCK_N=t.block_n, BLOCK_K=t.block_k,
        num_warps=t.num_warps, num_stages=t.num_stages,
    )  # fmt: skip
    return out
