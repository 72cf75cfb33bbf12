"""A Hopper-grade GEMM with a low-rank epilogue: ``out = P·Q + bias + Tₛ·E`` with ``Tₛ = s·(P·L)``.

The one kernel behind the fused LoRA forward (v2, v3) and the LoRA backward's dX (see :mod:`kernels.lora`):

===========  ================  ====================  ===================
operand      shape             forward               backward (dX)
===========  ================  ====================  ===================
P            [M, Kr]           x [M, K]              dY [M, N]
Q            [Kr, Nc]          Wᵀ (W is [N, K])      W [N, K]
L (shrink)   [Kr, r]           Aᵀ (A is [r, K])      B [N, r]
E (expand)   [r, Nc]           Bᵀ (B is [N, r])      A [r, K]
Tₛ           [M, r]            s·x Aᵀ (saved)        s·dY B (for dA)
out          [M, Nc]           y                     dX
===========  ================  ====================  ===================

FLOPs: 2·M·Kr·Nc (the base GEMM) + 2·M·Kr·r (the shrink) + 2·M·r·Nc (the expand). Bytes (element size s):
P, Q and out once each, (M·Kr + Kr·Nc + M·Nc)·s, plus the small L, E, T. At M = 8192, K = N = 4096, r = 16,
bf16: 275 GFLOP for the base, 2.2 more for LoRA (+0.8%); 96 MB moved, +0.3 MB for LoRA. Compute-bound: the
floor is the base GEMM's time (≈ 370 µs at the H100's ≈ 740 TFLOP/s), so a fused LoRA forward can in
principle cost within ~1% of the frozen base linear. What separates a kernel from that floor is how well the
base GEMM itself runs, hence the Hopper habits here (shared/PLATFORM.md: they reached 0.98–1.06× cuBLAS):

- **Tensor descriptors** (TMA): ``tl.make_tensor_descriptor`` for P, Q and out, so tiles arrive by the bulk
  copy engine and out-of-range rows and columns are zero-filled (loads) or dropped (stores) by the hardware.
  A descriptor needs 16-byte aligned base and row strides and a unit last stride: :func:`tma_compatible`
  checks, and :mod:`kernels.lora` falls back to a general path otherwise. L, E, T are small and loaded with
  masked pointer loads (any strides, any r).
- **Persistent grid**: one program per SM loops over output tiles; no launch tail of partial waves.
- **Tile order** (:class:`kernels.configs.GemmConfig` ``order``): ``"grouped"`` walks tiles ``pid, pid +
  programs, …`` in GROUP_M super-rows (neighbouring programs share W tiles in L2). ``"rows"`` hands each
  program *runs* of ``run_n`` consecutive N-tiles of one row block, the runs themselves in grouped order.

**Where the shrink goes.** ``T = P·L`` needs all of a row block of P, which the K loop streams through
shared memory anyway, so the shrink is one extra small ``tl.dot(p_tile, l_tile)`` per K step. Its MMA work is
r/BLOCK_N of the base (+6% at r = 16), but on an H100 it cost ~25% per tile it runs in (+88 µs at 8192 ×
4096 × 4096 when every tile computes it): an ``m64n16k16`` wgmma reads the same x slice from shared memory
as an ``m64n256k16`` one for 1/16 of the work. So in rows order only the first tile of each run computes T
(fp32 ``[BLOCK_M, r]`` in registers) and the run's other tiles reuse it: runs of 4 N-tiles cost 386 µs
against 361 for the GEMM with T precomputed (runs of 2: 405, 8: 409 as L2 reuse drops). ``SHRINK=False``
reads a precomputed Tₛ instead (v2). The tile that starts a row block (``pid_n == 0``) always computes T,
so it writes Tₛ out: the forward saves s·T for dB = dYᵀ(s·T), the backward's s·u gives dA = (s·u)ᵀ x.
Storing the *scaled* operand saves the backward two scaling passes.

**Epilogue** (its small operands loaded before the K loop): ``acc += Tₛ · E_tile`` (one ``tl.dot`` of
K-depth r; Tₛ = s·T with T rounded to the input dtype first, as a torch matmul would store it), ``+ bias``,
cast, two TMA stores of half a tile each.

In interpreter mode (CPU) the same kernel runs: descriptors are emulated (and their alignment checked), bf16
dots are upcast (``DOT_UPCAST``), and the grid has one program, which then walks every tile.
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from kernels.configs import GemmConfig
from kernels.fast_launch import CachedLauncher, ensure_allocator
from kernels.launch import cdiv, next_pow2, sm_count
from kernels.runtime import interpreting

__all__ = ["MAX_RANK", "block_rank", "gemm_rule", "input_precision", "lowrank_gemm", "tma_compatible"]

MAX_RANK = 128  # BLOCK_R ≤ 128: the fp32 [BLOCK_M, BLOCK_R] tile of T stays in registers beside acc
TMA_ALIGN = 16  # bytes: base address and row strides of a tensor descriptor
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
    p_desc, q_desc, l_src, off_m, off_n, KR, R, stride_lk, stride_lr, acc, t,
    WITH_SHRINK: tl.constexpr, L_MODE: tl.constexpr, Q_KMAJOR: tl.constexpr, DOT_UPCAST: tl.constexpr,
    INPUT_PRECISION: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_R: tl.constexpr,
):  # fmt: skip
    # acc += P[rows, :] · Q[:, cols]; with WITH_SHRINK also t += P[rows, :] · L from the same P tiles.
    rs = tl.arange(0, BLOCK_R)
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
        if WITH_SHRINK:
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
                lt = lt.to(tl.float32)
            t = tl.dot(p, lt, t, input_precision=INPUT_PRECISION)
    return acc, t


@triton.jit
def _lowrank_gemm_kernel(
    p_ptr, q_ptr, l_ptr, e_ptr, bias_ptr, t_ptr, out_ptr,
    M, NC, KR, R, scale, NUM_PROGRAMS,
    stride_pm, stride_q, stride_om, stride_lk, stride_lr, stride_er, stride_en, stride_tm, stride_tr,
    Q_KMAJOR: tl.constexpr, SHRINK: tl.constexpr, L_MODE: tl.constexpr, HAS_BIAS: tl.constexpr,
    ORDER_ROWS: tl.constexpr,
    DOT_UPCAST: tl.constexpr, INPUT_PRECISION: tl.constexpr,
    WARP_SPECIALIZE: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_R: tl.constexpr,
    GROUP_M: tl.constexpr, RUN_N: tl.constexpr,
):  # fmt: skip
    dtype = out_ptr.dtype.element_ty
    p_desc = tl.make_tensor_descriptor(p_ptr, [M, KR], [stride_pm, 1], [BLOCK_M, BLOCK_K])
    if Q_KMAJOR:  # Q stored transposed, [Nc, Kr] (W in the forward)
        q_desc = tl.make_tensor_descriptor(q_ptr, [NC, KR], [stride_q, 1], [BLOCK_N, BLOCK_K])
    else:  # Q stored [Kr, Nc] (W in the backward)
        q_desc = tl.make_tensor_descriptor(q_ptr, [KR, NC], [stride_q, 1], [BLOCK_K, BLOCK_N])
    # The output tile is stored in two halves: a [BLOCK_M, BLOCK_N / 2] staging buffer instead of a full one
    # saves 32 KB of shared memory at 128 × 256 (a full one does not fit beside 3 stages and the LoRA tiles:
    # 244 KB asked, 227 KB there, on an H100 with triton 3.6).
    out_desc = tl.make_tensor_descriptor(out_ptr, [M, NC], [stride_om, 1], [BLOCK_M, BLOCK_N // 2])
    if L_MODE == 1:
        l_src = tl.make_tensor_descriptor(l_ptr, [R, KR], [stride_lr, 1], [BLOCK_R, BLOCK_K])
    elif L_MODE == 2:
        l_src = tl.make_tensor_descriptor(l_ptr, [KR, R], [stride_lk, 1], [BLOCK_K, BLOCK_R])
    else:
        l_src = l_ptr

    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(NC, BLOCK_N)
    num_tiles = num_pid_m * num_pid_n
    rs = tl.arange(0, BLOCK_R)
    r_mask = rs < R
    if ORDER_ROWS:
        # Runs: a unit is RUN_N consecutive N-tiles of one row block; units go to programs in grouped order
        # (so the tiles in flight at any moment still share GROUP_M row blocks and few column blocks, as in
        # grouped order). The first tile of a unit computes T in its main loop; the others reuse it.
        units_n = tl.cdiv(num_pid_n, RUN_N)
        t = tl.zeros([BLOCK_M, BLOCK_R], dtype=tl.float32)
        for unit in range(pid, num_pid_m * units_n, NUM_PROGRAMS):
            pid_m, unit_n = _tile_coords(unit, num_pid_m, units_n, GROUP_M, False)
            off_m = pid_m * BLOCK_M
            rows = off_m + tl.arange(0, BLOCK_M)
            t_mask = (rows < M)[:, None] & r_mask[None, :]
            t_offs = rows.to(tl.int64)[:, None] * stride_tm + rs[None, :] * stride_tr
            for j in range(0, RUN_N):
                pid_n = unit_n * RUN_N + j
                if pid_n < num_pid_n:
                    off_n = pid_n * BLOCK_N
                    e = _load_e(e_ptr, off_n, NC, R, stride_er, stride_en, BLOCK_N, BLOCK_R)
                    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
                    if SHRINK:
                        if j == 0:
                            t = tl.zeros([BLOCK_M, BLOCK_R], dtype=tl.float32)
                            acc, t = _main_loop(
                                p_desc, q_desc, l_src, off_m, off_n, KR, R, stride_lk, stride_lr, acc, t,
                                True, L_MODE, Q_KMAJOR, DOT_UPCAST, INPUT_PRECISION, BLOCK_K, BLOCK_R,
                            )  # fmt: skip
                        else:
                            acc, t = _main_loop(
                                p_desc, q_desc, l_src, off_m, off_n, KR, R, stride_lk, stride_lr, acc, t,
                                False, L_MODE, Q_KMAJOR, DOT_UPCAST, INPUT_PRECISION, BLOCK_K, BLOCK_R,
                            )  # fmt: skip
                        ts = (t.to(dtype).to(tl.float32) * scale).to(dtype)
                        if pid_n == 0:  # the row block's first tile publishes s·T (its unit computed T)
                            tl.store(t_ptr + t_offs, ts, mask=t_mask)
                    else:
                        ts = tl.load(t_ptr + t_offs, mask=t_mask, other=0.0)
                        acc, t = _main_loop(
                            p_desc, q_desc, l_src, off_m, off_n, KR, R, stride_lk, stride_lr, acc, t,
                            False, L_MODE, Q_KMAJOR, DOT_UPCAST, INPUT_PRECISION, BLOCK_K, BLOCK_R,
                        )  # fmt: skip
                    _epilogue(
                        acc, ts, e, bias_ptr, out_desc, off_m, off_n, NC,
                        HAS_BIAS, DOT_UPCAST, INPUT_PRECISION, BLOCK_M, BLOCK_N,
                    )  # fmt: skip
    else:
        # Grouped order, every tile on its own (the shrink, if fused, in every tile's main loop).
        # ``warp_specialize``: Triton's producer (TMA loads) and consumer (wgmma, epilogue) warps.
        for tile_id in tl.range(pid, num_tiles, NUM_PROGRAMS, warp_specialize=WARP_SPECIALIZE):
            pid_m, pid_n = _tile_coords(tile_id, num_pid_m, num_pid_n, GROUP_M, ORDER_ROWS)
            off_m = pid_m * BLOCK_M
            off_n = pid_n * BLOCK_N
            rows = off_m + tl.arange(0, BLOCK_M)
            t_mask = (rows < M)[:, None] & r_mask[None, :]
            t_offs = rows.to(tl.int64)[:, None] * stride_tm + rs[None, :] * stride_tr
            # The epilogue's small operands are loaded before the K loop: their latency hides behind it.
            e = _load_e(e_ptr, off_n, NC, R, stride_er, stride_en, BLOCK_N, BLOCK_R)
            if not SHRINK:
                ts = tl.load(t_ptr + t_offs, mask=t_mask, other=0.0)
            acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
            t = tl.zeros([BLOCK_M, BLOCK_R], dtype=tl.float32)
            acc, t = _main_loop(
                p_desc, q_desc, l_src, off_m, off_n, KR, R, stride_lk, stride_lr, acc, t,
                SHRINK, L_MODE, Q_KMAJOR, DOT_UPCAST, INPUT_PRECISION, BLOCK_K, BLOCK_R,
            )  # fmt: skip
            if SHRINK:  # every tile computed T; the first tile of each row block publishes s·T
                ts = (t.to(dtype).to(tl.float32) * scale).to(dtype)
                if pid_n == 0:
                    tl.store(t_ptr + t_offs, ts, mask=t_mask)
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
    for t in tensors:
        if t.dim() != 2 or t.stride(1) != 1 or t.data_ptr() % TMA_ALIGN:
            return False
        if (t.stride(0) * t.element_size()) % TMA_ALIGN:
            return False
    return True


def block_rank(r: int) -> int:
    """BLOCK_R: r padded to a power of two, at least 16 (``tl.dot``'s smallest tile)."""
    return max(16, next_pow2(r))


def gemm_rule(
    M: int, NC: int, KR: int, r: int, dtype: torch.dtype, num_sms: int, fused_shrink: bool = False
) -> GemmConfig:
    """The default config: PLATFORM.md's Hopper tile on a GPU, narrowed where the GPU would sit idle.

    - 16-bit: 128 × 256 × 64, 3 stages (4 do not fit 227 KB), 8 warps. Order (H100, 8192 × 4096 × 4096,
      2026-11-23, cuBLAS 344 µs): T precomputed, runs of 2 N-tiles in grouped order 361 µs, grouped 367,
      runs of 4 363, of 8 395, whole row blocks (the old "rows") 424; so runs of 2 where a row block has at
      most 16 N-tiles, grouped beyond (16384 × 4096 × 14336: grouped 2608 µs, cuBLAS 2476). With the
      shrink fused: runs of 4 (386 µs; 2: 405, 8: 409, every tile: 455). With ``fused_shrink`` and
      r > 32, a 128-wide N tile (T's fp32 ``[128, r]`` tile in registers beside a ``[128, 256]`` accumulator,
      and its pipelined L tiles, do not fit); r > 64: 64 × 128 × 64 and 4 warps. With T precomputed the
      wide tile stays up to r = 64 (r = 64: 374 µs at 128 × 256, 438–440 at 128 × 128).
    - at most half as many tiles as SMs (small M): halve BLOCK_N, then BLOCK_M, down to 64. (H100, M = 512,
      K = N = 4096: 128 × 128 tiles, 128 programs, 45 µs; 128 × 64, 256 tiles, 59 µs.)
    - fp32 (no tensor-core TMA path worth tuning): 128 × 128 × 32, 3 stages.
    - interpreter: tiles no larger than the problem (programs run one after another on a CPU).
    """
    if _INTERPRET:
        bm = min(64, max(16, next_pow2(M)))
        bn = min(64, max(16, next_pow2(NC)))
        bk = min(64, max(16, next_pow2(KR)))
        return GemmConfig(bm, bn, bk, 8, 4, 1, "rows", False, 2)
    if dtype == torch.float32:
        return GemmConfig(128, 128, 32, 8, 8, 3, "grouped", False, 4)
    if block_rank(r) > 64:  # the [·, r] tiles of T, L and E crowd shared memory and registers
        return GemmConfig(64, 128, 64, 8, 4, 3, "grouped", False, 4)
    bm, bn = 128, (256 if block_rank(r) <= 32 or not fused_shrink else 128)
    while 2 * cdiv(M, bm) * cdiv(NC, bn) <= num_sms and bn > 64:
        bn //= 2
    while 2 * cdiv(M, bm) * cdiv(NC, bn) <= num_sms and bm > 64:
        bm //= 2
    stages = 3 if bn == 256 or block_rank(r) > 16 else 4  # r = 64 at 4 stages: 246 KB asked, 227 KB there
    if bm == 128 and bn == 256 and (fused_shrink or cdiv(NC, bn) <= 16):
        return GemmConfig(bm, bn, 64, 8, 8, stages, "rows", False, 4 if fused_shrink else 2)
    return GemmConfig(bm, bn, 64, 8, 8, stages, "grouped", False, 4)


def input_precision(dtype: torch.dtype) -> str:
    # fp32 dots: TF32 only where torch's own matmuls would use it (as the fused MLP does).
    if dtype == torch.float32 and not _INTERPRET and torch.get_float32_matmul_precision() != "highest":
        return "tf32"
    return "ieee"


def _l_mode(shrink: torch.Tensor) -> int:
    # How the main loop reads L [Kr, r]: by tensor descriptor when a layout allows one (1: stored as [r, Kr]
    # rows, A in the forward; 2: stored as [Kr, r] rows, B in the backward, needs r·e a multiple of 16 bytes),
    # else by masked pointer loads (0). On an H100 the pointer-loaded shrink cost ≈ 80 µs at 8192×4096×4096
    # (+21% of the GEMM, against the +6% its MMA work predicts).
    if tma_compatible(shrink.t()):
        return 1
    if tma_compatible(shrink):
        return 2
    return 0


@functools.lru_cache(maxsize=1024)
def _plan(M, NC, KR, R, dtype, num_sms, q_kmajor, fused, l_mode, has_bias, precision, c: GemmConfig) -> tuple:
    """Everything a launch derives from shapes and config (once per shape key): grid and constexprs."""
    num_tiles = cdiv(M, c.block_m) * cdiv(NC, c.block_n)
    programs = max(1, min(num_sms, num_tiles))
    constexprs = (
        ("Q_KMAJOR", q_kmajor), ("SHRINK", fused), ("L_MODE", l_mode), ("HAS_BIAS", has_bias),
        ("ORDER_ROWS", c.order == "rows"),
        ("DOT_UPCAST", _INTERPRET and dtype == torch.bfloat16), ("INPUT_PRECISION", precision),
        ("WARP_SPECIALIZE", bool(c.warp_specialize)),
        ("BLOCK_M", c.block_m), ("BLOCK_N", c.block_n), ("BLOCK_K", c.block_k), ("BLOCK_R", block_rank(R)),
        ("GROUP_M", c.group_m), ("RUN_N", c.run_n),
    )  # fmt: skip
    return (programs,), programs, constexprs


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
) -> tuple[torch.Tensor, torch.Tensor]:
    """``out = P·Q + bias + Tₛ·E`` with ``Tₛ = s·(P·L)``, returning ``(out, Tₛ)``; arguments already checked.

    ``p`` [M, Kr]; ``q`` [Nc, Kr] if ``q_kmajor`` else [Kr, Nc]; ``shrink`` (L) [Kr, r] and ``expand`` (E)
    [r, Nc] as strided views (any strides); ``t``: a precomputed Tₛ [M, r] (then the shrink is skipped, and
    ``shrink`` and ``scale`` are unused), else Tₛ is computed in the main loop and returned. ``config`` must
    be complete; P and Q must be :func:`tma_compatible`. The grid and constexprs come from :func:`_plan`
    (cached per shape), the launch from :class:`kernels.fast_launch.CachedLauncher`.
    """
    M, KR = p.shape
    NC = q.shape[0] if q_kmajor else q.shape[1]
    R = shrink.shape[1]
    device, dtype = p.device, p.dtype
    out = torch.empty((M, NC), device=device, dtype=dtype)
    fused = t is None
    if fused:
        t = torch.empty((M, R), device=device, dtype=dtype)
    grid, programs, constexprs = _plan(
        M, NC, KR, R, dtype, sm_count(device), q_kmajor, fused, _l_mode(shrink) if fused else 0,
        bias is not None, input_precision(dtype), config,
    )  # fmt: skip
    if not _INTERPRET:
        ensure_allocator()
    _launch(
        grid,
        (
            p, q, shrink, expand, bias if bias is not None else out, t, out,
            M, NC, KR, R, float(scale), programs,
            p.stride(0), q.stride(0), out.stride(0), *shrink.stride(), *expand.stride(), *t.stride(),
        ),
        constexprs,
        config.num_warps,
        config.num_stages,
    )  # fmt: skip
    return out, t
