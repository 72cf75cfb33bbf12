"""Multi-LoRA metadata: the token→adapter map grouped by adapter, built on the device with no host sync.

A batch of T tokens, each with an adapter id in ``[0, L)`` or −1 (no adapter). The kernels of
:mod:`kernels.multi_lora.shrink_expand` want the tokens of one adapter side by side, so one program can run
one adapter's weights over a block of its tokens. :func:`build_meta` computes:

- ``sorted_tokens`` [T] int32: token indices grouped by adapter (a *stable* counting sort: ascending token
  order within an adapter), adapters in ascending id order, the tokens without an adapter last;
- ``counts`` [L] int32: tokens per adapter (zero for adapters nobody uses);
- ``starts`` [L + 1] int32: where adapter l's tokens begin in ``sorted_tokens`` (``starts[L]`` = tokens
  that have an adapter, so the kernels never look past it);
- ``active`` [L] int32: the adapter ids that have tokens first (ascending), then the others;
  ``num_active`` [1] int32 how many have tokens.

**How: a counting sort in one or two launches.** The L adapters plus one "no adapter" bucket are few, so
each block of ``BLOCK_T`` tokens compares its keys with every bucket: a ``[BLOCK_T, BLOCK_L]`` 0/1 matrix
whose column sums are the block's histogram and whose cumulative sum down the column gives each token its
rank among the block's tokens of the same adapter. A token's place is then ``start[adapter] + (tokens of
that adapter in earlier blocks) + rank − 1``. With one block (T ≤ ``BLOCK_T``: every decode batch) one
program does it all in one launch; with more, a first launch writes each block's histogram and the second
reads them all (``[blocks, BLOCK_L]``, a few KB) so every block knows its offsets. Program 0 also writes
``counts``, ``starts``, ``active`` and ``num_active``. The general-purpose ``torch.sort`` + ``searchsorted``
+ ``diff`` + ``argsort`` it replaces was about 14 launches, 64–106 µs per call on an H100, more than the
multi-LoRA kernels themselves.

Nothing here reads a value back to the host: shapes depend on T and L only, so the same object is reused
by every layer of one step, and building it inside a CUDA graph capture records a fixed sequence of
launches. The kernels use ``counts`` and ``sorted_tokens`` alone: with ids sorted ascending, adapter l's
tokens start at Σ_{j<l} counts[j], and a program finds its (adapter, row block) from the counts with a prefix
sum (see :mod:`kernels.multi_lora.shrink_expand`).

**Ids out of range.** Ids below −1 or ≥ L are grouped with the −1 tokens (compared in their own dtype, so
an int64 id of 2³² + 1 is not taken for adapter 1): the kernels leave those rows untouched and never index
an adapter with them, so a bad id cannot read or write out of bounds. Raising an error for them needs the ids
on the host, a sync: :func:`build_meta` checks when ``validate`` is True; the default checks CPU tensors
always (no sync to pay) and CUDA tensors only when ``FUSED_KERNELS_DEBUG=1`` is in the environment, and
never during a CUDA graph capture. So on a GPU the check is a debug flag, kept out of the hot path; serving
code validates the ids once where it builds the batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from kernels.fast_launch import CachedLauncher
from kernels.launch import (
    DEBUG_ENV,
    MAX_TILE_ELEMENTS,
    cdiv,
    check_device,
    debug_checks,
    dot_block,
    int32_offsets,
    next_pow2,
)
from kernels.library import custom_op

__all__ = ["DEBUG_ENV", "MultiLoRAMeta", "build_meta", "debug_checks", "meta_blocks"]


@dataclass(frozen=True)
class MultiLoRAMeta:
    """The token→adapter grouping of one batch (see the module docstring); reuse it across layers."""

    num_tokens: int
    num_adapters: int
    sorted_tokens: torch.Tensor  # [T] int32
    counts: torch.Tensor  # [L] int32
    starts: torch.Tensor  # [L + 1] int32
    active: torch.Tensor  # [L] int32
    num_active: torch.Tensor  # [1] int32

    @property
    def device(self) -> torch.device:
        return self.counts.device


@triton.jit
def _block_onehot(ids_ptr, stride, block, T, L, BLOCK_T: tl.constexpr, BLOCK_L: tl.constexpr):
    # Tokens block·BLOCK_T … of the batch: [BLOCK_T, BLOCK_L] int32, 1 where token t's bucket is l (bucket L:
    # no adapter or a bad id); padding rows past T match no bucket. Also the tokens' indices.
    ts = block * BLOCK_T + tl.arange(0, BLOCK_T)
    ids = tl.load(ids_ptr + ts * stride, mask=ts < T, other=-1)
    key = tl.where((ids >= 0) & (ids < L), ids, L).to(tl.int32)  # compared before narrowing to int32
    key = tl.where(ts < T, key, BLOCK_L)
    ls = tl.arange(0, BLOCK_L)
    return (key[:, None] == ls[None, :]).to(tl.int32), ts


@triton.jit
def _histogram_kernel(ids_ptr, hist_ptr, stride, T, L, BLOCK_T: tl.constexpr, BLOCK_L: tl.constexpr):
    # One block's histogram: hist[block, l] = its tokens in bucket l (only when there are several blocks).
    block = tl.program_id(0)
    onehot, _ = _block_onehot(ids_ptr, stride, block, T, L, BLOCK_T, BLOCK_L)
    tl.store(hist_ptr + block * BLOCK_L + tl.arange(0, BLOCK_L), tl.sum(onehot, 0))


@triton.jit
def _group_kernel(
    ids_ptr, hist_ptr, sorted_ptr, counts_ptr, starts_ptr, active_ptr, num_active_ptr, stride, T, L, BLOCKS,
    BLOCK_T: tl.constexpr, BLOCK_L: tl.constexpr, BLOCK_B: tl.constexpr, ONE_BLOCK: tl.constexpr,
):  # fmt: skip
    block = tl.program_id(0)
    ls = tl.arange(0, BLOCK_L)
    onehot, ts = _block_onehot(ids_ptr, stride, block, T, L, BLOCK_T, BLOCK_L)
    if ONE_BLOCK:
        total = tl.sum(onehot, 0)
        earlier = tl.zeros([BLOCK_L], dtype=tl.int32)
    else:
        bs = tl.arange(0, BLOCK_B)[:, None]
        hist = tl.load(hist_ptr + bs * BLOCK_L + ls[None, :], mask=bs < BLOCKS, other=0)
        total = tl.sum(hist, 0)
        earlier = tl.sum(tl.where(bs < block, hist, 0), 0)  # this adapter's tokens in earlier blocks
    start = tl.cumsum(total, 0) - total  # bucket l's first place; start[L] = tokens with an adapter
    rank = tl.cumsum(onehot, 0)  # 1-based rank among this block's tokens of the same bucket
    place = tl.sum(onehot * ((start + earlier)[None, :] + rank - 1), 1)
    tl.store(sorted_ptr + place, ts, mask=ts < T)
    if block == 0:
        adapter = ls < L
        tl.store(counts_ptr + ls, total, mask=adapter)
        tl.store(starts_ptr + ls, start, mask=ls <= L)
        used = (adapter & (total > 0)).to(tl.int32)
        unused = (adapter & (total == 0)).to(tl.int32)
        num_active = tl.sum(used, 0)
        slot = tl.where(used > 0, tl.cumsum(used, 0) - 1, num_active + tl.cumsum(unused, 0) - 1)
        tl.store(active_ptr + slot, ls, mask=adapter)
        tl.store(num_active_ptr, num_active)


_launch_histogram = CachedLauncher(_histogram_kernel)
_launch_group = CachedLauncher(_group_kernel)


def meta_blocks(num_tokens: int, num_adapters: int) -> tuple[int, int, int]:
    """``(BLOCK_T, BLOCK_L, blocks)`` of :func:`build_meta`: buckets padded to a power of two (the L
    adapters and "no adapter"), token blocks of at most 8K one-hot entries; one launch if ``blocks`` is 1."""
    block_l = dot_block(num_adapters + 1)
    block_t = max(16, min(next_pow2(num_tokens), 8192 // block_l))
    return block_t, block_l, cdiv(num_tokens, block_t)


def _check_ids(adapter_ids: torch.Tensor, num_adapters: int) -> None:
    bad = (adapter_ids < -1) | (adapter_ids >= num_adapters)
    if bool(bad.any()):
        first = int(bad.nonzero()[0, 0])
        raise ValueError(
            f"build_meta: adapter_ids[{first}] = {int(adapter_ids[first])} is out of range: ids must be −1 "
            f"(no adapter) or in [0, {num_adapters}) for {num_adapters} stacked adapters"
        )


def build_meta(adapter_ids: torch.Tensor, num_adapters: int, validate: bool | None = None) -> MultiLoRAMeta:
    """Group the tokens of ``adapter_ids`` [T] (int32 or int64, −1 = no adapter) by adapter; see the module.

    ``validate``: raise ``ValueError`` for ids outside ``[-1, L)`` (a host sync on CUDA); ``None`` = on CPU
    tensors always, on CUDA tensors when ``FUSED_KERNELS_DEBUG=1`` and not capturing a CUDA graph.
    """
    if not isinstance(adapter_ids, torch.Tensor) or adapter_ids.dim() != 1:
        shape = tuple(adapter_ids.shape) if isinstance(adapter_ids, torch.Tensor) else type(adapter_ids)
        raise ValueError(f"build_meta: adapter_ids must be a 1-D tensor [T], got {shape}")
    if adapter_ids.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"build_meta: adapter_ids has dtype {adapter_ids.dtype}; use int32 or int64")
    if not isinstance(num_adapters, int) or num_adapters < 1:
        raise ValueError(f"build_meta: num_adapters={num_adapters!r} must be an int ≥ 1")
    L = num_adapters
    block_t, block_l, blocks = meta_blocks(adapter_ids.shape[0], L)
    if max(block_t, next_pow2(blocks)) * block_l > MAX_TILE_ELEMENTS:
        raise ValueError(
            f"build_meta: {adapter_ids.shape[0]} tokens and num_adapters={L} are too many for the one-pass "
            f"grouping (its [{max(block_t, next_pow2(blocks))}, {block_l}] tiles exceed Triton's "
            f"{MAX_TILE_ELEMENTS} elements per block)"
        )
    check_device("build_meta", "adapter_ids", adapter_ids, adapter_ids)
    buf = _build_meta_op(adapter_ids, L, validate)
    T = adapter_ids.shape[0]
    hist_size = blocks * block_l if blocks > 1 else 0
    order, counts, starts, active, num_active, _ = buf.split((T, L, L + 1, L, 1, hist_size))
    return MultiLoRAMeta(
        num_tokens=T,
        num_adapters=L,
        sorted_tokens=order,
        counts=counts,
        starts=starts,
        active=active,
        num_active=num_active,
    )


# ---- the op (kernels.library): fused_kernels::build_meta, one int32 buffer the wrapper splits ----------
def _fake_buffer(adapter_ids, num_adapters, validate):
    T, L = adapter_ids.shape[0], num_adapters
    _, block_l, blocks = meta_blocks(T, L)
    return adapter_ids.new_empty(T + 3 * L + 2 + (blocks * block_l if blocks > 1 else 0), dtype=torch.int32)


@custom_op(
    "build_meta", "(Tensor adapter_ids, int num_adapters, bool? validate) -> Tensor", fake=_fake_buffer
)
def _build_meta_op(adapter_ids, num_adapters, validate):
    """``[sorted_tokens | counts | starts | active | num_active | histograms]`` int32 in one buffer. The id
    check reads values, so it runs here (at run time, also under torch.compile), with the capture test."""
    L, device = num_adapters, adapter_ids.device
    block_t, block_l, blocks = meta_blocks(adapter_ids.shape[0], L)
    if validate is None:
        validate = device.type == "cpu" or (debug_checks() and not torch.cuda.is_current_stream_capturing())
    if validate:
        _check_ids(adapter_ids, L)
    adapter_ids = int32_offsets(adapter_ids, (0,))  # the kernels index tokens in int32
    T = adapter_ids.shape[0]
    hist_size = blocks * block_l if blocks > 1 else 0
    buf = torch.empty(T + 3 * L + 2 + hist_size, dtype=torch.int32, device=device)  # one allocation
    order, counts, starts, active, num_active, hist = buf.split((T, L, L + 1, L, 1, hist_size))
    if T == 0:  # nothing to group: no launch
        buf.zero_()
        active.copy_(torch.arange(L, dtype=torch.int32))
    else:
        stride = adapter_ids.stride(0)
        sizes = (("BLOCK_T", block_t), ("BLOCK_L", block_l))
        if blocks > 1:
            _launch_histogram((blocks,), (adapter_ids, hist, stride, T, L), sizes, 4, 1)
        constexprs = (*sizes, ("BLOCK_B", next_pow2(blocks)), ("ONE_BLOCK", blocks == 1))
        args = (adapter_ids, hist if blocks > 1 else counts, order, counts, starts, active, num_active,
                stride, T, L, blocks)  # fmt: skip
        _launch_group((blocks,), args, constexprs, 4, 1)
    return buf
