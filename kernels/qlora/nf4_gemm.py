"""The GEMM over an NF4 weight, dequantized on chip, with a low-rank term in its epilogue: the one kernel of
the fused QLoRA linear's forward (``x Wᵀ + s·t Bᵀ``) and of its backward's dX (``dY W + s·u A``).

Math: W ``[N, K]`` is stored in NF4 (:mod:`kernels.qlora.nf4`): element ``W[n, k]`` is flat index
``f = n·K + k``, its 4-bit code the high nibble of byte ``f // 2`` when f is even, the low one when odd, its
block's absmax ``absmax[f // blocksize]``: ``W[n, k] = NF4_CODE[code] · absmax[f // blocksize]``. The kernel
computes ``C = A · op(W) + T · R`` with ``op(W) = Wᵀ`` (``transposed``: C ``[M, N]``, A ``[M, K]``; the
forward) or ``op(W) = W`` (C ``[M, K]``, A ``[M, N]``; the backward's dX), T ``[M, r]``, R ``[r, columns of
C]``. One program per output tile, in grouped order (:mod:`kernels.gemm.grouped`); at each step along
the contraction it loads a tile of A, the bytes and absmaxes of the matching tile of op(W), turns them into
16-bit values in registers (the code's value times the block's absmax) and feeds ``tl.dot``. After the loop
the low-rank term: one more ``tl.dot`` of a ``[BLOCK_M, r]`` tile of T by an ``[r, BLOCK_N]`` tile of R.

The lookup: the 16 code values are loaded once into registers and each index is looked up with
``tl.gather`` on them. A load from the table in memory per value looks simpler, but the compiler pipelines
the loop's loads into asynchronous copies to shared memory (not all of them: "elements" below), and a gather
from global memory becomes one 4-byte copy per value (on an H200, several times slower than this lookup).

Two named versions of the decoding (:data:`VERSIONS`): ``"elements"`` loads, for every value of the tile, its
byte and its block's absmax (each byte twice, once per nibble; any K) at offsets ``f // 2``, a division the
compiler cannot see through: it does not know a row's bytes are contiguous, so those loads are not copied
ahead and each step waits for them. ``"pairs"`` (K even, so a byte's two values are neighbours in one row)
loads each byte once at offsets written as row · K/2 + column (contiguous, copied ahead), one absmax per
row of the tile where K is a multiple of the block (else one per byte), decodes both nibbles and puts them
side by side with ``tl.interleave``. ``benchmarks/bench_qlora.py`` times both; :func:`choose_version`
takes pairs wherever K allows.

Bytes, at M = 8192, K = N = 4096, bf16: the kernel reads W as 8.4 MB of 4-bit codes plus 1.0 MB of fp32
absmaxes (the double quantization already undone: one per 64 values, :meth:`NF4Weight.absmax`, a pass of
its own per call) against 33.5 MB for W in bf16; the dequantize-then-GEMM order writes the 33.5 MB bf16 copy
and reads it back.

Portable: plain loads, ``tl.gather`` and ``tl.dot``, no tensor descriptors: any GPU Triton supports (sm_80 and
newer, :data:`NEEDS`) and the CPU interpreter. Edges masked (any M, N, K; rows of W cut by a block anywhere).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from kernels.gpu_features import TRITON_FLOOR, Needs
from kernels.launch import cdiv, dot_block, input_precision
from kernels.qlora.nf4 import tables_on
from kernels.runtime import dot_upcast, interpreting

__all__ = ["NEEDS", "VERSIONS", "Config", "check_version", "choose_version", "nf4_matmul_lowrank"]

NEEDS = Needs("the NF4 GEMM (kernels.qlora.nf4_gemm)", capability=TRITON_FLOOR)
# how a K step turns bytes into values: "elements" (a byte and an absmax load per value, any K), "pairs" (each
# byte loaded once for its two values from offsets the compiler sees contiguous, one absmax per row of the
# tile where K allows; K even): named versions, timed side by side in benchmarks/bench_qlora.py
VERSIONS = ("pairs", "elements")
_INT32 = 2**31 - 1


@dataclass(frozen=True)
class Config:
    """A launch of the NF4 GEMM: output tiles ``block_m × block_n`` walked ``block_k`` deep, its warps and
    pipeline stages."""

    block_m: int
    block_n: int
    block_k: int
    num_warps: int = 4
    num_stages: int = 3


@triton.jit
def _lookup(code, index):
    # the NF4 values of 4-bit indices (any 2-D shape): tl.gather from the 16 codes held in registers, not a
    # load from memory per value (a gather from global memory is pipelined as one tiny async copy per value)
    flat = tl.reshape(index, [index.shape[0] * index.shape[1]])
    return tl.reshape(tl.gather(code, flat, 0), [index.shape[0], index.shape[1]])


@triton.jit
def _w_by_element(packed_ptr, absmax_ptr, code, inner, cols, INNER, COLS, K_W,
                  TRANSPOSED: tl.constexpr, BLOCKSIZE: tl.constexpr):  # fmt: skip
    # the [BLOCK_K, BLOCK_N] tile of op(W), fp32, one byte load and one absmax load per element
    if TRANSPOSED:  # op(W)[inner, col] = W[col, inner]: its flat index in W
        flat = cols[None, :] * K_W + inner[:, None]
    else:  # op(W)[inner, col] = W[inner, col]
        flat = inner[:, None] * K_W + cols[None, :]
    in_w = (inner[:, None] < INNER) & (cols[None, :] < COLS)
    byte = tl.load(packed_ptr + flat // 2, mask=in_w, other=0).to(tl.int32)
    scale = tl.load(absmax_ptr + flat // BLOCKSIZE, mask=in_w, other=0.0)
    return _lookup(code, tl.where(flat % 2 == 0, byte >> 4, byte & 0xF)) * scale  # 0 outside W: scale 0


@triton.jit
def _w_by_pairs(packed_ptr, absmax_ptr, code, rows, first0, N_ROWS, N_FIRSTS, K_W, ROW_SCALE: tl.constexpr,
                BLOCKSIZE: tl.constexpr, PAIRS_PER_ROW: tl.constexpr):  # fmt: skip
    # a tile of W as stored, [len(rows), 2·PAIRS_PER_ROW], fp32: of row n the values from first0 on. An even K
    # puts a byte's two values side by side in one row and one block: each byte is loaded once, its offset
    # written without a division of the tile (the compiler then sees a row's bytes contiguous and copies them
    # ahead asynchronously), both nibbles looked up and scaled, then put side by side (tl.interleave)
    pairs = tl.arange(0, PAIRS_PER_ROW)
    ok = (rows[:, None] < N_ROWS) & ((first0 + 2 * pairs)[None, :] < N_FIRSTS)
    byte = tl.load(packed_ptr + rows[:, None] * (K_W // 2) + (first0 // 2 + pairs)[None, :], mask=ok, other=0)
    byte = byte.to(tl.int32)
    if ROW_SCALE:  # K a multiple of the block and the tile's row inside one block: one absmax per row
        scale = tl.load(
            absmax_ptr + rows * (K_W // BLOCKSIZE) + first0 // BLOCKSIZE, mask=rows < N_ROWS, other=0.0
        )
        scale = scale[:, None]
    else:
        flat = rows[:, None] * K_W + (first0 + 2 * pairs)[None, :]
        scale = tl.load(absmax_ptr + flat // BLOCKSIZE, mask=ok, other=0.0)
    return tl.interleave(_lookup(code, byte >> 4) * scale, _lookup(code, byte & 0xF) * scale)


@triton.jit
def _nf4_gemm_kernel(
    a_ptr, packed_ptr, absmax_ptr, code_ptr, t_ptr, r_ptr, c_ptr,
    M, COLS, INNER, K_W, RANK,
    stride_am, stride_ai, stride_tm, stride_tr, stride_rr, stride_rc, stride_cm, stride_cc,
    TRANSPOSED: tl.constexpr, PAIRS: tl.constexpr, ROW_SCALE: tl.constexpr, WIDE: tl.constexpr,
    BLOCKSIZE: tl.constexpr, BLOCK_R: tl.constexpr, DOT_UPCAST: tl.constexpr, INPUT_PRECISION: tl.constexpr,
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
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    if WIDE:  # offsets past 2³¹ elements: 64-bit index arithmetic
        rows, cols, ks = rows.to(tl.int64), cols.to(tl.int64), ks.to(tl.int64)
    code = tl.load(code_ptr + tl.arange(0, 16))  # the 16 NF4 values, in registers for the whole loop
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k0 in range(0, INNER, BLOCK_K):
        inner = k0 + ks
        a = tl.load(
            a_ptr + rows[:, None] * stride_am + inner[None, :] * stride_ai,
            mask=(rows[:, None] < M) & (inner[None, :] < INNER),
            other=0.0,
        )
        if not PAIRS:
            w = _w_by_element(
                packed_ptr, absmax_ptr, code, inner, cols, INNER, COLS, K_W, TRANSPOSED, BLOCKSIZE
            )
        elif TRANSPOSED:  # W's [BLOCK_N, BLOCK_K] tile, pairs along K; op(W)'s tile is its transpose
            w = tl.trans(_w_by_pairs(packed_ptr, absmax_ptr, code, cols, k0, COLS, INNER, K_W, ROW_SCALE,
                                     BLOCKSIZE, BLOCK_K // 2))  # fmt: skip
        else:  # W's [BLOCK_K, BLOCK_N] tile, pairs along the output's columns
            w = _w_by_pairs(packed_ptr, absmax_ptr, code, inner, pid_n * BLOCK_N, INNER, COLS, K_W, ROW_SCALE,
                            BLOCKSIZE, BLOCK_N // 2)  # fmt: skip
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


def _reach(x: torch.Tensor) -> int:
    """One past the largest element offset of ``x`` from its first element."""
    return 1 + sum((size - 1) * stride for size, stride in zip(x.shape, x.stride(), strict=True))


def default_config(M: int, transposed: bool, dtype: torch.dtype) -> Config:
    """The launch :func:`nf4_matmul_lowrank` takes when given none: small tiles under the interpreter; on a
    GPU the fastest of a sweep on an H200 at K = N = 4096, bf16 (the forward 256 × 128 from 4,096 rows,
    128 × 64 below; the backward's dX 128 × 64, whose 64 columns of W lie in one block of absmaxes), walked
    64 deep (32 for fp32, whose tiles take twice the registers)."""
    if interpreting():
        return Config(min(32, dot_block(M)), 32, 32, 4, 1)
    deep = 64 if dtype != torch.float32 else 32
    if transposed and M >= 4096 and dtype != torch.float32:
        return Config(256, 128, deep, 8, 3)
    return Config(min(128, dot_block(M)), 64, deep, 4, 3)


def nf4_matmul_lowrank(
    a: torch.Tensor,
    packed: torch.Tensor,
    absmax: torch.Tensor,
    weight_shape: tuple[int, int],
    blocksize: int,
    transposed: bool,
    t: torch.Tensor,
    r: torch.Tensor,
    out: torch.Tensor | None = None,
    version: str | None = None,
    config: Config | None = None,
) -> torch.Tensor:
    """``a · op(W) + t · r`` with W ``weight_shape`` = (N, K) in NF4 (``packed`` uint8, ``absmax`` fp32 per
    block): ``op(W) = Wᵀ`` if ``transposed`` (a ``[M, K]`` → ``[M, N]``) else W (a ``[M, N]`` → ``[M, K]``);
    t ``[M, r]``, r ``[r, columns]``; written into ``out`` if given (a contiguous ``[M, columns]`` of a's
    dtype). ``version``: one of :data:`VERSIONS`, or None for :func:`choose_version`'s; ``config``:
    :func:`default_config`'s if None. Arguments are checked by the caller (:mod:`kernels.qlora.linear`);
    this launches."""
    n, k = weight_shape
    version = version or choose_version(k)
    M, inner = a.shape
    cols = n if transposed else k
    out = torch.empty((M, cols), device=a.device, dtype=a.dtype) if out is None else out
    if M == 0 or cols == 0:
        return out
    c = config or default_config(M, transposed, a.dtype)
    span = c.block_k if transposed else c.block_n  # a tile's values in one row of W
    _nf4_gemm_kernel[(cdiv(M, c.block_m) * cdiv(cols, c.block_n),)](
        a, packed, absmax, tables_on(a.device)[0], t, r, out, M, cols, inner, k, t.shape[1],
        *a.stride(), *t.stride(), *r.stride(), *out.stride(),
        TRANSPOSED=transposed, PAIRS=version == "pairs",
        ROW_SCALE=version == "pairs" and k % blocksize == 0 and blocksize % span == 0,
        WIDE=max(_reach(a), _reach(out), n * k) > _INT32, BLOCKSIZE=blocksize,
        BLOCK_R=max(16, dot_block(t.shape[1])),
        DOT_UPCAST=dot_upcast(a.dtype), INPUT_PRECISION=input_precision(a.dtype),
        BLOCK_M=c.block_m, BLOCK_N=c.block_n, BLOCK_K=c.block_k, GROUP_M=8,
        num_warps=c.num_warps, num_stages=c.num_stages,
    )  # fmt: skip
    return out
