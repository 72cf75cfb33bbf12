"""The GEMM over an NF4 weight, dequantized on chip, with a low-rank term in its epilogue: the one kernel of
the fused QLoRA linear's forward (``x Wᵀ + s·t Bᵀ``) and of its backward's dX (``dY W + s·u A``).

Math: W ``[N, K]`` is stored in NF4 (:mod:`kernels.qlora.nf4`): element ``W[n, k]`` is flat index
``f = n·K + k``, its 4-bit code the high nibble of byte ``f // 2`` when f is even, the low one when odd, its
block's absmax ``absmax[f // blocksize]``: ``W[n, k] = NF4_CODE[code] · absmax[f // blocksize]``. The kernel
computes ``C = A · op(W) + T · R`` with ``op(W) = Wᵀ`` (``transposed``: C ``[M, N]``, A ``[M, K]``; the
forward) or ``op(W) = W`` (C ``[M, K]``, A ``[M, N]``; the backward's dX), T ``[M, r]``, R ``[r, columns of
C]``. One program per output tile, in grouped order (:mod:`kernels.gemm.grouped`); at each step along
the contraction it loads a tile of A, the bytes and absmaxes of the matching tile of op(W), turns them into
16-bit values in registers (a 16-entry table lookup times the block's absmax) and feeds ``tl.dot``. After the
loop the low-rank term: one more ``tl.dot`` of a ``[BLOCK_M, r]`` tile of T by an ``[r, BLOCK_N]`` tile of R.

Two named versions of that decoding (:data:`VERSIONS`): ``"elements"`` loads, for every value of the tile, its
byte and its block's absmax (each byte twice, once per nibble; any K); ``"pairs"`` (K even, so a byte's two
values are neighbours in one row) loads each byte and its absmax once, decodes both nibbles and puts them side
by side with ``tl.interleave``: half the loads. Which is faster on a GPU is for ``benchmarks/bench_qlora.py``
to say (both rows are in it); :func:`choose_version` takes pairs wherever K allows.

Bytes, at M = 8192, K = N = 4096, bf16: the kernel reads W as 8.4 MB of 4-bit codes plus 1.0 MB of fp32
absmaxes (the double quantization already undone: one per 64 values, :meth:`NF4Weight.absmax`, a pass of
its own per call) against 33.5 MB for W in bf16; the dequantize-then-GEMM order writes the 33.5 MB bf16 copy
and reads it back.

Portable: plain loads and ``tl.dot``, no tensor descriptors: any GPU Triton supports (sm_80 and newer,
:data:`NEEDS`) and the CPU interpreter. Edges masked (any M, N, K; rows of W cut by a block anywhere).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.gpu_features import TRITON_FLOOR, Needs
from kernels.launch import cdiv, dot_block, input_precision
from kernels.runtime import dot_upcast, interpreting

__all__ = ["NEEDS", "VERSIONS", "check_version", "choose_version", "nf4_matmul_lowrank"]

NEEDS = Needs("the NF4 GEMM (kernels.qlora.nf4_gemm)", capability=TRITON_FLOOR)
# how a K step turns bytes into values: "elements" (a byte load and a lookup per value, any K), "pairs" (each
# byte loaded once for its two values, half the byte and absmax loads; K even): named versions, timed side by
# side in benchmarks/bench_qlora.py
VERSIONS = ("pairs", "elements")


@triton.jit
def _w_by_element(packed_ptr, absmax_ptr, code_ptr, inner, cols, INNER, COLS, K_W,
                  TRANSPOSED: tl.constexpr, BLOCKSIZE: tl.constexpr):  # fmt: skip
    # the [BLOCK_K, BLOCK_N] tile of op(W), fp32, one byte load and one table lookup per element
    if TRANSPOSED:  # op(W)[inner, col] = W[col, inner]: its flat index in W
        flat = cols[None, :] * K_W + inner[:, None]
    else:  # op(W)[inner, col] = W[inner, col]
        flat = inner[:, None] * K_W + cols[None, :]
    in_w = (inner[:, None] < INNER) & (cols[None, :] < COLS)
    byte = tl.load(packed_ptr + flat // 2, mask=in_w, other=0).to(tl.int32)
    code = tl.where(flat % 2 == 0, byte >> 4, byte & 0xF)
    scale = tl.load(absmax_ptr + flat // BLOCKSIZE, mask=in_w, other=0.0)
    return tl.load(code_ptr + code) * scale  # 0 outside W: scale 0


@triton.jit
def _w_by_pairs(packed_ptr, absmax_ptr, code_ptr, k0, col0, INNER, COLS, K_W,
                TRANSPOSED: tl.constexpr, BLOCKSIZE: tl.constexpr, BLOCK_K: tl.constexpr,
                BLOCK_N: tl.constexpr):  # fmt: skip
    # the same tile from half as many byte and absmax loads, for an even K of W (a byte's two values are then
    # neighbours in one row, and in one block of the even BLOCKSIZE): each byte loaded once, its high nibble
    # the even element, its low nibble the odd one, the pair put side by side (tl.interleave)
    if TRANSPOSED:  # pairs along the contraction: a [BLOCK_N, BLOCK_K / 2] tile of bytes, transposed after
        even_k = k0 + 2 * tl.arange(0, BLOCK_K // 2).to(tl.int64)
        cols = col0 + tl.arange(0, BLOCK_N).to(tl.int64)
        even = cols[:, None] * K_W + even_k[None, :]
        ok = (cols[:, None] < COLS) & (even_k[None, :] < INNER)
    else:  # pairs along the output columns: a [BLOCK_K, BLOCK_N / 2] tile of bytes
        inner = k0 + tl.arange(0, BLOCK_K).to(tl.int64)
        even_c = col0 + 2 * tl.arange(0, BLOCK_N // 2).to(tl.int64)
        even = inner[:, None] * K_W + even_c[None, :]
        ok = (inner[:, None] < INNER) & (even_c[None, :] < COLS)
    byte = tl.load(packed_ptr + even // 2, mask=ok, other=0).to(tl.int32)
    scale = tl.load(absmax_ptr + even // BLOCKSIZE, mask=ok, other=0.0)
    w = tl.interleave(tl.load(code_ptr + (byte >> 4)) * scale, tl.load(code_ptr + (byte & 0xF)) * scale)
    if TRANSPOSED:
        w = tl.trans(w)
    return w


@triton.jit
def _nf4_gemm_kernel(
    a_ptr, packed_ptr, absmax_ptr, code_ptr, t_ptr, r_ptr, c_ptr,
    M, COLS, INNER, K_W, RANK,
    stride_am, stride_ai, stride_tm, stride_tr, stride_rr, stride_rc, stride_cm, stride_cc,
    TRANSPOSED: tl.constexpr, PAIRS: tl.constexpr, BLOCKSIZE: tl.constexpr, BLOCK_R: tl.constexpr,
    DOT_UPCAST: tl.constexpr, INPUT_PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
):  # fmt: skip
    # C [M, COLS] = A [M, INNER] · op(W) [INNER, COLS] + T [M, RANK] · R [RANK, COLS]; one program per tile.
    # tiles in super-rows of GROUP_M row blocks (kernels.gemm.grouped): a column block of W, dequantized from
    # the same bytes by GROUP_M programs in a row, is read from DRAM about once and then from L2
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(COLS, BLOCK_N)
    in_group = GROUP_M * num_pid_n
    first_m = (pid // in_group) * GROUP_M
    group_rows = tl.minimum(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % in_group) % group_rows
    pid_n = (pid % in_group) // group_rows
    rows = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
    cols = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)).to(tl.int64)
    ks = tl.arange(0, BLOCK_K).to(tl.int64)
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k0 in range(0, INNER, BLOCK_K):
        inner = k0 + ks
        a = tl.load(
            a_ptr + rows[:, None] * stride_am + inner[None, :] * stride_ai,
            mask=(rows[:, None] < M) & (inner[None, :] < INNER),
            other=0.0,
        )
        if PAIRS:
            w = _w_by_pairs(packed_ptr, absmax_ptr, code_ptr, k0, pid_n * BLOCK_N, INNER, COLS, K_W,
                            TRANSPOSED, BLOCKSIZE, BLOCK_K, BLOCK_N)  # fmt: skip
        else:
            w = _w_by_element(
                packed_ptr, absmax_ptr, code_ptr, inner, cols, INNER, COLS, K_W, TRANSPOSED, BLOCKSIZE
            )
        w = w.to(a_ptr.dtype.element_ty)
        if DOT_UPCAST:  # bf16 under the interpreter (triton-lang/triton#11584): multiply in fp32
            a = a.to(tl.float32)
            w = w.to(tl.float32)
        acc = tl.dot(a, w, acc, input_precision=INPUT_PRECISION)
    # the low-rank term: T's rows of this tile by R's columns of this tile (RANK ≤ BLOCK_R, masked)
    rs = tl.arange(0, BLOCK_R)
    t = tl.load(
        t_ptr + rows[:, None] * stride_tm + rs[None, :] * stride_tr,
        mask=(rows[:, None] < M) & (rs[None, :] < RANK),
        other=0.0,
    )
    r = tl.load(
        r_ptr + rs[:, None] * stride_rr + cols[None, :] * stride_rc,
        mask=(rs[:, None] < RANK) & (cols[None, :] < COLS),
        other=0.0,
    )
    if DOT_UPCAST:
        t = t.to(tl.float32)
        r = r.to(tl.float32)
    acc = tl.dot(t, r, acc, input_precision=INPUT_PRECISION)
    c_ptrs = c_ptr + rows[:, None] * stride_cm + cols[None, :] * stride_cc
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(rows[:, None] < M) & (cols[None, :] < COLS))


def choose_version(k: int) -> str:
    """``"pairs"`` where a byte's two values share a row of W (K even), else ``"elements"``."""
    return "pairs" if k % 2 == 0 else "elements"


