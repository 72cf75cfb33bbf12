"""Many LoRA adapters in one batch (Punica/S-LoRA's SGMV): ``y[t] += s[id] · x[t] A[id]ᵀ B[id]ᵀ`` in place.

Notation: x [T, K] tokens, y [T, N] the base layer's output, L stacked adapters ``A`` [L, r, K] and ``B``
[L, N, r], ``id(t)`` in ``[0, L)`` or −1 (no adapter: the row of y is not touched), ``s`` a float or one
scale per adapter [L]. *Slices* (Q, K, V; gate, up): sequences of stacks ``A_s`` [L, r, K], ``B_s``
[L, N_s, r], one rank r for all; slice s writes columns ``off_s : off_s + N_s`` of y, ``Σ N_s = N``.

**The work.** Two skinny products per token, the *shrink* ``t = x[t] A_sᵀ`` ([r], a reduction over K) and
the *expand* ``y[t, cols_s] += s · t B_sᵀ``. FLOPs 2·T·r·(K + N): nothing for the tensor cores. Bytes that
must move (element size e): x once (T·K·e), y read and written (2·T·N·e), the A and B of each adapter
that has tokens once (r·(S·K + N)·e each). At T = 4096, K = N = 4096, r = 16, 8 adapters, bf16: 32 + 64
+ 2 MiB = 98 MiB (103 MB) ≈ 34 µs at 3 TB/s; at T = 16 the weights dominate (2 MB, < 1 µs), so a decode call
is bound by launches and host time, not bytes. A per-adapter loop pays L host syncs and ~6·L kernels
(``==``, ``nonzero``, the gather of x's rows, two matmuls, ``index_add_``);
gather + bmm writes T copies of the weights (T·r·(K + N)·e: 67 MB at T = 256) and reads them back.

**Grouping** (:mod:`kernels.multi_lora.metadata`): the tokens sorted by adapter, ``counts`` per adapter. A
program here owns one *tile*, a block of ``BLOCK_M`` consecutive tokens of one adapter. The tiles of all
adapters are numbered in order; program p finds its adapter and row block from ``counts`` in-kernel (a
prefix sum over ``L`` counts: ``tiles_l = ⌈counts_l / BLOCK_M⌉``; the adapter is the number of prefix ends
≤ p). The grid is fixed, ``⌈T / BLOCK_M⌉ + min(L, T)`` tile slots (Σ_l ⌈c_l / BLOCK_M⌉ never exceeds it), so
it depends on shapes only (CUDA graphs) and only slots past the last real tile exit early, instead of the
L · ⌈T / BLOCK_M⌉ mostly-empty programs of a grid over (adapter, row block). −1 tokens are in no tile.

**Two paths** (``path=``; a third for decode sizes, ``"one_launch"``, is described at the end of the file):

- ``"fused"`` (one kernel, :func:`_fused_kernel`): a program computes ``t = x[rows] A_lᵀ`` (fp32 ``[BLOCK_M,
  r]`` tile, on chip) over all of K, scales it, rounds it to the input dtype, then adds ``t B_lᵀ`` to its
  output tiles: every ``split``-th ``BLOCK_N`` columns of its slice (split-N: ``split`` programs share a
  tile so a small batch still fills the GPU; each recomputes t, re-reading x rows and A_l, mostly from
  L2). No atomics, no buffer, one launch; but each program's shrink is a serial loop over all of K, so
  the kernel is bound by that loop's latency: on the H100 it measured slower than the split path at every
  benchmarked shape in device time (``benchmarks/results/multi_lora/``; its host time per call is the lower
  one, so in a loop without CUDA graphs it can be the faster call), and is kept as the one-kernel alternative.
- ``"split"`` (shrink, then expand): the shrink splits K into ``split`` chunks (split-K, whole ``BLOCK_K``
  steps each, :func:`shrink_split`: at T = 16, K = 4096, 8 adapters, 8 tiles × 16 chunks of 256 columns,
  about one program per SM of an H100) and writes fp32 partial sums ``part[k, s, pos, :]`` of ``x Aᵀ`` by
  sorted position; the expand sums the chunks in a fixed order (k = 0, 1, …), scales, rounds and adds
  ``t B_sᵀ`` to ``[BLOCK_M, BLOCK_N]`` tiles of y. **The default** (``path=None``): two launches, but the
  K loop is spread over programs instead of run by each.

**Determinism.** Both paths are deterministic by default (``deterministic=True``): fixed-order sums, no
atomics, so y is bitwise the same run to run. ``deterministic=False`` lets the split path's shrink
``atomic_add`` its chunks into one zeroed fp32 buffer (vLLM's split-K), which saves the expand from
reading ``split`` partials but makes the sum's order, and so the low bits of y, vary between runs (what made
vLLM's greedy outputs non-reproducible). ``benchmarks/bench_multi_lora.py`` times both.

**Configs** (:class:`kernels.configs.BranchConfig` reused: block_m, block_n, block_k, split = split-N for
the fused kernel or split-K for the shrink, warps, stages): a rule per kernel (:func:`multi_lora_rule`) or a
tuned entry of the persistent cache under :func:`kernels.configs.tuning_key` (token bucket, K, slice widths,
r, L, dtype, device), resolved once per call shape: the plan (grid, constexprs, config) is cached, so a
call costs one dictionary lookup, never an autotuner's dispatch. Launches go through
:class:`kernels.fast_launch.CachedLauncher`.

**Graph capture.** The grid and every launch argument depend on shapes and addresses only; the slice
table (pointers and strides of the stacks, one int64 row per slice) is built on the first call for given
stacks and cached: make that first call before capturing, as any warm-up. Ids out of range: see
:mod:`kernels.multi_lora.metadata` (rows left untouched; an error under the debug flag or on CPU).
"""

from __future__ import annotations

import functools
import numbers
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from kernels.configs import BranchConfig, resolve, tuning_key
from kernels.fast_launch import CachedLauncher
from kernels.gpu_features import TRITON_FLOOR, Needs, unmet
from kernels.launch import (
    cdiv,
    check_device,
    check_dtype,
    check_int32_offsets,
    check_output,
    check_tensor,
    dot_block,
    input_precision,
    int32_offsets,
    sm_count,
)
from kernels.library import custom_op, decode_config, encode_config
from kernels.multi_lora.metadata import MultiLoRAMeta, build_meta
from kernels.runtime import dot_upcast, interpreting

