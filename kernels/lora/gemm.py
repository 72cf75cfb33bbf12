"""A Hopper-grade GEMM with a low-rank epilogue: ``out = P·Q + bias + Tₛ·E`` with ``Tₛ = s·(P·L)``.

The one kernel behind the fused LoRA forward (v2, v3) and the LoRA backward's dX (see
:mod:`kernels.lora.linear`):

===========  ================  ====================  ===================
operand      shape             forward               backward (dX)
===========  ================  ====================  ===================
P            [M, Kr]           x [M, K]              dY [M, N]
Q            [Kr, Nc]          Wᵀ (W is [N, K])      W [N, K]
L (shrink)   [Kr, r]           Aᵀ (A is [r, K])      B [N, r]
E (expand)   [r, Nc]           Bᵀ (B is [N, r])      A [r, K]
Tₛ           [M, r]            s·x Aᵀ (saved)        s·dY B (for dA)
out          [M, Nc]           y                     dX
G            [M, r]            —                     s·x Aᵀ (saved)
D = Pᵀ·G     [Kr, r]           —                     dB = dYᵀ (s·t)
===========  ================  ====================  ===================

FLOPs: 2·M·Kr·Nc (the base GEMM) + 2·M·Kr·r (the shrink) + 2·M·r·Nc (the expand). Bytes (element size s):
P, Q and out once each, (M·Kr + Kr·Nc + M·Nc)·s, plus the small L, E, T. At M = 8192, K = N = 4096, r = 16,
bf16: 275 GFLOP for the base, 2.2 more for LoRA (+0.8%); 168 MB (160 MiB) moved, +0.5 MB for LoRA (A and B
0.13 MB each, T 0.26 MB). Compute-bound: the floor is the base GEMM's time (≈ 370 µs at the H100's ≈ 740
TFLOP/s), so a fused LoRA forward can in principle cost within ~1% of the frozen base linear. What separates
a kernel from that floor is how well the base GEMM itself runs, hence the Hopper habits here
(on an H100, measured when these kernels were designed: 0.98–1.06× cuBLAS):

- **Tensor descriptors** (TMA): ``tl.make_tensor_descriptor`` for P, Q and out, so tiles arrive by the bulk
  copy engine and out-of-range rows and columns are zero-filled (loads) or dropped (stores) by the hardware.
  A descriptor needs 16-byte aligned base and row strides and a unit last stride: :func:`tma_compatible`
  checks, and :mod:`kernels.lora.linear` falls back to a general path otherwise. E and T are small and loaded
  with masked pointer loads (any strides, any r); L by descriptor where its layout allows (:func:`_l_mode`).
- **Persistent grid**: one program per SM loops over output tiles; no launch tail of partial waves.
- **Tile order** (:class:`kernels.configs.GemmConfig` ``order``): ``"grouped"`` walks tiles ``pid, pid +
  programs, …`` in GROUP_M super-rows (neighbouring programs share W tiles in L2). ``"rows"`` hands each
  program *runs* of ``run_n`` consecutive N-tiles of one row block, the runs themselves in grouped order.

**Where the shrink goes** (v3, and the backward's u = dY B). ``T = P·L`` needs a whole row block of P, which
the base GEMM's K loop streams through shared memory anyway, so the first design added one small
``tl.dot(p_tile, l_tile)`` per K step. Its MMA work is r/BLOCK_N of the base (+6% at r = 16), but on an H100
it cost ~25% of a K step in every tile it ran in: an ``m64n16k16`` wgmma reads the same x slice from shared
memory as an ``m64n256k16`` one for 1/16 of the work (8192 × 4096 × 4096: +88 µs if every tile computes it;
386 µs against 361 when only the first of each run of 4 tiles did).

So the shrink now runs *beside* the GEMM, on SMs of its own, in the same launch (``SHRINK``):

- **Producers.** Programs ``0 … SHRINK_PROGRAMS − 1`` compute Tₛ = s·T for row blocks ``pid, pid + S, …``, in
  the order the GEMM tiles reach them. Each streams its row block of P in wide, deep loads (``SHRINK_BLOCK_K``
  columns, 4–6 in flight): one SM alone moves bytes only as fast as it keeps them in flight (3 loads of
  ``[128, 64]``: 378 µs for the fused GEMM at 8192 × 4096 × 4096; ``[128, 128]`` × 4: 370; × 6: 368). It
  stores Tₛ, then raises the row block's flag with a *release* atomic.
- **Tiles.** The other programs run the GEMM as with T precomputed (v2). Before its K loop a tile checks the
  flag with an *acquire* atomic and, if raised, loads Tₛ (the load hides behind the loop); if not, it waits
  after its loop, before the epilogue. Flags are zeroed per launch (a 4-byte-per-row-block memset).
- **No deadlock:** producers wait on nothing; tiles wait only on producers. All programs fit on the GPU at
  once (:func:`programs_split`), and producers have the lowest program ids, so they hold SMs first.
- **The SMs for it:** 4 producers at 8192 × 4096 × 4096 leave 128 programs for 1024 tiles: 8 tiles each, as
  132 programs would need too. Measured there (H100, 2026-11-23, kernel times): 368–370 µs with the shrink
  fused, against 363 with T given and 347 for cuBLAS's base GEMM alone; the dX GEMM the same (368–371 against
  361). 8 producers: 445 (the tiles then take 9 rounds).
- **Then dB** (the backward, ``g`` given, r ≤ 16: :func:`producers_take_d`). Once their row blocks are out,
  the producers compute D = Pᵀ·G = dYᵀ(s·t) in column strips of dY (:func:`transposed_strip`), a second pass
  over dY on their SMs while the tiles still run. It fits because a producer's first pass ends early: one SM
  streams ≈ 90–116 GB/s (4 producers alone read dY's 64 MB in 176 µs), and with the GEMM beside them they
  finished at 187–193 µs of a 361–364 µs launch. Measured (H100, 2026-11-24, 8192 × 4096 × 4096): the dX
  launch 375 µs with dB against 371 without, where cuBLAS's dB pass costs 38. At r = 32 the producers' dots
  weigh more (380 → 407 µs), at r = 64 far more (393 → 513): there cuBLAS computes dB.
- **Deterministic:** each Tₛ row and each D row is one program's fixed-order sum, the same bits every run.
- **In the interpreter** programs run one after another in id order: the producer finishes every row block
  before the tile program starts, and no wait ever spins.

The producer that publishes Tₛ is the forward's saved s·T (for dB = dYᵀ(s·T)); in the backward, s·u gives dA =
(s·u)ᵀ x (cuBLAS: the producers have no time left for a pass over x, measured in :mod:`kernels.lora.linear`).
Storing the *scaled* operand saves the backward two scaling passes.

**Epilogue** (its small operands loaded before the K loop): ``acc += Tₛ · E_tile`` (one ``tl.dot`` of
K-depth r; Tₛ = s·T with T rounded to the input dtype first, as a torch matmul would store it), ``+ bias``,
cast, two TMA stores of half a tile each.

In interpreter mode (CPU) the same kernel runs: descriptors are emulated (and their alignment checked), bf16
dots are upcast (``DOT_UPCAST``), one program walks every tile (after a producer, if the shrink is fused).
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from kernels import gpu_features
from kernels.configs import GemmConfig
from kernels.fast_launch import CachedLauncher, ensure_allocator
from kernels.gpu_features import Needs, resident_programs
from kernels.launch import cdiv, dot_block, input_precision, sm_count
from kernels.runtime import interpreting

__all__ = [
    "MAX_RANK",
    "block_rank",
    "gemm_rule",
    "lowrank_gemm",
    "producers_take_d",
    "tma_compatible",
]

PRODUCER_SMEM = 216 * 1024  # bytes of a producer's loads in flight (227 KB per block on an H100)
SHRINK_PROGRAMS = 4  # producers of Tₛ in a fused launch (H100: 16 row blocks each at 8192 × 4096 × 4096)
MAX_RANK = 128  # BLOCK_R ≤ 128: the fp32 [BLOCK_M, BLOCK_R] tile of T stays in registers beside acc
TMA_ALIGN = 16  # bytes: base address and row strides of a tensor descriptor
# What the paths need of a GPU (kernels.gpu_features): tensor descriptors (sm_90), and the shared memory the
# H100 tiles were sized for. Tiles: 3 stages of 128 × 64 P and 256 × 64 Q tiles plus half an output tile,
# 176 KB in 16-bit; producers: PRODUCER_SMEM. 8 warps a program.
GEMM_SMEM = 176 * 1024
FAST_PATH_NEEDS = Needs("LoRA v2 (tensor descriptors)", (9, 0), GEMM_SMEM, threads=256)
# v3 also spin-waits: every program must be resident at once (programs_split: one per SM, at least 2 SMs).
FUSED_NEEDS = Needs("LoRA v3 (producers and waiting tiles)", (9, 0), PRODUCER_SMEM, threads=256, min_sms=2)
_INTERPRET = interpreting()  # fixed at import: the @triton.jit decorators below were made in this mode


@triton.jit
def _tile_coords(tile_id, num_pid_m, num_pid_n, GROUP_M: tl.constexpr, ORDER_ROWS: tl.constexpr):
    # (pid_m, pid_n) of a linear tile index: row-major, or grouped into GROUP_M-row super-blocks.
    if ORDER_ROWS:
        pid_m = tile_id // num_pid_n
        pid_n = tile_id % num_pid_n
    else:
        width = GROUP_M * num_pid_n
        first_m = (tile_id // width) * GROUP_M
        group_rows = tl.minimum(num_pid_m - first_m, GROUP_M)
        pid_m = first_m + (tile_id % width) % group_rows
        pid_n = (tile_id % width) // group_rows
    return pid_m, pid_n


@triton.jit
def _main_loop(
    p_desc, q_desc, off_m, off_n, KR, acc,
    Q_KMAJOR: tl.constexpr, DOT_UPCAST: tl.constexpr, INPUT_PRECISION: tl.constexpr, BLOCK_K: tl.constexpr,
):  # fmt: skip
    # acc += P[rows, :] · Q[:, cols]
    for ki in range(0, tl.cdiv(KR, BLOCK_K)):
        off_k = ki * BLOCK_K
        p = p_desc.load([off_m, off_k])
        if Q_KMAJOR:
            q = q_desc.load([off_n, off_k]).T
        else:
            q = q_desc.load([off_k, off_n])
        if DOT_UPCAST:
            p = p.to(tl.float32)
            q = q.to(tl.float32)
        acc = tl.dot(p, q, acc, input_precision=INPUT_PRECISION)
    return acc


@triton.jit
def _shrink_loop(
    p_desc, l_src, off_m, KR, R, stride_lk, stride_lr,
    L_MODE: tl.constexpr, DOT_UPCAST: tl.constexpr, INPUT_PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_R: tl.constexpr, STAGES: tl.constexpr,
):  # fmt: skip
    # T[rows] = P[rows, :] · L, fp32 [BLOCK_M, BLOCK_R] (columns ≥ R zero)
    rs = tl.arange(0, BLOCK_R)
    t = tl.zeros([BLOCK_M, BLOCK_R], dtype=tl.float32)
    for ki in tl.range(0, tl.cdiv(KR, BLOCK_K), num_stages=STAGES):
        off_k = ki * BLOCK_K
        p = p_desc.load([off_m, off_k])
        if L_MODE == 1:  # descriptor over L stored [r, Kr] (A in the forward)
            lt = l_src.load([0, off_k]).T
        elif L_MODE == 2:  # descriptor over L stored [Kr, r] (B in the backward)
            lt = l_src.load([off_k, 0])
        else:  # any strides, any r: masked pointer loads
            ks = off_k + tl.arange(0, BLOCK_K)
            lt = tl.load(
                l_src + ks[:, None] * stride_lk + rs[None, :] * stride_lr,
                mask=(ks < KR)[:, None] & (rs < R)[None, :],
                other=0.0,
            )
        if DOT_UPCAST:
            p = p.to(tl.float32)
            lt = lt.to(tl.float32)
        t = tl.dot(p, lt, t, input_precision=INPUT_PRECISION)
    return t


@triton.jit
def transposed_strip(
    p_desc, g_ptr, off_c, M, R, stride_gm, stride_gr,
    DOT_UPCAST: tl.constexpr, INPUT_PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_R: tl.constexpr, STAGES: tl.constexpr,
):  # fmt: skip
    # D[cols] = P[:, cols]ᵀ · G, fp32 [BLOCK_C, BLOCK_R]: a column strip of P walked down all its rows
    rs = tl.arange(0, BLOCK_R)
    d = tl.zeros([BLOCK_C, BLOCK_R], dtype=tl.float32)
    for mi in tl.range(0, tl.cdiv(M, BLOCK_M), num_stages=STAGES):
        rows = mi * BLOCK_M + tl.arange(0, BLOCK_M)
        p = p_desc.load([mi * BLOCK_M, off_c])  # rows ≥ M arrive as zeros
        g = tl.load(
            g_ptr + rows.to(tl.int64)[:, None] * stride_gm + rs[None, :] * stride_gr,
            mask=(rows < M)[:, None] & (rs < R)[None, :],
            other=0.0,
        )
        if DOT_UPCAST:
            p = p.to(tl.float32)
            g = g.to(tl.float32)
        d = tl.dot(p.T, g, d, input_precision=INPUT_PRECISION)
    return d


@triton.jit
def _is_ready(flag_ptr):
    # Has the producer published this row block's Tₛ? (acquire: its stores are visible after a 1)
    return tl.atomic_cas(flag_ptr, 1, 1, sem="acquire") == 1


@triton.jit
def _row_block_ts(t_ptr, t_offs, t_mask, flag_ptr, SHRINK: tl.constexpr):
    # Before a tile's K loop: Tₛ of its row block, loaded now if it is there (its latency then hides behind
    # the loop). Not there yet (``ready`` false): the tile waits for it after its loop (:func:`_await_ts`).
    if SHRINK:
        ready = _is_ready(flag_ptr)
    else:
        ready = tl.full([], 1, tl.int1)
    mask = t_mask & (tl.zeros_like(t_mask) | ready)  # (the interpreter's `&` of a scalar makes integers)
    ts = tl.load(t_ptr + t_offs, mask=mask, other=0.0, cache_modifier=".cg")
    return ready, ts


@triton.jit
def _await_ts(t_ptr, t_offs, t_mask, flag_ptr, ready, ts):
    if ready == 0:
        while _is_ready(flag_ptr) == 0:
            pass
        ts = tl.load(t_ptr + t_offs, mask=t_mask, other=0.0, cache_modifier=".cg")
    return ts


@triton.jit
def _lowrank_gemm_kernel(
    p_ptr, q_ptr, l_ptr, e_ptr, bias_ptr, t_ptr, flag_ptr, out_ptr, g_ptr, d_ptr,
    M, NC, KR, R, scale, GEMM_PROGRAMS,
    stride_pm, stride_q, stride_om, stride_lk, stride_lr, stride_er, stride_en, stride_tm, stride_tr,
    stride_gm, stride_gr, stride_dk, stride_dr,
    Q_KMAJOR: tl.constexpr, SHRINK: tl.constexpr, SHRINK_PROGRAMS: tl.constexpr, L_MODE: tl.constexpr,
    PRODUCE_D: tl.constexpr,
    HAS_BIAS: tl.constexpr, ORDER_ROWS: tl.constexpr,
    DOT_UPCAST: tl.constexpr, INPUT_PRECISION: tl.constexpr,
    WARP_SPECIALIZE: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_R: tl.constexpr,
    GROUP_M: tl.constexpr, RUN_N: tl.constexpr, SHRINK_BLOCK_K: tl.constexpr, SHRINK_STAGES: tl.constexpr,
):  # fmt: skip
    dtype = out_ptr.dtype.element_ty
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(NC, BLOCK_N)
    rs = tl.arange(0, BLOCK_R)
    r_mask = rs < R
    if SHRINK and pid < SHRINK_PROGRAMS:
        # A producer: s·T of row blocks pid, pid + SHRINK_PROGRAMS, … (the order the tiles reach them), each
        # published by a flag the tiles of that row block wait on. One SM streams a whole row block of P, so
        # its loads are wide and deep (SHRINK_BLOCK_K, SHRINK_STAGES): the bytes in flight set its bandwidth.
        ps_desc = tl.make_tensor_descriptor(p_ptr, [M, KR], [stride_pm, 1], [BLOCK_M, SHRINK_BLOCK_K])
        if L_MODE == 1:
            l_src = tl.make_tensor_descriptor(l_ptr, [R, KR], [stride_lr, 1], [BLOCK_R, SHRINK_BLOCK_K])
        elif L_MODE == 2:
            l_src = tl.make_tensor_descriptor(l_ptr, [KR, R], [stride_lk, 1], [SHRINK_BLOCK_K, BLOCK_R])
        else:
            l_src = l_ptr
        for pid_m in range(pid, num_pid_m, SHRINK_PROGRAMS):
            off_m = pid_m * BLOCK_M
            rows = off_m + tl.arange(0, BLOCK_M)
            t = _shrink_loop(
                ps_desc, l_src, off_m, KR, R, stride_lk, stride_lr,
                L_MODE, DOT_UPCAST, INPUT_PRECISION, BLOCK_M, SHRINK_BLOCK_K, BLOCK_R, SHRINK_STAGES,
            )  # fmt: skip
            ts = (t.to(dtype).to(tl.float32) * scale).to(dtype)  # rounded, then scaled, as torch would
            tl.store(
                t_ptr + rows.to(tl.int64)[:, None] * stride_tm + rs[None, :] * stride_tr,
                ts,
                mask=(rows < M)[:, None] & r_mask[None, :],
            )
            tl.debug_barrier()  # every thread's stores issued before the flag is released
            tl.atomic_xchg(flag_ptr + pid_m, 1, sem="release")
        if PRODUCE_D:
            # Then D = Pᵀ·G ([Kr, r]: the backward's dB = dYᵀ(s·t)), column strips pid, pid + S, … of P, each
            # a fixed-order sum by one program. A pass of its own over P, in the time the tiles still need.
            for strip in range(pid, tl.cdiv(KR, SHRINK_BLOCK_K), SHRINK_PROGRAMS):
                off_c = strip * SHRINK_BLOCK_K
                d = transposed_strip(
                    ps_desc, g_ptr, off_c, M, R, stride_gm, stride_gr,
                    DOT_UPCAST, INPUT_PRECISION, BLOCK_M, SHRINK_BLOCK_K, BLOCK_R, SHRINK_STAGES,
                )  # fmt: skip
                cs = off_c + tl.arange(0, SHRINK_BLOCK_K)
                tl.store(
                    d_ptr + cs[:, None] * stride_dk + rs[None, :] * stride_dr,
                    d.to(dtype),
                    mask=(cs < KR)[:, None] & r_mask[None, :],
                )
    else:
        gemm_pid = pid - SHRINK_PROGRAMS if SHRINK else pid
        p_desc = tl.make_tensor_descriptor(p_ptr, [M, KR], [stride_pm, 1], [BLOCK_M, BLOCK_K])
        if Q_KMAJOR:  # Q stored transposed, [Nc, Kr] (W in the forward)
            q_desc = tl.make_tensor_descriptor(q_ptr, [NC, KR], [stride_q, 1], [BLOCK_N, BLOCK_K])
        else:  # Q stored [Kr, Nc] (W in the backward)
            q_desc = tl.make_tensor_descriptor(q_ptr, [KR, NC], [stride_q, 1], [BLOCK_K, BLOCK_N])
        # The output tile is stored in two halves: a [BLOCK_M, BLOCK_N / 2] staging buffer instead of a full
        # one saves 32 KB of shared memory at 128 × 256 (a full one does not fit beside 3 stages and the LoRA
        # tiles: 244 KB asked, 227 KB there, on an H100 with triton 3.6).
        out_desc = tl.make_tensor_descriptor(out_ptr, [M, NC], [stride_om, 1], [BLOCK_M, BLOCK_N // 2])
        if ORDER_ROWS:
            # Runs: a unit is RUN_N consecutive N-tiles of one row block; units go to programs in grouped
            # order (so the tiles in flight at any moment still share GROUP_M row blocks and few column
            # blocks, as in grouped order). The unit's tiles share one load of Tₛ.
            units_n = tl.cdiv(num_pid_n, RUN_N)
            for unit in range(gemm_pid, num_pid_m * units_n, GEMM_PROGRAMS):
                pid_m, unit_n = _tile_coords(unit, num_pid_m, units_n, GROUP_M, False)
                off_m = pid_m * BLOCK_M
                rows = off_m + tl.arange(0, BLOCK_M)
                t_mask = (rows < M)[:, None] & r_mask[None, :]
                t_offs = rows.to(tl.int64)[:, None] * stride_tm + rs[None, :] * stride_tr
                ready, ts = _row_block_ts(t_ptr, t_offs, t_mask, flag_ptr + pid_m, SHRINK)
                for j in range(0, RUN_N):
                    pid_n = unit_n * RUN_N + j
                    if pid_n < num_pid_n:
                        off_n = pid_n * BLOCK_N
                        e = _load_e(e_ptr, off_n, NC, R, stride_er, stride_en, BLOCK_N, BLOCK_R)
                        acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
                        acc = _main_loop(
                            p_desc, q_desc, off_m, off_n, KR, acc,
                            Q_KMAJOR, DOT_UPCAST, INPUT_PRECISION, BLOCK_K,
                        )  # fmt: skip
                        if SHRINK:
                            ts = _await_ts(t_ptr, t_offs, t_mask, flag_ptr + pid_m, ready, ts)
                            ready = tl.full([], 1, tl.int1)
                        _epilogue(
                            acc, ts, e, bias_ptr, out_desc, off_m, off_n, NC,
                            HAS_BIAS, DOT_UPCAST, INPUT_PRECISION, BLOCK_M, BLOCK_N,
                        )  # fmt: skip
        else:
            # Grouped order, every tile on its own. ``warp_specialize``: Triton's producer (TMA loads) and
            # consumer (wgmma, epilogue) warps (T precomputed only: a tile that may wait has no such split).
            num_tiles = num_pid_m * num_pid_n
            for tile_id in tl.range(gemm_pid, num_tiles, GEMM_PROGRAMS, warp_specialize=WARP_SPECIALIZE):
                pid_m, pid_n = _tile_coords(tile_id, num_pid_m, num_pid_n, GROUP_M, ORDER_ROWS)
                off_m = pid_m * BLOCK_M
                off_n = pid_n * BLOCK_N
                rows = off_m + tl.arange(0, BLOCK_M)
                t_mask = (rows < M)[:, None] & r_mask[None, :]
                t_offs = rows.to(tl.int64)[:, None] * stride_tm + rs[None, :] * stride_tr
                # The epilogue's small operands are loaded before the K loop: their latency hides behind it.
                e = _load_e(e_ptr, off_n, NC, R, stride_er, stride_en, BLOCK_N, BLOCK_R)
                ready, ts = _row_block_ts(t_ptr, t_offs, t_mask, flag_ptr + pid_m, SHRINK)
                acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
                acc = _main_loop(
                    p_desc, q_desc, off_m, off_n, KR, acc, Q_KMAJOR, DOT_UPCAST, INPUT_PRECISION, BLOCK_K
                )
                if SHRINK:
                    ts = _await_ts(t_ptr, t_offs, t_mask, flag_ptr + pid_m, ready, ts)
                _epilogue(
                    acc, ts, e, bias_ptr, out_desc, off_m, off_n, NC,
                    HAS_BIAS, DOT_UPCAST, INPUT_PRECISION, BLOCK_M, BLOCK_N,
                )  # fmt: skip


@triton.jit
def _load_e(e_ptr, off_n, NC, R, stride_er, stride_en, BLOCK_N: tl.constexpr, BLOCK_R: tl.constexpr):
    # E[:, cols] ([BLOCK_R, BLOCK_N], rows ≥ R and columns ≥ NC zero): masked pointer loads, any strides.
    rs = tl.arange(0, BLOCK_R)
    cols = off_n + tl.arange(0, BLOCK_N)
    return tl.load(
        e_ptr + rs[:, None] * stride_er + cols[None, :] * stride_en,
        mask=(rs < R)[:, None] & (cols < NC)[None, :],
        other=0.0,
    )


@triton.jit
def _epilogue(
    acc, ts, e, bias_ptr, out_desc, off_m, off_n, NC,
    HAS_BIAS: tl.constexpr, DOT_UPCAST: tl.constexpr, INPUT_PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    # acc += (s·T) · E[:, cols] (+ bias), then the tile goes out in two TMA stores of half a tile each.
    dtype = ts.dtype
    if DOT_UPCAST:
        ts = ts.to(tl.float32)
        e = e.to(tl.float32)
    acc = tl.dot(ts, e, acc, input_precision=INPUT_PRECISION)
    if HAS_BIAS:
        cols = off_n + tl.arange(0, BLOCK_N)
        acc += tl.load(bias_ptr + cols, mask=cols < NC, other=0.0).to(tl.float32)[None, :]
    halves = tl.permute(tl.reshape(acc, (BLOCK_M, 2, BLOCK_N // 2)), (0, 2, 1))
    left, right = tl.split(halves)
    out_desc.store([off_m, off_n], left.to(dtype))
    out_desc.store([off_m, off_n + BLOCK_N // 2], right.to(dtype))


def tma_compatible(*tensors: torch.Tensor) -> bool:
    """Every tensor is 2-D with unit last stride and 16-byte aligned base and row stride (TMA's rules)."""
    return all(_descriptor_ok(t, 0, 1) for t in tensors)


def _descriptor_ok(t: torch.Tensor, row_dim: int, col_dim: int) -> bool:
    # tma_compatible(t) for (row_dim, col_dim) = (0, 1), tma_compatible(t.t()) for (1, 0), without the view
    if t.dim() != 2 or t.stride(col_dim) != 1 or t.data_ptr() % TMA_ALIGN:
        return False
    return not (t.stride(row_dim) * t.element_size()) % TMA_ALIGN


def block_rank(r: int) -> int:
    """BLOCK_R: r padded to a power of two, at least 16 (``tl.dot``'s smallest tile)."""
    return dot_block(r)


def gemm_rule(M: int, NC: int, KR: int, r: int, dtype: torch.dtype, num_sms: int) -> GemmConfig:
    """The default config: the Hopper tile (128×256×64) on a GPU, narrowed where the GPU would sit idle.

    - 16-bit: 128 × 256 × 64, 3 stages (4 do not fit 227 KB), 8 warps. Order (H100, 8192 × 4096 × 4096,
      2026-11-23, cuBLAS 344 µs): T precomputed, runs of 2 N-tiles in grouped order 361 µs, grouped 367,
      runs of 4 363, of 8 395, whole row blocks (the old "rows") 424; so runs of 2 where a row block has at
      most 16 N-tiles, grouped beyond (16384 × 4096 × 14336: grouped 2608 µs, cuBLAS 2476). The same config
      with the shrink fused: its producers use SMs of their own (module docstring), so the tiles' work is the
      same as with T precomputed. r > 64: 64 × 128 × 64 and 4 warps (the ``[·, r]`` tiles of T, L and E crowd
      shared memory); up to r = 64 the wide tile stays (r = 64: 374 µs at 128 × 256, 438–440 at 128 × 128).
    - at most half as many tiles as SMs (small M): halve BLOCK_N, then BLOCK_M, down to 64. (H100, M = 512,
      K = N = 4096: 128 × 128 tiles, 128 programs, 45 µs; 128 × 64, 256 tiles, 59 µs.)
    - fp32 (no tensor-core TMA path worth tuning): 128 × 128 × 32, 3 stages.
    - interpreter: tiles no larger than the problem (programs run one after another on a CPU).
    """
    if _INTERPRET:
        bm = min(64, dot_block(M))
        bn = min(64, dot_block(NC))
        bk = min(64, dot_block(KR))
        return GemmConfig(bm, bn, bk, 8, 4, 1, "rows", False, 2)
    if dtype == torch.float32:
        return GemmConfig(128, 128, 32, 8, 8, 3, "grouped", False, 4)
    if block_rank(r) > 64:  # the [·, r] tiles of T, L and E crowd shared memory and registers
        return GemmConfig(64, 128, 64, 8, 4, 3, "grouped", False, 4)
    bm, bn = 128, 256
    while 2 * cdiv(M, bm) * cdiv(NC, bn) <= num_sms and bn > 64:
        bn //= 2
    while 2 * cdiv(M, bm) * cdiv(NC, bn) <= num_sms and bm > 64:
        bm //= 2
    stages = 3 if bn == 256 or block_rank(r) > 16 else 4  # r = 64 at 4 stages: 246 KB asked, 227 KB there
    if bm == 128 and bn == 256 and cdiv(NC, bn) <= 16:
        return GemmConfig(bm, bn, 64, 8, 8, stages, "rows", False, 2)
    return GemmConfig(bm, bn, 64, 8, 8, stages, "grouped", False, 4)


def _l_mode(shrink: torch.Tensor) -> int:
    # How a producer reads L [Kr, r]: by tensor descriptor when a layout allows one (1: stored as [r, Kr]
    # rows, A in the forward; 2: stored as [Kr, r] rows, B in the backward, needs r·e a multiple of 16 bytes),
    # else by masked pointer loads (0). (When the shrink ran in the tiles' main loop, pointer-loaded L cost
    # ≈ 80 µs more at 8192×4096×4096 on an H100; not re-measured for the producers.)
    if _descriptor_ok(shrink, 1, 0):  # tma_compatible(shrink.t())
        return 1
    if _descriptor_ok(shrink, 0, 1):
        return 2
    return 0


def programs_split(num_tiles: int, num_pid_m: int, num_sms: int, fused: bool) -> tuple[int, int]:
    """``(GEMM programs, shrink programs)`` of one launch; together at most one per SM (so all are resident
    at once: a tile waiting on a producer never holds an SM the producer needs).

    Producers: :data:`SHRINK_PROGRAMS` (fewer for few row blocks or SMs). GEMM programs: the fewest that take
    the same number of tiles each as ``num_sms − producers`` would (8192 × 4096 × 4096 at 128 × 256 tiles:
    1024 tiles, 128 programs of 8 tiles each, as 132 programs would need 8 rounds too)."""
    if not fused:
        return max(1, min(num_sms, num_tiles)), 0
    shrink = max(1, min(SHRINK_PROGRAMS, num_pid_m, num_sms // 16))
    rounds = cdiv(num_tiles, max(1, num_sms - shrink))
    return cdiv(num_tiles, rounds), shrink


@functools.lru_cache(maxsize=64)
def check_co_resident(programs: int, threads: int, device: torch.device) -> None:
    """Refuse a fused launch whose programs might not all be resident at once (its tiles spin-wait on its
    producers: a grid larger than what fits could hang instead of failing). :func:`programs_split` keeps the
    grid at one program per SM, which fits whenever one program fits an SM; this checks that count against
    the device (:func:`kernels.gpu_features.resident_programs`, worst-case registers)."""
    f = gpu_features.features(device)
    fit = resident_programs(f, threads, PRODUCER_SMEM) if f is not None else programs
    if programs > fit:
        raise RuntimeError(
            f"lowrank_gemm: {programs} programs whose tiles wait on producers, but only {fit} fit on "
            f"{f.name} at once (a spin-wait could then never end): use version='v2' or 'v1'"
        )


def producers_take_d(r: int) -> bool:
    """Whether the backward's dX launch also computes dB = dYᵀ(s·t) in its producers (``g``): a second pass
    over dY on their few SMs, which fits beside the GEMM only while their first pass is bandwidth-bound."""
    return block_rank(r) <= 16


def _producer_loads(block_m: int, block_r: int, itemsize: int) -> tuple[tuple[str, int], tuple[str, int]]:
    """A producer's loads: ``[block_m, SHRINK_BLOCK_K]`` tiles of P (128 columns in 16-bit, 64 in fp32) with
    their L tiles (or, for D, their G tiles), as many in flight as :data:`PRODUCER_SMEM` holds, 2 to 6 (bf16,
    r = 16: 6 × 36 KB)."""
    block_k = 128 if itemsize <= 2 else 64
    stage = (block_m * block_k + max(block_k, block_m) * block_r) * itemsize
    return ("SHRINK_BLOCK_K", block_k), ("SHRINK_STAGES", max(2, min(6, PRODUCER_SMEM // stage)))


@functools.lru_cache(maxsize=1024)
def _plan(M, NC, KR, R, dtype, num_sms, q_kmajor, fused, l_mode, produce_d, has_bias, precision, c) -> tuple:
    """Everything a launch derives from shapes and config (once per shape key): grid and constexprs."""
    num_pid_m = cdiv(M, c.block_m)
    gemm_programs, shrink_programs = programs_split(
        num_pid_m * cdiv(NC, c.block_n), num_pid_m, num_sms, fused
    )
    if fused and c.warp_specialize:
        raise ValueError("GemmConfig: warp_specialize needs Tₛ precomputed (a fused shrink's tiles may wait)")
    constexprs = (
        ("Q_KMAJOR", q_kmajor), ("SHRINK", fused), ("SHRINK_PROGRAMS", shrink_programs), ("L_MODE", l_mode),
        ("PRODUCE_D", produce_d), ("HAS_BIAS", has_bias), ("ORDER_ROWS", c.order == "rows"),
        ("DOT_UPCAST", _INTERPRET and dtype == torch.bfloat16), ("INPUT_PRECISION", precision),
        ("WARP_SPECIALIZE", bool(c.warp_specialize)),
        ("BLOCK_M", c.block_m), ("BLOCK_N", c.block_n), ("BLOCK_K", c.block_k), ("BLOCK_R", block_rank(R)),
        ("GROUP_M", c.group_m), ("RUN_N", c.run_n),
        *_producer_loads(c.block_m, block_rank(R), dtype.itemsize),
    )  # fmt: skip
    return (gemm_programs + shrink_programs,), gemm_programs, num_pid_m, constexprs


_launch = CachedLauncher(_lowrank_gemm_kernel)


def lowrank_gemm(
    p: torch.Tensor,
    q: torch.Tensor,
    q_kmajor: bool,
    shrink: torch.Tensor,
    expand: torch.Tensor,
    scale: float,
    config: GemmConfig,
    *,
    t: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    g: torch.Tensor | None = None,
) -> tuple[torch.Tensor, ...]:
    """``out = P·Q + bias + Tₛ·E`` with ``Tₛ = s·(P·L)``, returning ``(out, Tₛ)``; arguments already checked.

    ``p`` [M, Kr]; ``q`` [Nc, Kr] if ``q_kmajor`` else [Kr, Nc]; ``shrink`` (L) [Kr, r] and ``expand`` (E)
    [r, Nc] as strided views (any strides); ``t``: a precomputed Tₛ [M, r] (then the shrink is skipped, and
    ``shrink`` and ``scale`` are unused), else Tₛ is computed by producer programs of the launch and
    returned. ``g`` G [M, r] (with the shrink fused only): the producers also compute ``D = Pᵀ·G`` [Kr, r],
    returned third, ``(out, Tₛ, D)``. ``config`` must be complete; P and Q must be :func:`tma_compatible`.
    The grid and constexprs come from :func:`_plan` (cached per shape), the launch from
    :class:`kernels.fast_launch.CachedLauncher`.
    """
    M, KR = p.shape
    NC = q.shape[0] if q_kmajor else q.shape[1]
    R = shrink.shape[1]
    device, dtype = p.device, p.dtype
    if bias is not None and bias.stride(0) != 1:
        bias = bias.contiguous()  # the epilogue reads bias[cols] with unit stride
    out = torch.empty((M, NC), device=device, dtype=dtype)
    fused = t is None
    if fused:
        t = torch.empty((M, R), device=device, dtype=dtype)
    elif g is not None:
        raise ValueError(
            "lowrank_gemm: g (for D = Pᵀ·G) needs the shrink fused (t=None): producers compute D"
        )
    d = torch.empty((KR, R), device=device, dtype=dtype) if g is not None else None
    grid, gemm_programs, num_pid_m, constexprs = _plan(
        M, NC, KR, R, dtype, sm_count(device), q_kmajor, fused, _l_mode(shrink) if fused else 0,
        g is not None, bias is not None, input_precision(dtype), config,
    )  # fmt: skip
    if fused and not _INTERPRET:
        check_co_resident(grid[0], config.num_warps * 32, device)
    # one flag per row block, raised by the producer that publishes its Tₛ
    flags = torch.zeros(num_pid_m, device=device, dtype=torch.int32) if fused else out
    if not _INTERPRET:
        ensure_allocator()
    _launch(
        grid,
        (
            p, q, shrink, expand, bias if bias is not None else out, t, flags, out,
            g if g is not None else out, d if d is not None else out,
            M, NC, KR, R, float(scale), gemm_programs,
            p.stride(0), q.stride(0), out.stride(0), *shrink.stride(), *expand.stride(), *t.stride(),
            *(g.stride() if g is not None else (0, 0)), *(d.stride() if d is not None else (0, 0)),
        ),
        constexprs,
        config.num_warps,
        config.num_stages,
    )  # fmt: skip
    return (out, t) if d is None else (out, t, d)
