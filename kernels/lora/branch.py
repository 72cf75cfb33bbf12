"""LoRA's low-rank branch as one kernel, added onto a base output: ``y += s·(x Aᵀ) Bᵀ``; ``s·x Aᵀ`` out.

Shapes: x [M, K], A [r, K], B [N, r], y [M, N] (the base ``x Wᵀ + b`` already written by cuBLAS), s·t [M, r].
This is LoRA v1 in :mod:`kernels.lora.linear`, and its general path: pointer loads with masks and any
strides, so it takes every shape and layout the tensor-descriptor kernel (:mod:`kernels.lora.gemm`) cannot.

Each program owns a block of rows and keeps ``t = x[rows] Aᵀ`` (fp32 ``[BLOCK_M, r]``) on chip, as NeMo's
fused LoRA kernel does:

1. ``t = Σ_k x[rows, k-tile] · A[:, k-tile]ᵀ`` over K (the shrink; one pass over x);
2. the program that owns split slot 0 writes s·t (the backward's dB = dYᵀ (s·t) needs it);
3. for its output tiles: ``y[rows, n-tile] += (s·t) · B[n-tile, :]ᵀ`` (read y, add, write y).

FLOPs 2·M·r·(K + N), negligible. Bytes (element size s): x once (M·K·s), y read and written (2·M·N·s), the
weights. At M = 8192, K = N = 4096, bf16: 64 + 128 MB ≈ 65 µs at 3 TB/s on top of the base GEMM (≈ 370 µs):
a floor of about +17% for any "cuBLAS base, then add the branch" design — the reason v2 and v3 move the
branch into the base GEMM's epilogue, where y is written once.

``split`` programs share one row block when there are too few row blocks to fill the GPU; each recomputes t
(re-reading x, mostly from L2) and writes every split-th output tile.
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from kernels.configs import BranchConfig
from kernels.fast_launch import CachedLauncher
from kernels.gpu_features import TRITON_FLOOR, Needs
from kernels.launch import cdiv, dot_block, input_precision
from kernels.runtime import dot_upcast, interpreting

__all__ = ["BRANCH_NEEDS", "branch_rule", "lora_branch_"]

# What v1 needs of a GPU (kernels.gpu_features): pointer loads and tl.dot, so Triton's floor (sm_80). Its
# rule's tiles in 16-bit at r ≤ 16, 3 stages of a [64, 64] x tile and a [16, 64] A tile plus a [16, 128] B
# tile, ask about 34 KB of shared memory (more with r): every sm_80+ GPU offers at least 99 KB.
BRANCH_NEEDS = Needs("LoRA v1 (the branch kernel)", TRITON_FLOOR, 34 * 1024)


@triton.jit
def _lora_branch_kernel(
    x_ptr, a_ptr, b_ptr, y_ptr, t_ptr, M, K, N, R, scale, SPLIT,
    stride_xm, stride_xk, stride_ar, stride_ak, stride_bn, stride_br, stride_ym, stride_yn,
    stride_tm, stride_tr,
    DOT_UPCAST: tl.constexpr, INPUT_PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_R: tl.constexpr,
):  # fmt: skip
    pid = tl.program_id(0)
    pid_m = pid // SPLIT
    pid_s = pid % SPLIT  # varies fastest: the programs sharing a row block run together (x from L2)
    rows = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
    row_mask = rows < M
    rs = tl.arange(0, BLOCK_R)
    r_mask = rs < R

    # 1. t = x[rows, :] · Aᵀ, the Aᵀ tile [BLOCK_K, BLOCK_R] read through strides.
    t = tl.zeros([BLOCK_M, BLOCK_R], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        k_mask = ks < K
        x = tl.load(
            x_ptr + rows[:, None] * stride_xm + ks[None, :] * stride_xk,
            mask=row_mask[:, None] & k_mask[None, :],
            other=0.0,
        )
        at = tl.load(
            a_ptr + ks[:, None] * stride_ak + rs[None, :] * stride_ar,
            mask=k_mask[:, None] & r_mask[None, :],
            other=0.0,
        )
        if DOT_UPCAST:  # interpreter + bf16: tl.dot is wrong there (see kernels.runtime)
            x = x.to(tl.float32)
            at = at.to(tl.float32)
        t = tl.dot(x, at, t, input_precision=INPUT_PRECISION)

    # 2. s·t (t rounded to the input dtype first, as torch's x @ A.T would store it); publish it for dB.
    dtype = y_ptr.dtype.element_ty
    ts = (t.to(dtype).to(tl.float32) * scale).to(dtype)
    if pid_s == 0:
        tl.store(
            t_ptr + rows[:, None] * stride_tm + rs[None, :] * stride_tr,
            ts,
            mask=row_mask[:, None] & r_mask[None, :],
        )
    if DOT_UPCAST:
        ts = ts.to(tl.float32)

    # 3. y[rows, n-tile] += (s·t) · Bᵀ[:, n-tile] for every SPLIT-th output tile.
    for n0 in range(pid_s * BLOCK_N, N, SPLIT * BLOCK_N):
        ns = n0 + tl.arange(0, BLOCK_N)
        n_mask = ns < N
        bt = tl.load(
            b_ptr + rs[:, None] * stride_br + ns[None, :] * stride_bn,
            mask=r_mask[:, None] & n_mask[None, :],
            other=0.0,
        )
        if DOT_UPCAST:
            bt = bt.to(tl.float32)
        mask = row_mask[:, None] & n_mask[None, :]
        y_ptrs = y_ptr + rows[:, None] * stride_ym + ns[None, :] * stride_yn
        y = tl.load(y_ptrs, mask=mask, other=0.0).to(tl.float32)
        y = tl.dot(ts, bt, y, input_precision=INPUT_PRECISION)
        tl.store(y_ptrs, y.to(dtype), mask=mask)


def branch_rule(M: int, K: int, N: int, r: int, dtype: torch.dtype, num_sms: int) -> BranchConfig:
    """Row blocks of 64 (the ``[64, r]`` fp32 t tile is small), 128-wide output tiles, 64-deep K steps;
    ``split`` so that there are about two programs per SM. Interpreter: tiles no larger than the problem."""
    block_r = dot_block(r)
    if interpreting():
        bm, bn, bk = (min(64, dot_block(d)) for d in (M, N, K))
        return BranchConfig(bm, bn, bk, 1, 4, 1)
    bm = 64 if block_r <= 64 else 32
    bn, bk = 128, 64
    split = min(cdiv(N, bn), max(1, cdiv(2 * num_sms, cdiv(M, bm))))
    return BranchConfig(bm, bn, bk, split, 4, 3)


@functools.lru_cache(maxsize=256)
def _constexprs(dtype: torch.dtype, precision: str, R: int, c: BranchConfig) -> tuple:
    return (
        ("DOT_UPCAST", dot_upcast(dtype)), ("INPUT_PRECISION", precision),
        ("BLOCK_M", c.block_m), ("BLOCK_N", c.block_n), ("BLOCK_K", c.block_k),
        ("BLOCK_R", dot_block(R)),
    )  # fmt: skip


_launch = CachedLauncher(_lora_branch_kernel)


def lora_branch_(
    y: torch.Tensor,
    x: torch.Tensor,
    lora_a: torch.Tensor,
    lora_b: torch.Tensor,
    scale: float,
    config: BranchConfig,
) -> torch.Tensor:
    """``y += s·(x Aᵀ) Bᵀ`` in place (y, x 2-D; any strides; arguments checked); returns s·x Aᵀ [M, r]."""
    M, K = x.shape
    N, R = lora_b.shape
    t = torch.empty((M, R), device=x.device, dtype=x.dtype)
    c = config
    _launch(
        (c.split * cdiv(M, c.block_m),),
        (
            x, lora_a, lora_b, y, t, M, K, N, R, float(scale), c.split,
            x.stride(0), x.stride(1), lora_a.stride(0), lora_a.stride(1), lora_b.stride(0), lora_b.stride(1),
            y.stride(0), y.stride(1), t.stride(0), t.stride(1),
        ),
        _constexprs(x.dtype, input_precision(x.dtype), R, c),
        c.num_warps,
        c.num_stages,
    )  # fmt: skip
    return t