def check_version(version: str | None, k: int, fn: str) -> None:
    """A clear error for a version that is not one of :data:`VERSIONS` or cannot take this W."""
    if version is not None and version not in VERSIONS:
        raise ValueError(f"{fn}: version={version!r} is not one of {VERSIONS} (or None)")
    if version == "pairs" and k % 2:
        raise ValueError(f"{fn}: version='pairs' needs an even K (a byte's two values in one row); K = {k}")


def _tiles(M: int, cols: int, inner: int, dtype: torch.dtype) -> tuple[int, int, int, int, int]:
    """``(BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages)``: small under the interpreter; on a GPU 128 × 128
    output tiles walked 64 deep (32 for fp32, whose tiles take twice the registers)."""
    if interpreting():
        return min(32, dot_block(M)), min(32, dot_block(cols)), min(32, dot_block(inner)), 4, 1
    return 128, 128, (64 if dtype != torch.float32 else 32), 8, 3


def nf4_matmul_lowrank(
    a: torch.Tensor,
    packed: torch.Tensor,
    absmax: torch.Tensor,
    code: torch.Tensor,
    weight_shape: tuple[int, int],
    blocksize: int,
    transposed: bool,
    t: torch.Tensor,
    r: torch.Tensor,
    out: torch.Tensor | None = None,
    version: str | None = None,
) -> torch.Tensor:
    """``a · op(W) + t · r`` with W ``weight_shape`` = (N, K) in NF4 (``packed`` uint8, ``absmax`` fp32 per
    block, ``code`` the 16 fp32 code values): ``op(W) = Wᵀ`` if ``transposed`` (a ``[M, K]`` → ``[M, N]``)
    else W (a ``[M, N]`` → ``[M, K]``); t ``[M, r]``, r ``[r, columns]``; written into ``out`` if given (a
    contiguous ``[M, columns]`` of a's dtype). ``version``: one of :data:`VERSIONS`, or None for
    :func:`choose_version`'s. Arguments are checked by the caller (:mod:`kernels.qlora.linear`); this
    launches."""
    n, k = weight_shape
    version = version or choose_version(k)
    M, inner = a.shape
    cols = n if transposed else k
    out = torch.empty((M, cols), device=a.device, dtype=a.dtype) if out is None else out
    if M == 0 or cols == 0:
        return out
    bm, bn, bk, warps, stages = _tiles(M, cols, inner, a.dtype)
    grid = (cdiv(M, bm) * cdiv(cols, bn),)
    _nf4_gemm_kernel[grid](
        a, packed, absmax, code, t, r, out, M, cols, inner, k, t.shape[1],
        *a.stride(), *t.stride(), *r.stride(), *out.stride(),
        TRANSPOSED=transposed, PAIRS=version == "pairs", BLOCKSIZE=blocksize,
        BLOCK_R=max(16, dot_block(t.shape[1])),
        DOT_UPCAST=dot_upcast(a.dtype), INPUT_PRECISION=input_precision(a.dtype),
        BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, num_warps=warps, num_stages=stages,
    )  # fmt: skip
    return out