__all__ = ["DEFAULT_PATH", "MAX_RANK", "MultiLoRAPlan", "add_multi_lora", "multi_lora_rule", "plan"]

MAX_RANK = 128  # the fp32 [BLOCK_M, r] tile of t lives in registers
# "split": faster than "fused" in device time at every shape bench_multi_lora measured on the H100
DEFAULT_PATH = "split"
_TBL = 10  # slice-table columns: a_ptr, b_ptr, column offset, width, A strides (l, r, k), B strides (l, n, r)
FN = "add_multi_lora"
# What both paths need of a GPU (kernels.gpu_features): pointer loads, tl.dot and (split-K, when not
# deterministic) atomic adds, so Triton's floor, sm_80. No program waits on another. The rule's largest
# tiles (the fused kernel's 3 stages of [64, 64] x and [16, 64] A tiles plus [16, 128] B tiles, or the
# shrink's 4 stages of [32, 128] x and [16, 128] A tiles, 16-bit) ask under 64 KB; every sm_80+ GPU has 99.
NEEDS = Needs("add_multi_lora's Triton kernels", TRITON_FLOOR, 64 * 1024)


@triton.jit
def _find_tile(tile, counts_ptr, L, BLOCK_M: tl.constexpr, BLOCK_L: tl.constexpr):
    # (adapter, row block within it, its first sorted position, its token count) of tile number `tile`;
    # adapter ≥ L (BLOCK_L) when the tile is past the last one. Tiles are numbered in ascending id order.
    ls = tl.arange(0, BLOCK_L)
    cnt = tl.load(counts_ptr + ls, mask=ls < L, other=0)
    tiles = (cnt + (BLOCK_M - 1)) // BLOCK_M
    ends = tl.cumsum(tiles, 0)
    lora = tl.sum((ends <= tile).to(tl.int32), 0)
    before = ls < lora
    first = tl.sum(tl.where(before, tiles, 0), 0)
    start = tl.sum(tl.where(before, cnt, 0), 0)
    count = tl.sum(tl.where(ls == lora, cnt, 0), 0)
    return lora, tile - first, start, count


@triton.jit
def _slice(s, a_ptr, b_ptr, tbl_ptr, N, sa_l, sa_r, sa_k, sb_l, sb_n, sb_r, SLICED: tl.constexpr):
    # Slice s's stacks, first output column, width and outer strides: from the table when there are
    # several (SLICED = 1, or 2 when every pointer, offset and outer stride is a multiple of 16 bytes: the
    # host checked, and tl.multiple_of tells the compiler, which cannot know it of loaded values, so loads
    # stay 16 bytes wide). The inner strides (sa_k, sb_r) are the same for every slice (checked on the host)
    # and stay arguments, so Triton specializes them (= 1: contiguous).
    n_off = 0
    if SLICED > 0:
        row = tbl_ptr + s * 10
        a_ptr = tl.load(row).to(tl.pointer_type(a_ptr.dtype.element_ty))
        b_ptr = tl.load(row + 1).to(tl.pointer_type(b_ptr.dtype.element_ty))
        n_off = tl.load(row + 2)
        N = tl.load(row + 3)
        sa_l, sa_r = tl.load(row + 4), tl.load(row + 5)
        sb_l, sb_n = tl.load(row + 7), tl.load(row + 8)
        if SLICED == 2:
            a_ptr = tl.multiple_of(a_ptr, 16)
            b_ptr = tl.multiple_of(b_ptr, 16)
            n_off = tl.multiple_of(n_off, 8)
            sa_l, sa_r = tl.multiple_of(sa_l, 8), tl.multiple_of(sa_r, 8)
            sb_l, sb_n = tl.multiple_of(sb_l, 8), tl.multiple_of(sb_n, 8)
    return a_ptr, b_ptr, n_off, N, sa_l, sa_r, sa_k, sb_l, sb_n, sb_r


