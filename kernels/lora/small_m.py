"""The whole LoRA linear at small M (a decode step, a fine-tuning micro-batch of a few rows): one kernel
forward, one kernel backward, the frozen base included.

Shapes: x [M, K], W [N, K], A [r, K], B [N, r], y [M, N], s·t [M, r], M ≤ :data:`MAX_M`.

**Why.** At M = 16, K = N = 4096 the base GEMM reads W (32 MB in bf16) and little else: it is bound by W's
bytes, and the LoRA terms add almost no bytes (A and B are 0.25 MB) but, done as separate kernels, two to
six launches of a few µs each. In ``benchmarks/results/lora/lora_overhead_nvidia-h200_2026-11-29.csv`` at
16×4096×4096 r16 the base takes 19.2 µs forward and 31.7 µs forward + backward (device time), the
unsloth-style order adds 59% / 111% and v3 82% / 114% (this path, with its first rule: 38% / 58%). Here
every program owns ``BLOCK_N`` output columns and all M rows, streams its ``[BLOCK_N, K]`` slice of W once,
and does the LoRA work beside it:

- **forward** (:func:`small_m_forward`): ``acc = x W_nᵀ`` over K, and in the same loop ``t = x Aᵀ`` (every
  program recomputes t: x and A are re-read from L2, 2·M·r·K FLOPs each, nothing next to W's bytes); then
  ``s·t`` rounded to the input dtype (as torch would store ``x @ A.T`` and scale it), ``acc += (s·t) B_nᵀ``,
  the bias, one store of y. Program 0 also stores s·t (the backward's dB needs it). No split-K, so no
  reduction across programs, no atomics, no workspace: the result is the same bits run to run.
- **backward** (:func:`small_m_backward`): a program owns ``BLOCK_K`` columns of dX and of dA: over N,
  ``dX_k = dY W_{:,k}`` and (every program again) ``u = dY B``; then ``s·u`` rounded, ``dX_k += (s·u) A_k``
  and ``dA_k = (s·u)ᵀ x_k``. The same programs also take dB's row tiles in turn: ``dB_n = dY_nᵀ (s·t)``.

Bytes: W once each way, plus x, dY, A and B read once per program, mostly from L2. With M ≤ 64 the
``[M, BLOCK_N]`` accumulator and the ``[M, r]`` tiles stay in registers.

:func:`kernels.lora.linear.lora_linear` picks it by default only where ``benchmarks/bench_lora.py`` measured
it faster (on a GPU, 16-bit, M and r ≤ ``SMALL_DEFAULT_UP_TO``); ``version="small"`` asks for it at M ≤ 64.
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

__all__ = ["MAX_M", "SMALL_M_NEEDS", "small_m_backward", "small_m_forward", "small_m_rule"]

MAX_M = 64  # every row in one block: the [M, BLOCK_N] accumulator and the [M, r] tiles in registers
# Pointer loads and tl.dot (Triton's floor, sm_80). small_m_rule sizes its 4 stages of x, W and A tiles to
# at most 96 KB of shared memory; every sm_80+ GPU offers at least 99 KB.
SMALL_M_NEEDS = Needs("LoRA at small M (one kernel each way)", TRITON_FLOOR, 96 * 1024)


@triton.jit
def _forward_kernel(
    x_ptr, w_ptr, a_ptr, b_ptr, bias_ptr, y_ptr, t_ptr, M, K, N, R, scale,
    stride_xm, stride_xk, stride_wn, stride_wk, stride_ar, stride_ak, stride_bn, stride_br,
    stride_ym, stride_yn, stride_tm, stride_tr,
    HAS_BIAS: tl.constexpr, DOT_UPCAST: tl.constexpr, INPUT_PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_R: tl.constexpr,
):  # fmt: skip
    pid = tl.program_id(0)
    rows = tl.arange(0, BLOCK_M)
    row_mask = rows < M
    ns = (pid * BLOCK_N + tl.arange(0, BLOCK_N)).to(tl.int64)
    n_mask = ns < N
    rs = tl.arange(0, BLOCK_R)
    r_mask = rs < R
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    t = tl.zeros([BLOCK_M, BLOCK_R], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        k_mask = ks < K
        x = tl.load(x_ptr + rows[:, None] * stride_xm + ks[None, :] * stride_xk,
                    mask=row_mask[:, None] & k_mask[None, :], other=0.0)  # fmt: skip
        wt = tl.load(w_ptr + ks[:, None] * stride_wk + ns[None, :] * stride_wn,
                     mask=k_mask[:, None] & n_mask[None, :], other=0.0)  # fmt: skip
        at = tl.load(a_ptr + ks[:, None] * stride_ak + rs[None, :] * stride_ar,
                     mask=k_mask[:, None] & r_mask[None, :], other=0.0)  # fmt: skip
        if DOT_UPCAST:  # interpreter + bf16: tl.dot is wrong there (see kernels.runtime)
            x, wt, at = x.to(tl.float32), wt.to(tl.float32), at.to(tl.float32)
        acc = tl.dot(x, wt, acc, input_precision=INPUT_PRECISION)
        t = tl.dot(x, at, t, input_precision=INPUT_PRECISION)
    dtype = y_ptr.dtype.element_ty
    ts = (t.to(dtype).to(tl.float32) * scale).to(dtype)  # as torch stores (x @ A.T) * s
    if pid == 0:
        tl.store(t_ptr + rows[:, None] * stride_tm + rs[None, :] * stride_tr, ts,
                 mask=row_mask[:, None] & r_mask[None, :])  # fmt: skip
    bt = tl.load(b_ptr + rs[:, None] * stride_br + ns[None, :] * stride_bn,
                 mask=r_mask[:, None] & n_mask[None, :], other=0.0)  # fmt: skip
    if DOT_UPCAST:
        ts, bt = ts.to(tl.float32), bt.to(tl.float32)
    acc = tl.dot(ts, bt, acc, input_precision=INPUT_PRECISION)
    if HAS_BIAS:
        acc += tl.load(bias_ptr + ns, mask=n_mask, other=0.0).to(tl.float32)[None, :]
    tl.store(y_ptr + rows[:, None] * stride_ym + ns[None, :] * stride_yn, acc.to(dtype),
             mask=row_mask[:, None] & n_mask[None, :])  # fmt: skip


@triton.jit
def _backward_kernel(
    dy_ptr, x_ptr, w_ptr, a_ptr, b_ptr, t_ptr, dx_ptr, da_ptr, db_ptr, M, K, N, R, scale, DB_TILES,
    stride_dym, stride_dyn, stride_xm, stride_xk, stride_wn, stride_wk, stride_ar, stride_ak,
    stride_bn, stride_br, stride_tm, stride_tr, stride_dxm, stride_dxk, stride_dar, stride_dak,
    stride_dbn, stride_dbr,
    NEED_DX: tl.constexpr, DOT_UPCAST: tl.constexpr, INPUT_PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_R: tl.constexpr,
):  # fmt: skip
    pid = tl.program_id(0)
    programs = tl.num_programs(0)
    rows = tl.arange(0, BLOCK_M)
    row_mask = rows < M
    ks = (pid * BLOCK_K + tl.arange(0, BLOCK_K)).to(tl.int64)
    k_mask = ks < K
    rs = tl.arange(0, BLOCK_R)
    r_mask = rs < R
    dtype = dx_ptr.dtype.element_ty
    acc = tl.zeros([BLOCK_M, BLOCK_K], dtype=tl.float32)
    u = tl.zeros([BLOCK_M, BLOCK_R], dtype=tl.float32)
    for n0 in range(0, N, BLOCK_N):
        ns = (n0 + tl.arange(0, BLOCK_N)).to(
            tl.int64
        )  # W is indexed ns · stride_wn: past int32 for N·K > 2³¹
        n_mask = ns < N
        dy = tl.load(dy_ptr + rows[:, None] * stride_dym + ns[None, :] * stride_dyn,
                     mask=row_mask[:, None] & n_mask[None, :], other=0.0)  # fmt: skip
        b = tl.load(b_ptr + ns[:, None] * stride_bn + rs[None, :] * stride_br,
                    mask=n_mask[:, None] & r_mask[None, :], other=0.0)  # fmt: skip
        if DOT_UPCAST:
            dy, b = dy.to(tl.float32), b.to(tl.float32)
        if NEED_DX:
            w = tl.load(w_ptr + ns[:, None] * stride_wn + ks[None, :] * stride_wk,
                        mask=n_mask[:, None] & k_mask[None, :], other=0.0)  # fmt: skip
            if DOT_UPCAST:
                w = w.to(tl.float32)
            acc = tl.dot(dy, w, acc, input_precision=INPUT_PRECISION)
        u = tl.dot(dy, b, u, input_precision=INPUT_PRECISION)
    us = (u.to(dtype).to(tl.float32) * scale).to(dtype)  # as torch stores (dY @ B) * s
    x = tl.load(x_ptr + rows[:, None] * stride_xm + ks[None, :] * stride_xk,
                mask=row_mask[:, None] & k_mask[None, :], other=0.0)  # fmt: skip
    if DOT_UPCAST:
        us, x = us.to(tl.float32), x.to(tl.float32)
    da = tl.dot(tl.trans(us), x, input_precision=INPUT_PRECISION)  # [BLOCK_R, BLOCK_K]
    tl.store(da_ptr + rs[:, None] * stride_dar + ks[None, :] * stride_dak, da.to(dtype),
             mask=r_mask[:, None] & k_mask[None, :])  # fmt: skip
    if NEED_DX:
        a = tl.load(a_ptr + rs[:, None] * stride_ar + ks[None, :] * stride_ak,
                    mask=r_mask[:, None] & k_mask[None, :], other=0.0)  # fmt: skip
        if DOT_UPCAST:
            a = a.to(tl.float32)
        acc = tl.dot(us, a, acc, input_precision=INPUT_PRECISION)
        tl.store(dx_ptr + rows[:, None] * stride_dxm + ks[None, :] * stride_dxk, acc.to(dtype),
                 mask=row_mask[:, None] & k_mask[None, :])  # fmt: skip
    # dB = dYᵀ (s·t), its BLOCK_N-row tiles taken by the programs in turn
    ts = tl.load(t_ptr + rows[:, None] * stride_tm + rs[None, :] * stride_tr,
                 mask=row_mask[:, None] & r_mask[None, :], other=0.0)  # fmt: skip
    if DOT_UPCAST:
        ts = ts.to(tl.float32)
    for j in range(pid, DB_TILES, programs):
        ns = (j * BLOCK_N + tl.arange(0, BLOCK_N)).to(tl.int64)
        n_mask = ns < N
        dyt = tl.load(
            dy_ptr + ns[:, None] * stride_dyn + rows[None, :] * stride_dym,
            mask=n_mask[:, None] & row_mask[None, :],
            other=0.0,
        )  # fmt: skip  [BLOCK_N, BLOCK_M]
        if DOT_UPCAST:
            dyt = dyt.to(tl.float32)
        db = tl.dot(dyt, ts, input_precision=INPUT_PRECISION)
        tl.store(db_ptr + ns[:, None] * stride_dbn + rs[None, :] * stride_dbr, db.to(dtype),
                 mask=n_mask[:, None] & r_mask[None, :])  # fmt: skip


def small_m_rule(M: int, K: int, N: int, r: int, element_size: int = 2) -> BranchConfig:
    """One config for both kernels, in the forward's terms: ``block_n`` the columns a program owns (of y; the
    backward's programs own as many columns of dX), ``block_k`` the depth of a loop step (over K; the
    backward's steps go as deep over N). ``block_m``: the rows padded (≥ 16, tl.dot's floor).

    From the sweep (``benchmarks/sweep_lora_small_m.py``; its CSV
    ``benchmarks/results/lora_small_m/lora_small_m_sweep_nvidia-h200_2026-11-29.csv``): at 16×4096×4096 r16
    bf16 on an H200, replayed from a CUDA graph, 16 columns, 256-deep steps, 2 warps and 4 stages took 18.9 µs
    forward and 40.1 µs forward + backward (the base: 19.6 and 30.9), the fastest of 81 candidates both ways;
    the earlier rule (32 columns, 128 deep, 4 warps, 3 stages) 26.9 and 50.0. Measured at that shape only: at
    more rows or a larger rank the depth halves until the 4 stages of an x, a W and an A tile fit
    ``SMALL_M_NEEDS``' 96 KB (at 16 rows, r ≤ 16 and 16-bit inputs they fill it exactly). Interpreter: tiles
    no larger than the problem."""
    bm = max(16, dot_block(M))
    if interpreting():
        return BranchConfig(bm, min(32, dot_block(min(N, K))), min(32, dot_block(max(N, K))), 1, 4, 1)
    return _gpu_rule(bm, dot_block(r), element_size)


@functools.lru_cache(maxsize=64)  # cached: building a carrier costs microseconds of host time per call
def _gpu_rule(bm: int, block_r: int, element_size: int) -> BranchConfig:
    bn, stages = 16, 4
    depth = 256
    while depth > 16 and stages * (bm + bn + block_r) * depth * element_size > SMALL_M_NEEDS.smem_per_block:
        depth //= 2
    return BranchConfig(bm, bn, depth, 1, 2, stages)


@functools.lru_cache(maxsize=256)
def _constexprs(dtype: torch.dtype, R: int, flag: tuple, bm: int, bn: int, bk: int) -> tuple:
    return (
        flag, ("DOT_UPCAST", dot_upcast(dtype)), ("INPUT_PRECISION", input_precision(dtype)),
        ("BLOCK_M", bm), ("BLOCK_N", bn), ("BLOCK_K", bk), ("BLOCK_R", dot_block(R)),
    )  # fmt: skip


_launch_fwd = CachedLauncher(_forward_kernel)
_launch_bwd = CachedLauncher(_backward_kernel)


def _config(M: int, K: int, N: int, R: int, element_size: int, config: BranchConfig | None) -> BranchConfig:
    if M > MAX_M:
        raise ValueError(f"lora_linear: version='small' takes M ≤ {MAX_M} rows, got M = {M}")
    rule = small_m_rule(M, K, N, R, element_size)
    return rule if config is None else config.filled(rule)


def small_m_forward(x, weight, lora_a, lora_b, scale: float, bias=None, config: BranchConfig | None = None):
    """``(y [M, N], s·t [M, r])`` for 2-D x (arguments checked by the caller; any strides)."""
    M, K = x.shape
    N, R = lora_b.shape
    c = _config(M, K, N, R, x.element_size(), config)
    y = torch.empty((M, N), device=x.device, dtype=x.dtype)
    ts = torch.empty((M, R), device=x.device, dtype=x.dtype)
    _launch_fwd(
        (cdiv(N, c.block_n),),
        (x, weight, lora_a, lora_b, bias if bias is not None else y, y, ts, M, K, N, R, float(scale),
         x.stride(0), x.stride(1), weight.stride(0), weight.stride(1), lora_a.stride(0), lora_a.stride(1),
         lora_b.stride(0), lora_b.stride(1), y.stride(0), y.stride(1), ts.stride(0), ts.stride(1)),
        _constexprs(x.dtype, R, ("HAS_BIAS", bias is not None), c.block_m, c.block_n, c.block_k),
        c.num_warps, c.num_stages,
    )  # fmt: skip
    return y, ts


def small_m_backward(dy, x, weight, lora_a, lora_b, ts, scale: float, need_dx: bool, config=None):
    """``(dX or None, dA, dB)`` from dY [M, N] and the forward's s·t (2-D, checked by the caller)."""
    M, K = x.shape
    N, R = lora_b.shape
    c = _config(M, K, N, R, x.element_size(), config)
    dx = torch.empty((M, K), device=x.device, dtype=x.dtype) if need_dx else None
    da, db = (
        torch.empty_like(lora_a, memory_format=torch.contiguous_format),
        torch.empty_like(lora_b, memory_format=torch.contiguous_format),
    )
    out = dx if need_dx else da  # (an unused pointer when not need_dx)
    _launch_bwd(
        (cdiv(K, c.block_n),),  # the roles of the forward's two sizes swapped: see small_m_rule
        (dy, x, weight, lora_a, lora_b, ts, out, da, db, M, K, N, R, float(scale), cdiv(N, c.block_k),
         dy.stride(0), dy.stride(1), x.stride(0), x.stride(1), weight.stride(0), weight.stride(1),
         lora_a.stride(0), lora_a.stride(1), lora_b.stride(0), lora_b.stride(1), ts.stride(0), ts.stride(1),
         out.stride(0), out.stride(1), da.stride(0), da.stride(1), db.stride(0), db.stride(1)),
        _constexprs(x.dtype, R, ("NEED_DX", need_dx), c.block_m, c.block_k, c.block_n),
        c.num_warps, c.num_stages,
    )  # fmt: skip
    return dx, da, db
