"""Step 3 of the GEMM build-up: a persistent grid — as many programs as run at once, each looping over tiles.

Steps 1 and 2 launch one program per output tile: at 8192 × 8192 with 128 × 256 tiles, 2048 programs for a
GPU that runs about one such program per SM at a time (132 SMs on an H100), so the hardware starts and retires
programs in waves, and every program pays its set-up (index arithmetic, pointers; from step 4 on, building
tensor descriptors) for a single tile. Here the grid is :func:`kernels.gemm.tiles.persistent_programs`
programs (one per SM; a few under the interpreter), and program ``pid`` takes tiles ``pid, pid + P, pid + 2P,
…`` in step 2's grouped order, so the tiles in flight at any moment are still neighbours in C.

What it buys: set-up once per program, no launch of new programs mid-kernel, and a program that can start
loading its next tile while its last one is being stored (the compiler may overlap them; Triton's
``warp_specialize`` makes it explicit, used by :mod:`kernels.lora.gemm`). What it does not change: the FLOPs,
the bytes, and the last round's imbalance (2048 tiles over 132 programs: some take 16 tiles, some 15).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.gemm.checks import check_operands, output
from kernels.gemm.grouped import grouped_tile
from kernels.gemm.tiles import Tiles, default_tiles, persistent_programs
from kernels.launch import input_precision, int32_offsets
from kernels.runtime import dot_upcast

__all__ = ["matmul_persistent"]


@triton.jit
def _matmul_persistent_kernel(
    a_ptr, b_ptr, c_ptr, M, N, K,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
    DOT_UPCAST: tl.constexpr, INPUT_PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
):  # fmt: skip
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    # Program pid takes tiles pid, pid + P, pid + 2P, … (P programs), each as in step 2.
    for tile_id in range(tl.program_id(0), num_pid_m * num_pid_n, tl.num_programs(0)):
        pid_m, pid_n = grouped_tile(tile_id, num_pid_m, num_pid_n, GROUP_M)
        rows = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
        cols = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)).to(tl.int64)
        a_ptrs = a_ptr + rows[:, None] * stride_am + ks[None, :] * stride_ak
        b_ptrs = b_ptr + ks[:, None] * stride_bk + cols[None, :] * stride_bn
        acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        for k in range(0, tl.cdiv(K, BLOCK_K)):
            k_left = K - k * BLOCK_K
            a = tl.load(a_ptrs, mask=(rows[:, None] < M) & (ks[None, :] < k_left), other=0.0)
            b = tl.load(b_ptrs, mask=(ks[:, None] < k_left) & (cols[None, :] < N), other=0.0)
            if DOT_UPCAST:
                a = a.to(tl.float32)
                b = b.to(tl.float32)
            acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION)
            a_ptrs += BLOCK_K * stride_ak
            b_ptrs += BLOCK_K * stride_bk
        c_ptrs = c_ptr + rows[:, None] * stride_cm + cols[None, :] * stride_cn
        tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(rows[:, None] < M) & (cols[None, :] < N))


def matmul_persistent(
    a: torch.Tensor,
    b: torch.Tensor,
    out: torch.Tensor | None = None,
    tiles: Tiles | None = None,
    programs: int | None = None,
) -> torch.Tensor:
    """``a @ b`` on a persistent grid of ``programs`` programs (default
    :func:`kernels.gemm.tiles.persistent_programs`), tiles in grouped order; otherwise as
    :func:`kernels.gemm.tiled.matmul_tiled`."""
    check_operands("matmul_persistent", a, b)
    if programs is not None and (not isinstance(programs, int) or programs < 1):
        raise ValueError(f"matmul_persistent: programs must be a positive int, got {programs!r}")
    (M, K), N = a.shape, b.shape[1]
    out = output("matmul_persistent", out, a, N, {"a": a, "b": b})
    if M == 0 or N == 0:
        return out
    if K == 0:
        return out.zero_()
    t = tiles or default_tiles(M, N, K, a.dtype)
    a, b = int32_offsets(a, (1,)), int32_offsets(b, (0,))
    grid = (programs or persistent_programs(M, N, t, a.device),)
    _matmul_persistent_kernel[grid](
        a, b, out, M, N, K, *a.stride(), *b.stride(), *out.stride(),
        DOT_UPCAST=dot_upcast(a.dtype), INPUT_PRECISION=input_precision(a.dtype),
        BLOCK_M=t.block_m, BLOCK_N=t.block_n, BLOCK_K=t.block_k, GROUP_M=t.group_m,
        num_warps=t.num_warps, num_stages=t.num_stages,
    )  # fmt: skip
    return out
