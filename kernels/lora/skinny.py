"""LoRA's skinny products in one pass over a wide matrix: ``u = P·L`` ([M, r]) and ``D = Pᵀ·T`` ([C, r]).

P [M, C] is wide (x or dY: 64 MB at 8192 × 4096 bf16), L [C, r] and T [M, r] are thin. Where they appear:

===================  ==================  =====================  ======================
pass                 P                   u = P·L                D = Pᵀ·T
===================  ==================  =====================  ======================
forward shrink       x [M, K]            s·t = s·x Aᵀ           —
backward, pass 1     dY [M, N]           s·u = s·dY B           dB = dYᵀ (s·t)
backward, pass 2     x [M, K]            —                      dAᵀ = xᵀ (s·u)
===================  ==================  =====================  ======================

Both are memory-bound: 2·M·C·r FLOPs each (4.3 GFLOP at r = 16, nothing for the tensor cores) against
M·C·e bytes of P. cuBLAS runs each as its own GEMM at ≈ 1.7 TB/s (≈ 38 µs for 64 MB on an H100), so the
LoRA backward's s·u and dB read dY twice. Here one program reads a ``[BLOCK_M, BLOCK_C]`` tile of P once and
feeds both dots from it: the backward's first pass reads dY once (half the bytes).

**Grid and reductions** (deterministic: no atomics). u sums over C and D sums over M, so a program that owns
a strip of columns and a group of rows produces partial sums of both:

- program (g, c) walks the rows of row group g, ``BLOCK_M`` at a time, over columns ``c·BLOCK_C …``;
- u: each program writes an fp32 partial ``[C / BLOCK_C, M, r]``, summed over its first axis afterwards
  (with only u wanted and ``BLOCK_C = C``, the program loops over all columns and writes u itself);
- D: each program keeps its fp32 ``[BLOCK_C, r]`` partial in registers over its rows, then writes it to
  ``[G, C, r]`` (G row groups), summed afterwards.

The second stage is ``torch.sum`` over the first axis: a fixed reduction order, so results are bitwise
reproducible run to run. Partials at M = 8192, C = 4096, r = 16, BLOCK_C = 256, G = 8: u 8 MB, D 2 MB — small
beside the 64 MB of P they save re-reading.
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from kernels.fast_launch import CachedLauncher
from kernels.launch import cdiv, dot_block, input_precision, sm_count
from kernels.runtime import interpreting

__all__ = ["skinny_pays", "skinny_products"]

_INTERPRET = interpreting()


@triton.jit
def _skinny_kernel(
    p_ptr, l_ptr, t_ptr, u_ptr, d_ptr, M, C, R, ROWS_PER_GROUP, scale,
    stride_pm, stride_pc, stride_lc, stride_lr, stride_tm, stride_tr,
    stride_ug, stride_um, stride_ur, stride_dg, stride_dc, stride_dr,
    WITH_U: tl.constexpr, WITH_D: tl.constexpr, U_FINAL: tl.constexpr, DOT_UPCAST: tl.constexpr,
    INPUT_PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_R: tl.constexpr, NUM_STAGES: tl.constexpr,
):  # fmt: skip
    g = tl.program_id(0)
    c = tl.program_id(1)
    rs = tl.arange(0, BLOCK_R)
    r_mask = rs < R
    d = tl.zeros([BLOCK_C, BLOCK_R], dtype=tl.float32)
    row_end = tl.minimum(g * ROWS_PER_GROUP + ROWS_PER_GROUP, M)
    for m0 in tl.range(g * ROWS_PER_GROUP, row_end, BLOCK_M, num_stages=NUM_STAGES):
        rows = m0 + tl.arange(0, BLOCK_M)
        row_mask = rows < row_end
        if U_FINAL:  # one program per row block: u over all of C, then s·u written in the input dtype
            u = tl.zeros([BLOCK_M, BLOCK_R], dtype=tl.float32)
            for c0 in tl.range(0, C, BLOCK_C, num_stages=NUM_STAGES):
                cols = c0 + tl.arange(0, BLOCK_C)
                col_mask = cols < C
                p = tl.load(
                    p_ptr + rows.to(tl.int64)[:, None] * stride_pm + cols[None, :] * stride_pc,
                    mask=row_mask[:, None] & col_mask[None, :],
                    other=0.0,
                )
                l_ = tl.load(
                    l_ptr + cols[:, None] * stride_lc + rs[None, :] * stride_lr,
                    mask=col_mask[:, None] & r_mask[None, :],
                    other=0.0,
                )
                if DOT_UPCAST:
                    p = p.to(tl.float32)
                    l_ = l_.to(tl.float32)
                u = tl.dot(p, l_, u, input_precision=INPUT_PRECISION)
            # rounded to the dtype first, then scaled (what ``(x @ L) * s`` in torch computes)
            us = (u.to(u_ptr.dtype.element_ty).to(tl.float32) * scale).to(u_ptr.dtype.element_ty)
            tl.store(
                u_ptr + rows.to(tl.int64)[:, None] * stride_um + rs[None, :] * stride_ur,
                us,
                mask=row_mask[:, None] & r_mask[None, :],
            )
        else:
            cols = c * BLOCK_C + tl.arange(0, BLOCK_C)
            col_mask = cols < C
            p = tl.load(
                p_ptr + rows.to(tl.int64)[:, None] * stride_pm + cols[None, :] * stride_pc,
                mask=row_mask[:, None] & col_mask[None, :],
                other=0.0,
            )
            if DOT_UPCAST:
                p = p.to(tl.float32)
            if WITH_U:
                l_ = tl.load(
                    l_ptr + cols[:, None] * stride_lc + rs[None, :] * stride_lr,
                    mask=col_mask[:, None] & r_mask[None, :],
                    other=0.0,
                )
                if DOT_UPCAST:
                    l_ = l_.to(tl.float32)
                u = tl.dot(p, l_, input_precision=INPUT_PRECISION)
                tl.store(
                    u_ptr + c * stride_ug + rows.to(tl.int64)[:, None] * stride_um + rs[None, :] * stride_ur,
                    u,
                    mask=row_mask[:, None] & r_mask[None, :],
                )
            if WITH_D:
                t = tl.load(
                    t_ptr + rows.to(tl.int64)[:, None] * stride_tm + rs[None, :] * stride_tr,
                    mask=row_mask[:, None] & r_mask[None, :],
                    other=0.0,
                )
                if DOT_UPCAST:
                    t = t.to(tl.float32)
                d = tl.dot(tl.trans(p), t, d, input_precision=INPUT_PRECISION)
    if WITH_D:
        cols = c * BLOCK_C + tl.arange(0, BLOCK_C)
        tl.store(
            d_ptr + g * stride_dg + cols[:, None] * stride_dc + rs[None, :] * stride_dr,
            d,
            mask=(cols < C)[:, None] & r_mask[None, :],
        )


def _tiles(M: int, C: int, device: torch.device) -> tuple[int, int, int, int]:
    """(BLOCK_M, BLOCK_C, row groups G, warps): column strips × G row groups ≈ the SM count."""
    if _INTERPRET:
        return min(64, dot_block(M)), min(64, dot_block(C)), 1, 4
    bm, bc = 64, 256
    strips = cdiv(C, bc)
    groups = max(1, min(cdiv(M, bm), sm_count(device) // strips))
    return bm, bc, groups, 8


def skinny_pays(M: int, C: int) -> bool:
    """Whether these passes replace cuBLAS's: only where P is large enough that device time, not host time,
    decides (measured when a Triton launch here cost ≈ 70–90 µs of host time on the H100 machine and a torch
    op ≈ 25; the cached launch of :mod:`kernels.fast_launch` now costs ≈ 28, so the 8192 × 4096 shrink may
    pay too: not re-measured).
    H100, bf16, r = 16: M, C = 8192, 4096: s·u + dB 57 µs against 68, shrink 36.7 against 40.2 (too little
    to pay for the launches); 16384, 14336: s·u + dB 230–234 µs against 340; 16384, 4096: shrink 61.6 against
    64.7. Always under the interpreter, so the CPU tests run these kernels."""
    return _INTERPRET or M * C >= 2**26


@functools.lru_cache(maxsize=1024)
def _plan(M: int, C: int, R: int, device, dtype, precision: str, with_u: bool, with_d: bool):
    """Tiles, grid, rows per group and constexprs of one call shape (computed once per shape)."""
    bm, bc, groups, warps = _tiles(M, C, device)
    u_final = with_u and not with_d
    br = dot_block(R)
    stages = 1 if _INTERPRET else (3 if br <= 32 else 2)  # r = 64 at 3 stages: 237 KB asked, 227 KB there
    if u_final:
        bm = 32 if not _INTERPRET else bm
        grid, rows_per_group = (cdiv(M, bm), 1), bm
    else:
        strips = cdiv(C, bc)
        rows_per_group = cdiv(cdiv(M, groups), bm) * bm
        groups = cdiv(M, rows_per_group)
        grid = (groups, strips)
    constexprs = (
        ("WITH_U", with_u), ("WITH_D", with_d), ("U_FINAL", u_final),
        ("DOT_UPCAST", _INTERPRET and dtype == torch.bfloat16), ("INPUT_PRECISION", precision),
        ("BLOCK_M", bm), ("BLOCK_C", bc), ("BLOCK_R", br), ("NUM_STAGES", stages),
    )  # fmt: skip
    return grid, rows_per_group, constexprs, warps, stages


_launch = CachedLauncher(_skinny_kernel)


def skinny_products(
    p: torch.Tensor,
    shrink: torch.Tensor | None,
    t: torch.Tensor | None,
    scale: float = 1.0,
    d_transposed: bool = False,
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """``(s·P·L, Pᵀ·T)`` from one pass over ``p`` [M, C]; either product is skipped when its operand is None.

    ``shrink`` L [C, r] (any strides); ``t`` T [M, r]. u comes back as ``(s·(P·L)) `` in p's dtype (rounded
    to the dtype before scaling when it is the only product, as torch's ``(P @ L) * s`` would; summed in fp32
    and rounded once otherwise); D as ``[C, r]``, or ``[r, C]`` contiguous with ``d_transposed`` (dA's
    layout), in p's dtype. Arguments already checked (2-D, same device and dtype).
    """
    M, C = p.shape
    R = (shrink if shrink is not None else t).shape[1]
    device, dtype = p.device, p.dtype
    with_u, with_d = shrink is not None, t is not None
    u_final = with_u and not with_d
    grid, rows_per_group, constexprs, warps, stages = _plan(
        M, C, R, device, dtype, input_precision(dtype), with_u, with_d
    )
    groups, strips = grid
    if u_final:
        u = torch.empty((M, R), device=device, dtype=dtype)
    else:
        u = torch.empty((strips, M, R), device=device, dtype=torch.float32) if with_u else None
    d, ds = None, (0, 0, 0)
    if with_d:
        d_shape = (groups, R, C) if d_transposed else (groups, C, R)
        d = torch.empty(d_shape, device=device, dtype=torch.float32)
        ds = (d.stride(0), d.stride(2), d.stride(1)) if d_transposed else d.stride()
    us = (0, *u.stride()) if u_final else (u.stride() if with_u else (0, 0, 0))
    _launch(
        grid,
        (
            p, shrink if with_u else p, t if with_d else p, u if with_u else p, d if with_d else p,
            M, C, R, rows_per_group, float(scale),
            p.stride(0), p.stride(1),
            *(shrink.stride() if with_u else (0, 0)), *(t.stride() if with_d else (0, 0)),
            *us, *ds,
        ),
        constexprs,
        warps,
        stages,
    )  # fmt: skip
    if with_u and not u_final:
        u = torch.sum(u, 0).mul_(scale).to(dtype)
    if with_d:
        d = d.sum(0).to(dtype)
    return u, d