@triton.jit
def _shrink_tile(
    x_ptr, a_ptr, tok, row_mask, k_lo, k_hi, R, stride_xm, stride_xk, sa_r, sa_k,
    DOT_UPCAST: tl.constexpr, INPUT_PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_R: tl.constexpr,
):  # fmt: skip
    # Σ_{k in [k_lo, k_hi)} x[tok, k] · A[:, k]ᵀ → fp32 [BLOCK_M, BLOCK_R] (A already at its adapter).
    rs = tl.arange(0, BLOCK_R)
    acc = tl.zeros([BLOCK_M, BLOCK_R], dtype=tl.float32)
    for k0 in range(k_lo, k_hi, BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        k_mask = ks < k_hi
        xt = tl.load(
            x_ptr + tok[:, None] * stride_xm + ks[None, :] * stride_xk,
            mask=row_mask[:, None] & k_mask[None, :],
            other=0.0,
        )
        at = tl.load(
            a_ptr + ks[:, None] * sa_k + rs[None, :] * sa_r,
            mask=k_mask[:, None] & (rs < R)[None, :],
            other=0.0,
        )
        if DOT_UPCAST:  # interpreter + bf16: tl.dot is wrong there (see kernels.runtime)
            xt = xt.to(tl.float32)
            at = at.to(tl.float32)
        acc = tl.dot(xt, at, acc, input_precision=INPUT_PRECISION)
    return acc


@triton.jit
def _expand_tile(
    y_ptr, b_ptr, ts, tok, row_mask, n0, n_off, N, R, stride_ym, stride_yn, sb_n, sb_r,
    DOT_UPCAST: tl.constexpr, INPUT_PRECISION: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_R: tl.constexpr,
):  # fmt: skip
    # y[tok, n_off + n0 : … + BLOCK_N] += ts · B[n-tile, :]ᵀ (fp32 sum, one rounding to y's dtype).
    rs = tl.arange(0, BLOCK_R)
    ns = n0 + tl.arange(0, BLOCK_N)
    n_mask = ns < N
    bt = tl.load(
        b_ptr + rs[:, None] * sb_r + ns[None, :] * sb_n, mask=(rs < R)[:, None] & n_mask[None, :], other=0.0
    )
    if DOT_UPCAST:
        bt = bt.to(tl.float32)
    mask = row_mask[:, None] & n_mask[None, :]
    y_ptrs = y_ptr + tok[:, None] * stride_ym + (n_off + ns)[None, :] * stride_yn
    acc = tl.load(y_ptrs, mask=mask, other=0.0).to(tl.float32)
    acc = tl.dot(ts, bt, acc, input_precision=INPUT_PRECISION)
    tl.store(y_ptrs, acc.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _rows(split_count, counts_ptr, sorted_ptr, L, BLOCK_M: tl.constexpr, BLOCK_L: tl.constexpr):
    # The tile's adapter, its rows (sorted positions, token ids, mask) and the program's split index.
    pid = tl.program_id(0)
    lora, block, start, count = _find_tile(pid // split_count, counts_ptr, L, BLOCK_M, BLOCK_L)
    rows = block * BLOCK_M + tl.arange(0, BLOCK_M)
    row_mask = rows < count
    pos = start + rows
    tok = tl.load(sorted_ptr + pos, mask=row_mask, other=0).to(tl.int64)
    return lora, pid % split_count, pos, tok, row_mask


@triton.jit
def _fused_kernel(
    x_ptr, y_ptr, a_ptr, b_ptr, tbl_ptr, scale_ptr, counts_ptr, sorted_ptr, L, K, N, R, SPLIT, scale,
    stride_xm, stride_xk, stride_ym, stride_yn, sa_l, sa_r, sa_k, sb_l, sb_n, sb_r,
    SLICED: tl.constexpr, SCALE_TENSOR: tl.constexpr, DOT_UPCAST: tl.constexpr, INPUT_PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_R: tl.constexpr,
    BLOCK_L: tl.constexpr,
):  # fmt: skip
    lora, split, pos, tok, row_mask = _rows(SPLIT, counts_ptr, sorted_ptr, L, BLOCK_M, BLOCK_L)
    if lora >= L:  # a tile slot past the last tile
        return
    a_ptr, b_ptr, n_off, N, sa_l, sa_r, sa_k, sb_l, sb_n, sb_r = _slice(
        tl.program_id(1), a_ptr, b_ptr, tbl_ptr, N, sa_l, sa_r, sa_k, sb_l, sb_n, sb_r, SLICED
    )
    if split * BLOCK_N >= N:  # a slice narrower than the split
        return
    lora64 = lora.to(tl.int64)
    t = _shrink_tile(
        x_ptr, a_ptr + lora64 * sa_l, tok, row_mask, 0, K, R, stride_xm, stride_xk, sa_r, sa_k,
        DOT_UPCAST, INPUT_PRECISION, BLOCK_M, BLOCK_K, BLOCK_R,
    )  # fmt: skip
    sc = tl.load(scale_ptr + lora).to(tl.float32) if SCALE_TENSOR else scale
    ts = (t * sc).to(y_ptr.dtype.element_ty)  # s·t rounded once to the input dtype, as torch would store it
    if DOT_UPCAST:
        ts = ts.to(tl.float32)
    for n0 in range(split * BLOCK_N, N, SPLIT * BLOCK_N):
        _expand_tile(
            y_ptr, b_ptr + lora64 * sb_l, ts, tok, row_mask, n0, n_off, N, R, stride_ym, stride_yn,
            sb_n, sb_r, DOT_UPCAST, INPUT_PRECISION, BLOCK_N, BLOCK_R,
        )  # fmt: skip


@triton.jit
def _shrink_kernel(
    x_ptr, a_ptr, b_ptr, tbl_ptr, part_ptr, counts_ptr, sorted_ptr, L, K, N, R, SPLIT, K_PER_SPLIT,
    stride_xm, stride_xk, sa_l, sa_r, sa_k, sb_l, sb_n, sb_r, stride_pk, stride_ps, stride_pm,
    SLICED: tl.constexpr, ATOMIC: tl.constexpr, DOT_UPCAST: tl.constexpr, INPUT_PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_L: tl.constexpr,
):  # fmt: skip
    lora, split, pos, tok, row_mask = _rows(SPLIT, counts_ptr, sorted_ptr, L, BLOCK_M, BLOCK_L)
    if lora >= L:
        return
    s = tl.program_id(1)
    a_ptr, b_ptr, n_off, N, sa_l, sa_r, sa_k, sb_l, sb_n, sb_r = _slice(
        s, a_ptr, b_ptr, tbl_ptr, N, sa_l, sa_r, sa_k, sb_l, sb_n, sb_r, SLICED
    )
    k_lo = split * K_PER_SPLIT
    t = _shrink_tile(
        x_ptr, a_ptr + lora.to(tl.int64) * sa_l, tok, row_mask, k_lo, tl.minimum(k_lo + K_PER_SPLIT, K), R,
        stride_xm, stride_xk, sa_r, sa_k, DOT_UPCAST, INPUT_PRECISION, BLOCK_M, BLOCK_K, BLOCK_R,
    )  # fmt: skip
    rs = tl.arange(0, BLOCK_R)
    ptrs = part_ptr + split * stride_pk + s * stride_ps + pos[:, None] * stride_pm + rs[None, :]
    mask = row_mask[:, None] & (rs < R)[None, :]
    if ATOMIC:  # one shared buffer (stride_pk = 0): the order of the adds varies run to run
        tl.atomic_add(ptrs, t, mask=mask, sem="relaxed")
    else:  # chunk `split`'s own partial: the expand sums them in a fixed order
        tl.store(ptrs, t, mask=mask)


@triton.jit
def _expand_kernel(
    y_ptr, a_ptr, b_ptr, tbl_ptr, part_ptr, scale_ptr, counts_ptr, sorted_ptr, L, N, R, N_TILES, SPLIT_K,
    scale, stride_ym, stride_yn, sa_l, sa_r, sa_k, sb_l, sb_n, sb_r, stride_pk, stride_ps, stride_pm,
    SLICED: tl.constexpr, SCALE_TENSOR: tl.constexpr, DOT_UPCAST: tl.constexpr, INPUT_PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_L: tl.constexpr,
):  # fmt: skip
    lora, pid_n, pos, tok, row_mask = _rows(N_TILES, counts_ptr, sorted_ptr, L, BLOCK_M, BLOCK_L)
    if lora >= L:
        return
    s = tl.program_id(1)
    a_ptr, b_ptr, n_off, N, sa_l, sa_r, sa_k, sb_l, sb_n, sb_r = _slice(
        s, a_ptr, b_ptr, tbl_ptr, N, sa_l, sa_r, sa_k, sb_l, sb_n, sb_r, SLICED
    )
    if pid_n * BLOCK_N >= N:  # past this slice's width
        return
    rs = tl.arange(0, BLOCK_R)
    ptrs = part_ptr + s * stride_ps + pos[:, None] * stride_pm + rs[None, :]
    mask = row_mask[:, None] & (rs < R)[None, :]
    t = tl.zeros([BLOCK_M, BLOCK_R], dtype=tl.float32)
    for k in range(0, SPLIT_K):  # fixed order: bitwise reproducible
        t += tl.load(ptrs + k * stride_pk, mask=mask, other=0.0)
    sc = tl.load(scale_ptr + lora).to(tl.float32) if SCALE_TENSOR else scale
    ts = (t * sc).to(y_ptr.dtype.element_ty)
    if DOT_UPCAST:
        ts = ts.to(tl.float32)
    _expand_tile(
        y_ptr, b_ptr + lora.to(tl.int64) * sb_l, ts, tok, row_mask, pid_n * BLOCK_N, n_off, N, R,
        stride_ym, stride_yn, sb_n, sb_r, DOT_UPCAST, INPUT_PRECISION, BLOCK_N, BLOCK_R,
    )  # fmt: skip


def _block_r(R: int) -> int:
    return dot_block(R)  # tl.dot needs ≥ 16 on each side


def multi_lora_rule(
    kernel: str, T: int, K: int, N: int, R: int, S: int, L: int, num_sms: int
) -> BranchConfig:
    """The rule config of ``kernel`` (``"fused"``, ``"shrink"`` or ``"expand"``) for T tokens, hidden K,
    widest slice N, rank R, S slices, L adapters.

    Fused: ``block_m`` from the expected tokens per adapter (T / min(L, T): 16 at decode sizes, where a tile
    holds an adapter's handful of tokens, up to 64); then split-N (≤ the N-tiles of a slice) so that there are
    about two programs per SM (tiles expected with evenly spread tokens × slices × split). Shrink and expand:
    the configs a sweep on the H100 found fastest (see the comment in the code), split-K (≤ the K-steps) for
    about one shrink program per SM. ``block_n`` of the shrink and ``block_k`` of the
    expand are the padded rank (their unused field). Interpreter: tiles no larger than the problem, no
    split (the interpreter runs programs one after another; tests force splits through ``configs=``).
    """
    block_r = _block_r(R)
    lanes = max(1, min(L, T))
    per = cdiv(max(T, 1), lanes)
    if interpreting():
        bm, bn, bk = (
            min(32, dot_block(per)),
            min(64, dot_block(N)),
            min(64, dot_block(K)),
        )
        return BranchConfig(
            bm, block_r if kernel == "shrink" else bn, block_r if kernel == "expand" else bk, 1, 4, 1
        )
    if kernel == "fused":
        bm = 16 if per <= 16 else 32 if per <= 32 else 64
        bk, bn = (128 if bm <= 32 and block_r <= 32 else 64), 128
        want = max(1, cdiv(2 * num_sms, lanes * cdiv(per, bm) * S))
        return BranchConfig(bm, bn, bk, min(cdiv(N, bn), want), 8 if bm * bn >= 8192 else 4, 3)
    # The split path, from a config sweep at the goals' shapes on the H100 (T = 16 … 4096, r = 16): 32-token
    # tiles, about one shrink program per SM, an expand of one stage and 8 warps, 256 columns at decode sizes.
    bm = 32
    tiles = lanes * cdiv(per, bm) * S
    if kernel == "shrink":
        bk = 128 if block_r <= 32 else 64
        return BranchConfig(
            bm, block_r, bk, min(cdiv(K, bk), max(1, cdiv(num_sms, tiles))), 4, 4 if bk == 128 else 3
        )
    return BranchConfig(bm, 256 if per <= 16 and block_r <= 32 else 128, block_r, 1, 8, 1)


@dataclass(frozen=True)
class MultiLoRAPlan:
    """What one call shape runs: ``path`` (one of ``PATHS``) and its kernels' configs."""

    path: str
    fused: BranchConfig | None = None
    shrink: BranchConfig | None = None
    expand: BranchConfig | None = None
    one_launch: BranchConfig | None = None


def plan(
    T: int,
    K: int,
    widths: tuple[int, ...],
    R: int,
    L: int,
    dtype: torch.dtype,
    device: torch.device,
    path: str | None = None,
    configs: dict[str, BranchConfig] | None = None,
) -> MultiLoRAPlan:
    """The path (``None``: :data:`DEFAULT_PATH`) and configs for a call shape: tuned entries
    of the persistent cache where there are some, else :func:`multi_lora_rule`; ``configs`` (by kernel name)
    override the set fields."""
    if path is None:
        path = DEFAULT_PATH
    if path not in PATHS:
        raise ValueError(f"{FN}: path={path!r} must be 'fused', 'split', 'one_launch' or None")
    problem = unmet(NEEDS, device)
    if problem is not None:
        raise RuntimeError(f"{FN}: {problem}; kernels.reference.multi_lora computes the same in torch")
    sms, N = sm_count(device), max(widths)
    kernels_ = ("shrink", "expand") if path == "split" else (path,)
    rule = one_launch_rule if path == "one_launch" else multi_lora_rule
    out = {}
    for kernel in kernels_:
        key = tuning_key(f"multi_lora_{kernel}", T, (K, *widths, R, L), dtype, device)
        config = resolve(key, lambda kernel=kernel: rule(kernel, T, K, N, R, len(widths), L, sms))
        override = (configs or {}).get(kernel)
        out[kernel] = config if override is None else override.filled(config)
    return MultiLoRAPlan(path, **out)


def shrink_split(p: MultiLoRAPlan, K: int) -> tuple[int, int]:
    """(chunks, columns per chunk) of K that the split path's shrink launches for plan ``p``. The config's
    ``split`` is a request (at most the ``BLOCK_K`` steps of K), rounded so that every chunk is whole
    ``BLOCK_K`` steps and none is empty: ``k_per = ⌈⌈K / split⌉ / BLOCK_K⌉ · BLOCK_K``, ``⌈K / k_per⌉``
    chunks (17 asked of K = 4096 in steps of 128: 16 chunks of 256)."""
    if p.path != "split":
        raise ValueError(f"{FN}: shrink_split needs a 'split' plan, got path={p.path!r}")
    return _k_chunks(K, p.shrink)


@dataclass(frozen=True)
class _Launch:
    grid: tuple
    constexprs: tuple
    warps: int
    stages: int
    split: int
    extra: int  # fused: unused; shrink, one_launch: K per split; expand: N-tiles
    groups: int = 0  # one_launch: the column groups (BLOCK_N wide) of a tile, each expanded by its last chunk


def _launches(p: MultiLoRAPlan, T, K, widths, R, L, dtype, sliced, scale_tensor, deterministic) -> tuple:
    """Grids and constexprs of the plan's kernels (computed once per call shape)."""
    S, N = len(widths), max(widths)
    common = (("SLICED", sliced),)
    prec = (("DOT_UPCAST", dot_upcast(dtype)), ("INPUT_PRECISION", input_precision(dtype)))
    block_r, block_l = _block_r(R), dot_block(L)

    def slots(c):
        return cdiv(T, c.block_m) + min(L, T)

    if p.path == "one_launch":
        c = p.one_launch
        return (_one_launch(c, slots(c), K, N, common, prec, scale_tensor, block_r, block_l),)
    if p.path == "fused":
        c = p.fused
        split = min(c.split, cdiv(N, c.block_n))
        ce = (*common, ("SCALE_TENSOR", scale_tensor), *prec, ("BLOCK_M", c.block_m), ("BLOCK_N", c.block_n),
              ("BLOCK_K", c.block_k), ("BLOCK_R", block_r), ("BLOCK_L", block_l))  # fmt: skip
        return (_Launch((slots(c) * split, S), ce, c.num_warps, c.num_stages, split, 0),)
    cs, cx = p.shrink, p.expand
    split_k, k_per = shrink_split(p, K)  # no empty chunk
    atomic = not deterministic and split_k > 1
    ce_s = (*common, ("ATOMIC", atomic), *prec, ("BLOCK_M", cs.block_m), ("BLOCK_K", cs.block_k),
            ("BLOCK_R", block_r), ("BLOCK_L", block_l))  # fmt: skip
    n_tiles = cdiv(N, cx.block_n)
    ce_x = (*common, ("SCALE_TENSOR", scale_tensor), *prec, ("BLOCK_M", cx.block_m), ("BLOCK_N", cx.block_n),
            ("BLOCK_R", block_r), ("BLOCK_L", block_l))  # fmt: skip
    return (
        _Launch((slots(cs) * split_k, S), ce_s, cs.num_warps, cs.num_stages, split_k, k_per),
        _Launch(
            (slots(cx) * n_tiles, S), ce_x, cx.num_warps, cx.num_stages, 1 if atomic else split_k, n_tiles
        ),
    )


@functools.lru_cache(maxsize=1024)
def _cached(T, K, widths, R, L, dtype, device, path, sliced, scale_tensor, deterministic):
    p = plan(T, K, widths, R, L, dtype, device, path)
    return _launches(p, T, K, widths, R, L, dtype, sliced, scale_tensor, deterministic)


def forget_plans() -> None:
    """Drop the cached plans (after tuning in this process; tests)."""
    _cached.cache_clear()


_TABLES: dict[tuple, tuple[torch.Tensor, int]] = {}


def _slice_table(slices, device) -> tuple[torch.Tensor, int]:
    """One int64 row per slice (pointers, column offset, width, strides) and the SLICED constexpr (2 when
    all of them are 16-byte multiples, else 1), cached by exactly those values: a hit costs no copy to the
    device (so calls after the first are graph-capturable)."""
    key = (device, *((a.data_ptr(), b.data_ptr(), b.shape[1], *a.stride(), *b.stride()) for a, b in slices))
    hit = _TABLES.get(key)
    if hit is None:
        rows, off, e = [], 0, slices[0][0].element_size()
        for a, b in slices:
            rows.append([a.data_ptr(), b.data_ptr(), off, b.shape[1], *a.stride(), *b.stride()])
            off += b.shape[1]
        aligned = all(
            row[0] % 16 == 0
            and row[1] % 16 == 0
            and all(v * e % 16 == 0 for v in (row[2], *row[4:6], *row[7:9]))
            for row in rows
        )
        if len(_TABLES) >= 256:
            _TABLES.clear()
        hit = _TABLES[key] = (torch.tensor(rows, dtype=torch.int64).to(device), 2 if aligned else 1)
    return hit


_launch_fused = CachedLauncher(_fused_kernel)
_launch_shrink = CachedLauncher(_shrink_kernel)
_launch_expand = CachedLauncher(_expand_kernel)


def _stacks(lora_a, lora_b) -> list[tuple[torch.Tensor, torch.Tensor]]:
    if isinstance(lora_a, torch.Tensor) and isinstance(lora_b, torch.Tensor):
        return [(lora_a, lora_b)]
    if isinstance(lora_a, torch.Tensor) or isinstance(lora_b, torch.Tensor):
        raise TypeError(f"{FN}: lora_a and lora_b must both be tensors or both be sequences of slices")
    if not isinstance(lora_a, Sequence) or not isinstance(lora_b, Sequence) or len(lora_a) != len(lora_b):
        raise ValueError(
            f"{FN}: lora_a and lora_b must be sequences of the same length (one stack per slice)"
        )
    if not lora_a:
        raise ValueError(f"{FN}: no slices")
    return list(zip(lora_a, lora_b, strict=True))


def _check(y, x, slices, adapter_ids, scale) -> tuple[int, int, tuple[int, ...], int, int]:
    """Shapes, dtypes and devices; returns (T, K, slice widths, r, L)."""
    for name, t in (("x", x), ("y", y)):
        check_tensor(FN, name, t)
        if t.dim() != 2:
            raise ValueError(f"{FN}: {name} must be a 2-D tensor, got {getattr(t, 'shape', type(t))}")
    T, K = x.shape
    check_device(FN, "y", y, x)
    check_dtype(FN, "x", x, x)
    check_dtype(FN, "y", y, x)
    if y.shape[0] != T:
        raise ValueError(f"{FN}: y has {y.shape[0]} rows but x has {T}")
    check_tensor(FN, "lora_a" if len(slices) == 1 else "lora_a[0]", slices[0][0])
    L, R = slices[0][0].shape[0], slices[0][0].shape[1] if slices[0][0].dim() == 3 else -1
    widths = []
    for i, (a, b) in enumerate(slices):
        sa, sb = ("lora_a", "lora_b") if len(slices) == 1 else (f"lora_a[{i}]", f"lora_b[{i}]")
        check_tensor(FN, sa, a)
        check_tensor(FN, sb, b)
        if a.dim() != 3 or b.dim() != 3:
            raise ValueError(
                f"{FN}: {sa} must be [L, r, K] and {sb} [L, N, r]; got {tuple(a.shape)}, {tuple(b.shape)}"
            )
        for name, t in ((sa, a), (sb, b)):
            check_device(FN, name, t, x)
            check_dtype(FN, name, t, x)
        if a.shape[2] != K:
            raise ValueError(f"{FN}: {sa} has K = {a.shape[2]} but x has K = {K}")
        if b.shape[2] != a.shape[1]:
            raise ValueError(
                f"{FN}: mismatched ranks: {sa} has r = {a.shape[1]} but {sb} has r = {b.shape[2]}"
            )
        if a.shape[0] != L or b.shape[0] != L:
            raise ValueError(f"{FN}: every stack must hold the same L = {L} adapters; {sa} / {sb} hold "
                             f"{a.shape[0]} / {b.shape[0]}")  # fmt: skip
        if a.stride(2) != slices[0][0].stride(2) or b.stride(2) != slices[0][1].stride(2):
            inner = (slices[0][0].stride(2), slices[0][1].stride(2))
            raise ValueError(
                f"{FN}: slices must share their innermost strides (e.g. all contiguous); "
                f"{sa} / {sb} have {(a.stride(2), b.stride(2))}, lora_a[0] / lora_b[0] {inner}"
            )
        if a.shape[1] != R:
            raise ValueError(
                f"{FN}: slices must share one rank; lora_a[0] has r = {R}, {sa} has {a.shape[1]}"
            )
        widths.append(b.shape[1])
    if not 1 <= R <= MAX_RANK:
        raise ValueError(
            f"{FN}: rank r = {R} is not supported (1 ≤ r ≤ {MAX_RANK}: the [rows, r] tile stays on chip)"
        )
    if sum(widths) != y.shape[1]:
        raise ValueError(
            f"{FN}: the slices' widths {widths} sum to {sum(widths)}, but y has {y.shape[1]} columns"
        )
    if not isinstance(adapter_ids, torch.Tensor) or adapter_ids.shape != (T,):
        raise ValueError(
            f"{FN}: adapter_ids must be a [T] = [{T}] tensor, got {getattr(adapter_ids, 'shape', None)}"
        )
    if adapter_ids.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"{FN}: adapter_ids has dtype {adapter_ids.dtype}; use int32 or int64")
    check_device(FN, "adapter_ids", adapter_ids, x)
    if isinstance(scale, torch.Tensor):
        if scale.shape != (L,) or not scale.is_floating_point():
            raise ValueError(f"{FN}: a scale tensor must be floating point of shape [L] = [{L}], got "
                             f"{scale.dtype} {tuple(scale.shape)}")  # fmt: skip
        check_device(FN, "scale", scale, x)
    elif not isinstance(scale, numbers.Real):
        raise TypeError(f"{FN}: scale must be a float or an [L] tensor, got {type(scale).__name__}")
    check_int32_offsets(FN, "y", y, (1,))  # columns are indexed in int32 (tokens in int64)
    return T, K, tuple(widths), R, L


def _check_written(y, x, slices, adapter_ids, scale) -> None:
    """Addresses (inside the op, where they exist also under torch.compile): y is written in place, so no
    two of its elements may share memory, and none with what the kernels read."""
    reads = {"x": x, "adapter_ids": adapter_ids, "scale": scale}
    for i, (a, b) in enumerate(slices):
        reads |= {f"lora_a[{i}]": a, f"lora_b[{i}]": b} if len(slices) > 1 else {"lora_a": a, "lora_b": b}
    check_output(FN, "y", y, reads)


def _encode_configs(configs: dict[str, BranchConfig] | None) -> str:
    """``{"shrink": BranchConfig(...), …}`` → ``"shrink=<encode_config>;…"`` (an op argument); ``""``."""
    return ";".join(f"{kernel}={encode_config(c)}" for kernel, c in (configs or {}).items())


@functools.lru_cache(maxsize=64)
def _decode_configs(text: str) -> dict[str, BranchConfig] | None:
    if not text:
        return None
    return {kernel: decode_config(c) for kernel, _, c in (part.partition("=") for part in text.split(";"))}


def add_multi_lora(
    y: torch.Tensor,
    x: torch.Tensor,
    lora_a,
    lora_b,
    adapter_ids: torch.Tensor,
    scale: float | torch.Tensor,
    *,
    meta: MultiLoRAMeta | None = None,
    deterministic: bool = True,
    path: str | None = None,
    configs: dict[str, BranchConfig] | None = None,
) -> torch.Tensor:
    """``y[t, cols_s] += scale[id(t)] · x[t] A_s[id(t)]ᵀ B_s[id(t)]ᵀ`` in place for each token with an
    adapter; returns y. Rows whose id is −1 are not touched (bitwise).

    x [T, K], y [T, N] (any strides; y, written in place, may share no memory with itself or with the
    inputs: a broadcast or overlapping y is refused); ``lora_a`` [L, r, K] and ``lora_b`` [L, N, r], or
    sequences of stacks (slices, one rank, widths summing to N); ``adapter_ids`` [T] int32/int64; ``scale``
    a float or [L] tensor. ``meta``: :func:`kernels.multi_lora.metadata.build_meta` of ``adapter_ids`` made
    once for all layers of a step (built here when None). ``deterministic``: no atomics (the default; see
    the module).
    ``path``: one of :data:`PATHS` or None (:data:`DEFAULT_PATH`); ``configs``: per-kernel config
    overrides (``{"fused" | "shrink" | "expand" | "one_launch": BranchConfig}``).
    """
    slices = _stacks(lora_a, lora_b)
    T, K, widths, R, L = _check(y, x, slices, adapter_ids, scale)
    # The kernels index K, r and N in int32 (tokens and adapters in int64): an input too large is copied.
    x = int32_offsets(x)
    if any(int32_offsets(t, (1, 2)) is not t for ab in slices for t in ab):  # all alike: one inner stride
        slices = [(a.contiguous(), b.contiguous()) for a, b in slices]
    if isinstance(scale, torch.Tensor):
        scale = scale.contiguous()  # the kernels read scale[adapter] with unit stride
    if meta is not None and not isinstance(meta, MultiLoRAMeta):
        raise TypeError(f"{FN}: meta must be build_meta's MultiLoRAMeta or None, got {type(meta).__name__}")
    if meta is None:
        meta = build_meta(adapter_ids, L)
    elif meta.num_tokens != T or meta.num_adapters != L or meta.device != x.device:
        raise ValueError(f"{FN}: meta is for {meta.num_tokens} tokens, {meta.num_adapters} adapters on "
                         f"{meta.device}; this call has {T}, {L} on {x.device}")  # fmt: skip
    if T == 0:
        return y
    scale_t, scale_f = (scale, 1.0) if isinstance(scale, torch.Tensor) else (None, float(scale))
    _add_multi_lora_op(
        y, x, [a for a, _ in slices], [b for _, b in slices], adapter_ids, meta.counts, meta.sorted_tokens,
        scale_t, scale_f, deterministic, path or "", _encode_configs(configs),
    )  # fmt: skip
    return y


# ---- the op (kernels.library): fused_kernels::add_multi_lora, in place in y (serving: no autograd) -------
@custom_op(
    "add_multi_lora",
    "(Tensor(a!) y, Tensor x, Tensor[] lora_a, Tensor[] lora_b, Tensor adapter_ids, Tensor counts, "
    "Tensor sorted_tokens, Tensor? scale_tensor, float scale, bool deterministic, str path, "
    "str configs) -> ()",
    mutates_args=("y",),
)
def _add_multi_lora_op(
    y, x, lora_a, lora_b, adapter_ids, counts, sorted_tokens, scale_t, scale, deterministic, path, configs
):
    """The launches of :func:`add_multi_lora` on checked arguments (slices as two lists; ``meta`` as its
    ``counts`` and ``sorted_tokens``; a scale tensor or a float; ``path`` ``""`` = the default; ``configs``
    as :func:`_encode_configs` writes them)."""
    slices = list(zip(lora_a, lora_b, strict=True))
    _check_written(y, x, slices, adapter_ids, scale_t)
    T, K = x.shape
    widths, (L, R) = tuple(b.shape[1] for b in lora_b), lora_a[0].shape[:2]
    scale_tensor = scale_t is not None
    path, configs = path or None, _decode_configs(configs)
    table, sliced = _slice_table(slices, x.device) if len(slices) > 1 else (counts, 0)  # (unused if 0)
    args = (T, K, widths, R, L, x.dtype, x.device, path)
    flags = (sliced, scale_tensor, deterministic)
    if configs:
        p = plan(*args, configs=configs)
        launches = _launches(p, T, K, widths, R, L, x.dtype, *flags)
    else:
        launches = _cached(*args, *flags)
    a, b = slices[0]
    scale_ptr, scale_f = (scale_t, 1.0) if scale_tensor else (counts, scale)
    ab = (*a.stride(), *b.stride())
    order = sorted_tokens
    if launches[0].groups:
        _launch_one(launches[0], x, y, slices, table, scale_ptr, scale_f, counts, order, L, K, widths[0], R)
        return
    if len(launches) == 1:
        f = launches[0]
        _launch_fused(
            f.grid,
            (x, y, a, b, table, scale_ptr, counts, order, L, K, widths[0], R, f.split, scale_f,
             x.stride(0), x.stride(1), y.stride(0), y.stride(1), *ab),
            f.constexprs, f.warps, f.stages,
        )  # fmt: skip
        return
    s, e = launches
    S = len(slices)
    if s.constexprs[1][1]:  # atomic split-K: one zeroed buffer
        part = torch.zeros((1, S, T, R), device=x.device, dtype=torch.float32)
    else:
        part = torch.empty((s.split, S, T, R), device=x.device, dtype=torch.float32)
    ps = (0 if part.shape[0] == 1 else part.stride(0), part.stride(1), part.stride(2))
    _launch_shrink(
        s.grid,
        (x, a, b, table, part, counts, order, L, K, widths[0], R, s.split, s.extra,
         x.stride(0), x.stride(1), *ab, *ps),
        s.constexprs, s.warps, s.stages,
    )  # fmt: skip
    _launch_expand(
        e.grid,
        (y, a, b, table, part, scale_ptr, counts, order, L, widths[0], R, e.extra, e.split, scale_f,
         y.stride(0), y.stride(1), *ab, *ps),
        e.constexprs, e.warps, e.stages,
    )  # fmt: skip


# ---- path "one_launch": split-K shrink and expand in one kernel, for decode sizes ------------------------
# Both paths above pay a serial chain at small T: "fused" runs each program's shrink over all of K, "split"
# launches twice. Here a tile's programs are (column group g, K chunk k): each computes the partial of x Aᵀ
# over its chunk (as the split path's shrink) and writes it to its own slot; then it counts itself done on
# the (tile, group, slice)'s counter, and the program that finds itself the last of the group's chunks sums
# the slots in a fixed order (bitwise reproducible), scales, rounds and adds t Bᵀ to the group's BLOCK_N
# columns of y. No program waits on another (the last one to arrive has nothing to wait for), so nothing
# depends on which programs are resident, and the interpreter, which runs programs in order, agrees. Every
# group recomputes the tile's shrink (x rows and A read once per group, mostly from L2: at decode sizes
# bytes are not what costs). The counters are zeroed per call (one memset); the partials take
# groups × chunks × slices × T × r fp32 (at T = 16, 8 groups, 16 chunks, r 16: 128 KB).
PATHS = ("fused", "split", "one_launch")


@triton.jit
def _one_launch_kernel(
    x_ptr, y_ptr, a_ptr, b_ptr, tbl_ptr, part_ptr, done_ptr, scale_ptr, counts_ptr, sorted_ptr,
    L, K, N, R, SPLIT_K, K_PER_SPLIT, GROUPS, S, scale,
    stride_xm, stride_xk, stride_ym, stride_yn, sa_l, sa_r, sa_k, sb_l, sb_n, sb_r,
    stride_pg, stride_pk, stride_ps, stride_pm,
    SLICED: tl.constexpr, SCALE_TENSOR: tl.constexpr, DOT_UPCAST: tl.constexpr, INPUT_PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_R: tl.constexpr,
    BLOCK_L: tl.constexpr,
):  # fmt: skip
    lora, j, pos, tok, row_mask = _rows(GROUPS * SPLIT_K, counts_ptr, sorted_ptr, L, BLOCK_M, BLOCK_L)
    if lora >= L:  # a tile slot past the last tile: all of its programs exit
        return
    s = tl.program_id(1)
    a_ptr, b_ptr, n_off, N, sa_l, sa_r, sa_k, sb_l, sb_n, sb_r = _slice(
        s, a_ptr, b_ptr, tbl_ptr, N, sa_l, sa_r, sa_k, sb_l, sb_n, sb_r, SLICED
    )
    g, k = j // SPLIT_K, j % SPLIT_K
    if g * BLOCK_N >= N:  # the group's columns lie past this slice's width: all of its programs exit
        return
    lora64 = lora.to(tl.int64)
    k_lo = k * K_PER_SPLIT
    t = _shrink_tile(
        x_ptr, a_ptr + lora64 * sa_l, tok, row_mask, k_lo, tl.minimum(k_lo + K_PER_SPLIT, K), R,
        stride_xm, stride_xk, sa_r, sa_k, DOT_UPCAST, INPUT_PRECISION, BLOCK_M, BLOCK_K, BLOCK_R,
    )  # fmt: skip
    rs = tl.arange(0, BLOCK_R)
    mask = row_mask[:, None] & (rs < R)[None, :]
    ptrs = part_ptr + g * stride_pg + s * stride_ps + pos[:, None] * stride_pm + rs[None, :]
    tl.store(ptrs + k * stride_pk, t, mask=mask)
    tl.debug_barrier()  # every thread's partial stored before the count is raised (release below)
    slot = tl.program_id(0) // (GROUPS * SPLIT_K)
    arrived = tl.atomic_add(done_ptr + (slot * GROUPS + g) * S + s, 1, sem="acq_rel")
    if arrived == SPLIT_K - 1:  # the group's last chunk: every partial is written (acquired above)
        t = tl.zeros([BLOCK_M, BLOCK_R], dtype=tl.float32)
        for kk in range(0, SPLIT_K):  # fixed order: bitwise reproducible whichever program came last
            t += tl.load(ptrs + kk * stride_pk, mask=mask, other=0.0, cache_modifier=".cg")
        sc = tl.load(scale_ptr + lora).to(tl.float32) if SCALE_TENSOR else scale
        ts = (t * sc).to(y_ptr.dtype.element_ty)
        if DOT_UPCAST:
            ts = ts.to(tl.float32)
        _expand_tile(
            y_ptr, b_ptr + lora64 * sb_l, ts, tok, row_mask, g * BLOCK_N, n_off, N, R, stride_ym, stride_yn,
            sb_n, sb_r, DOT_UPCAST, INPUT_PRECISION, BLOCK_N, BLOCK_R,
        )  # fmt: skip


_launch_one_launch = CachedLauncher(_one_launch_kernel)


def one_launch_rule(
    kernel: str, T: int, K: int, N: int, R: int, S: int, L: int, num_sms: int
) -> BranchConfig:
    """The ``"one_launch"`` kernel's config (``kernel`` names it; the signature is :func:`multi_lora_rule`'s):
    ``block_n`` the columns of a group, ``split`` the K chunks. A rule from the bytes, not a sweep yet: at
    decode sizes (16-token tiles) 512-column groups and 256-deep chunks in 128-deep steps, so at K = N = 4096
    a tile has 8 × 16 programs, about one per SM of an H100 or H200 for the first tile. Interpreter: tiles no
    larger than the problem, 2 chunks where K has 2 steps (so the tests' default calls count arrivals)."""
    block_r = _block_r(R)
    per = cdiv(max(T, 1), max(1, min(L, T)))
    if interpreting():
        bk = min(64, dot_block(K))
        return BranchConfig(min(32, dot_block(per)), min(64, dot_block(N)), bk, min(2, cdiv(K, bk)), 4, 1)
    bm = 16 if per <= 16 else 32 if per <= 32 else 64
    bk = 128 if block_r <= 32 and bm <= 32 else 64
    return BranchConfig(bm, 512 if bm * block_r <= 512 else 256, bk, min(16, cdiv(K, 2 * bk)), 4, 2)


def _k_chunks(K: int, c: BranchConfig) -> tuple[int, int]:
    """(chunks, columns per chunk) of K for ``c.split`` chunks asked, each whole ``c.block_k`` steps."""
    k_per = cdiv(cdiv(K, min(c.split, cdiv(K, c.block_k))), c.block_k) * c.block_k
    return cdiv(K, k_per), k_per


def _one_launch(c: BranchConfig, slots, K, N, common, prec, scale_tensor, block_r, block_l) -> _Launch:
    """The one-launch kernel's grid (tile slots × groups × chunks; slices added at launch) and constexprs."""
    chunks, k_per = _k_chunks(K, c)
    groups = cdiv(N, c.block_n)
    ce = (*common, ("SCALE_TENSOR", scale_tensor), *prec, ("BLOCK_M", c.block_m), ("BLOCK_N", c.block_n),
          ("BLOCK_K", c.block_k), ("BLOCK_R", block_r), ("BLOCK_L", block_l))  # fmt: skip
    return _Launch((slots * groups * chunks, 0), ce, c.num_warps, c.num_stages, chunks, k_per, groups)


def _launch_one(f: _Launch, x, y, slices, table, scale_ptr, scale_f, counts, order, L, K, N, R) -> None:
    """The one-launch path's buffers (a slot per group, chunk, slice and sorted token; a zeroed counter per
    tile slot, group and slice) and its launch."""
    S, T = len(slices), x.shape[0]
    grid = (f.grid[0], S)
    part = torch.empty((f.groups, f.split, S, T, R), device=x.device, dtype=torch.float32)
    done = torch.zeros(f.grid[0] // f.split * S, device=x.device, dtype=torch.int32)
    a, b = slices[0]
    _launch_one_launch(
        grid,
        (x, y, a, b, table, part, done, scale_ptr, counts, order, L, K, N, R, f.split, f.extra, f.groups, S,
         scale_f, x.stride(0), x.stride(1), y.stride(0), y.stride(1), *a.stride(), *b.stride(),
         *part.stride()[:4]),
        f.constexprs, f.warps, f.stages,
    )  # fmt: skip
