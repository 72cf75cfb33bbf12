"""Table-batched embedding (TBE): all ``F`` lookups in one launch, the optimizer fused into the backward.

Layout. The ``F`` tables (``n_f`` rows each, ``R = Σ n_f``) live in ONE packed ``weight [R, D]``; table ``f``
owns rows ``table_offsets[f] : table_offsets[f+1]`` (int64 ``[F+1]``, an exclusive cumsum of the sizes). A
local id ``i`` of feature ``f`` is global row ``table_offsets[f] + i``.

Bags. Bag ``(b, f)`` (sample ``b``, feature ``f``) is bag number ``k = b·F + f`` (sample-major, so a
``[B, F]`` id tensor is already in bag order). Two input forms:

- fixed bag size ``L``: ``ids [B, F]`` (``L = 1``, one-hot: the Criteo case) or ``ids [B, F, L]``;
- ragged bags, CSR-style: ``indices [nnz]`` (local ids, bags one after another) and ``offsets [B·F + 1]``,
  bag ``k`` = ``indices[offsets[k] : offsets[k+1]]``; an empty bag (``offsets[k] == offsets[k+1]``) gives
  zeros, in sum and in mean pooling.

Forward, ``S_k`` the rows of bag ``k``::

    out[b, f, :] = Σ_{r ∈ S_k} weight[r, :]             pooling = "sum"
    out[b, f, :] = Σ_{r ∈ S_k} weight[r, :] / max(|S_k|, 1)   pooling = "mean"

One program pools ``BLOCK_BAGS`` bags, walking ``j = 0 … max bag length`` and gathering one
``[BLOCK_BAGS, D]`` tile of rows per step (fp32 accumulation). Bytes: read nnz·D·s of rows + nnz·8 of ids,
write B·F·D·s. For Kaggle (B = 2048, F = 26, D = 16, fp32): 3.4 MB of rows, 0.4 MB of ids, 3.4 MB out — a few
µs at HBM speed; eager runs 26 gathers and a ``stack`` (27+ launches, the stack a second pass).

Backward + optimizer, fused. The gradient of row ``r`` is ``g_r = Σ_{entries e with row r} c_e·dout[bag(e)]``
(``c_e = 1`` for sum, ``1/|S_bag|`` for mean). Only touched rows change:

    SGD (exact, as nn.Embedding + torch.optim.SGD)     w_r -= lr · g_r
    row-wise Adagrad (FBGEMM's ``EXACT_ROWWISE_ADAGRAD``, one fp32 state per row)
                                    m_r += mean_D(g_r²);  w_r -= lr · g_r / (sqrt(m_r) + eps)

Repeated ids (the same row in several bags of a batch: hot rows under Zipf) must be summed BEFORE the update:
two updates ``w -= lr·g1; w -= lr·g2`` happen to equal one for SGD, but not for Adagrad, and two programs
updating the same row race. So: sort + segment reduce, deterministic.

1. Keys (one small kernel, no sync): the global row of every entry, the sentinel ``R`` for an id outside its
   table; int32 while ``R < 2³¹ − 1`` (a radix sort of 32-bit keys makes half the passes of 64-bit ones).
   A *stable* ``torch.sort`` → ``sorted_rows``, ``order`` (the entry behind each sorted position).
2. Block kernel: one program per block of ``BLOCK_P`` sorted positions (64 up to D = 16). It gathers each
   entry's upstream gradient into ``V [BLOCK_P, D]``, sums the runs of equal rows inside the block as one
   small product ``S = M·V`` (``M[i, j] = 1`` where positions ``i`` and ``j`` hold the same row; fp32, no
   TF32), and updates every row whose whole run lies in the block. A run that crosses the block's edge
   leaves a partial sum instead (at most two per block: its first run, begun earlier; its last run, going
   on) and a flag.
3. Cross-block kernel: for each block whose last run goes on, add the partial sums of the blocks that run
   crosses, in block order, and update its row once.
Every touched row is written by exactly one program: no atomics, and the same bits every run (the sum's
order is fixed by the block layout, not by thread timing).

Why blocks and not one program per run: the Kaggle tables include tiny ones (3, 4, 10 rows), so a batch of
2048 holds runs of hundreds of entries even under uniform ids, and a Zipf head row is seen hundreds of times.
One program summing such a run serially is a chain of hundreds of dependent loads; the block's product
spreads it over the lanes, and a run longer than a block costs one partial per block it crosses. FBGEMM's
TBE backward splits runs by length too: its ``split_embedding_backward_codegen_find_long_segments`` kernel
collects the runs at least ``max_segment_length_per_warp`` long for its ``cta_per_row`` kernel (the other
runs go to ``warp_per_row``), and its comment there reads "A segment with length >
max_segment_length_per_cta is handled by more than 1 thread block." (pytorch/FBGEMM,
``fbgemm_gpu/codegen/training/backward/embedding_backward_split_grad_template.cu``).

Cost: a sort of nnz keys, plus nnz·8 of ``order`` read and the ids' pass to build the keys.
Bytes: read nnz·(4 + 8) (keys, order) + nnz·D·s (gradient rows, gathered) + U·D·s (the U unique rows),
write U·D·s (+ U·4 read and written for the Adagrad state).

The alternative, ``tl.atomic_add`` of each entry's gradient into a dense ``[R, D]`` gradient (or into the
weight, for SGD), needs no sort but is non-deterministic in float (arrival order) and cannot do Adagrad's
per-row ``mean(g²)`` without a second pass over a dense buffer (2 GiB for the Kaggle tables).

``deterministic=False`` (SGD only) takes that alternative for SGD, where it is exact math: ``w_r -= lr·g1``
then ``w_r -= lr·g2`` is ``w_r -= lr·(g1 + g2)`` up to rounding. ONE kernel, one program per block of
entries: each entry's ``-lr·c_e·dout[bag]`` is added to its row with ``tl.atomic_add`` (no keys, no sort, no
block or cross-block pass; notebook 05's step profile counts 16 GPU events fewer per step). What it costs: the
additions into a row land in arrival order, so a repeated row's result can differ in its last bits from run
to run (as ``index_add_``'s on a GPU), and the update happens add by add, not after the sum (the same value
in exact arithmetic). A hot row's adds serialise (under Zipf a head row takes hundreds). Weight fp32 only:
a 16-bit weight would be rounded at every add.

Out-of-range ids (``id < 0`` or ``id ≥ n_f``). ``check_ids=True`` (the default) checks once per call, outside
the kernels: one fused torch reduction over the ids plus ONE device→host sync (``bool(bad.any())``: the host
waits for the GPU to finish all the work queued before it), and raises ``IndexError`` naming the feature and
the bad value. A CUDA-graph step (no host sync allowed) passes ``check_ids=False``: the kernels then still
never touch memory outside the table — an out-of-range entry pools as zeros and updates nothing — but no error
is raised. Ids that come from :class:`~lecture_code.model.hashing.BatchedModulusHash` are in range by
construction.

Autograd. The packed weight is *not* a leaf that receives ``.grad``: the backward has already applied the
update, and returns ``None`` for it. The module keeps ``weight`` as a buffer (not a parameter), so an outer
``torch.optim`` optimizer built from ``model.parameters()`` (the MLPs) never sees it, and DDP does not
all-reduce it. Consequences: each ``backward()`` applies one update at once (gradient accumulation over
micro-batches becomes one update per micro-batch); ``zero_grad`` has nothing to clear here; the learning rate
lives in a 1-element device tensor (``lr_tensor``) that a schedule, or a CUDA-graph replay, reads each step.
"""

from __future__ import annotations

import functools
import numbers
from collections.abc import Sequence

import torch
import triton
import triton.language as tl

from kernels import launch
from kernels.dlrm.tbe_inputs import (
    FN,
    OPTIMIZERS,
    POOLINGS,
    bag_layout,
    capturing,
    check_offsets,
    check_optimizer_args,
    check_table_offsets,
    check_values,
    check_weight,
    check_written,
    feature_of_entry,
    table_offsets_for,
)
from kernels.fast_launch import CachedLauncher
from kernels.launch import (
    MAX_TILE_ELEMENTS,
    SUPPORTED_DTYPES,
    cdiv,
    check_device,
    check_tensor,
    debug_checks,
    dot_block,
    next_pow2,
)
from kernels.library import custom_op

__all__ = [
    "MAX_DIM",
    "OPTIMIZERS",
    "POOLINGS",
    "TableBatchedEmbedding",
    "embedding_tbe",
    "table_offsets_for",
]

BLOCK_BAGS = 16  # bags per forward program: a [16, D] tile per gather step
CROSS_HEADS = 32  # blocks per program of the cross-block update
MAX_DIM = MAX_TILE_ELEMENTS // CROSS_HEADS  # D: the cross-block update's [32, D] tile, Triton's largest block


@triton.jit
def _tbe_fwd_kernel(
    weight_ptr, table_offsets_ptr, indices_ptr, offsets_ptr, out_ptr,
    num_bags, nnz, num_rows, F, D, bag_size, stride_w, stride_o,
    FIXED_BAG: tl.constexpr, MEAN: tl.constexpr, BLOCK_BAGS: tl.constexpr, BLOCK_D: tl.constexpr,
):  # fmt: skip
    pid = tl.program_id(0)
    bags = pid * BLOCK_BAGS + tl.arange(0, BLOCK_BAGS)
    bag_mask = bags < num_bags
    bags64 = bags.to(tl.int64)
    f = bags % F
    row_base = tl.load(table_offsets_ptr + f, mask=bag_mask, other=0)  # int64: first row of table f
    table_rows = tl.load(table_offsets_ptr + f + 1, mask=bag_mask, other=0) - row_base
    if FIXED_BAG:
        start = bags64 * bag_size
        length = tl.where(bag_mask, bag_size, 0)
    else:
        # Clamped to the ids buffer [0, nnz): offsets the host did not check (inside a CUDA graph) still
        # never make a bag read outside it.
        start = tl.minimum(tl.maximum(tl.load(offsets_ptr + bags64, mask=bag_mask, other=0), 0), nnz)
        end = tl.load(offsets_ptr + bags64 + 1, mask=bag_mask, other=0)
        length = tl.minimum(tl.maximum(end, start), nnz) - start
    cols = tl.arange(0, BLOCK_D)
    col_mask = cols < D
    acc = tl.zeros([BLOCK_BAGS, BLOCK_D], dtype=tl.float32)
    for j in range(0, tl.max(length, axis=0)):  # the longest bag of this block; shorter ones are masked
        live = j < length
        ids = tl.load(indices_ptr + start + j, mask=live, other=0)
        rows = row_base + ids
        # out-of-range ids pool as zeros, never read outside (rows: also if table_offsets were wrong)
        ok = live & (ids >= 0) & (ids < table_rows) & (rows >= 0) & (rows < num_rows)
        mask = ok[:, None] & col_mask[None, :]
        w = tl.load(weight_ptr + rows[:, None] * stride_w + cols[None, :], mask=mask, other=0.0)
        acc += w.to(tl.float32)
    if MEAN:
        acc = acc / tl.maximum(length, 1).to(tl.float32)[:, None]  # empty bag: 0 / 1 = 0
    tl.store(
        out_ptr + bags64[:, None] * stride_o + cols[None, :],
        acc.to(out_ptr.dtype.element_ty),
        mask=bag_mask[:, None] & col_mask[None, :],
    )


@triton.jit
def _entry_row(
    flat_ptr, table_offsets_ptr, bag_of_entry_ptr, e, live, F, bag_size, num_rows, FIXED_BAG: tl.constexpr
):  # fmt: skip
    # Entries e (where `live`): their bag, their global row in the packed weight, and whether the id lies
    # inside its table (bag b belongs to table b % F) and the row inside the weight.
    ids = tl.load(flat_ptr + e, mask=live, other=0)
    if FIXED_BAG:
        bag = e // bag_size
    else:
        bag = tl.load(bag_of_entry_ptr + e, mask=live, other=0)
    f = bag % F
    base = tl.load(table_offsets_ptr + f, mask=live, other=0)
    size = tl.load(table_offsets_ptr + f + 1, mask=live, other=0) - base
    row = base + ids
    return bag, row, live & (ids >= 0) & (ids < size) & (row >= 0) & (row < num_rows)


@triton.jit
def _tbe_rows_kernel(
    flat_ptr, table_offsets_ptr, bag_of_entry_ptr, rows_ptr, nnz, F, bag_size, num_rows,
    FIXED_BAG: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    # The sort key of every entry: its global row, or the sentinel num_rows for an id outside its table.
    e = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = e < nnz
    _, row, inside = _entry_row(
        flat_ptr, table_offsets_ptr, bag_of_entry_ptr, e, mask, F, bag_size, num_rows, FIXED_BAG
    )
    row = tl.where(inside, row, num_rows)
    tl.store(rows_ptr + e, row.to(rows_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _entry_gradient(
    grad_ptr, offsets_ptr, bag, mask, tile_mask, cols, bag_size, stride_g,
    FIXED_BAG: tl.constexpr, MEAN: tl.constexpr,
):  # fmt: skip
    # c_e · dout[bag] in fp32 for entries of bags `bag` [P] (c_e = 1 for sum, 1/|bag| for mean), [P, BLOCK_D].
    g = tl.load(grad_ptr + bag[:, None] * stride_g + cols[None, :], mask=tile_mask, other=0.0).to(tl.float32)
    if MEAN:
        if FIXED_BAG:
            g = g / bag_size
        else:
            n = tl.load(offsets_ptr + bag + 1, mask=mask, other=1) - tl.load(offsets_ptr + bag, mask=mask)
            g = g / tl.maximum(n, 1).to(tl.float32)[:, None]  # n >= 1 for an entry of the bag
    return g


@triton.jit
def _tbe_atomic_sgd_kernel(
    weight_ptr, table_offsets_ptr, flat_ptr, bag_of_entry_ptr, offsets_ptr, grad_ptr, lr_ptr,
    nnz, num_rows, F, D, bag_size, stride_w, stride_g,
    FIXED_BAG: tl.constexpr, MEAN: tl.constexpr, BLOCK: tl.constexpr, BLOCK_D: tl.constexpr,
):  # fmt: skip
    # SGD without the sort: every entry adds -lr·c_e·dout[bag] to its row, atomically (arrival order).
    e = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    # ok false: an id outside its table, which updates nothing
    bag, row, ok = _entry_row(
        flat_ptr, table_offsets_ptr, bag_of_entry_ptr, e, e < nnz, F, bag_size, num_rows, FIXED_BAG
    )
    cols = tl.arange(0, BLOCK_D)
    tile_mask = ok[:, None] & (cols < D)[None, :]
    g = _entry_gradient(grad_ptr, offsets_ptr, bag, ok, tile_mask, cols, bag_size, stride_g, FIXED_BAG, MEAN)
    lr = tl.load(lr_ptr)
    w_ptrs = weight_ptr + row[:, None] * stride_w + cols[None, :]
    tl.atomic_add(w_ptrs, -lr * g, mask=tile_mask, sem="relaxed")


@triton.jit
def _apply_update(
    weight_ptr, state_ptr, lr, row, g, mask, D, eps, stride_w, cols, col_mask, ADAGRAD: tl.constexpr
):  # fmt: skip
    # One optimizer update of the rows `row` [P] by their summed gradients g [P, BLOCK_D], where `mask`.
    rows64 = row.to(tl.int64)
    w_ptrs = weight_ptr + rows64[:, None] * stride_w + cols[None, :]
    tile_mask = mask[:, None] & col_mask[None, :]
    w = tl.load(w_ptrs, mask=tile_mask, other=0.0).to(tl.float32)
    if ADAGRAD:
        m = tl.load(state_ptr + rows64, mask=mask, other=0.0) + tl.sum(g * g, axis=1) / D  # masked lanes: 0
        tl.store(state_ptr + rows64, m, mask=mask)
        w = w - lr * g / (tl.sqrt(m) + eps)[:, None]
    else:
        w = w - lr * g
    tl.store(w_ptrs, w.to(weight_ptr.dtype.element_ty), mask=tile_mask)


# A block's flags: its last run goes on into the next block; it is one run, begun before and going on.
# (tl.constexpr: a jitted kernel may read no other kind of global.)
HEAD, THROUGH = tl.constexpr(1), tl.constexpr(2)


@triton.jit
def _tbe_block_update_kernel(
    weight_ptr, state_ptr, lr_ptr, sorted_rows_ptr, order_ptr, bag_of_entry_ptr, offsets_ptr, grad_ptr,
    partials_ptr, flags_ptr, nnz, num_rows, D, bag_size, eps, stride_w, stride_g,
    FIXED_BAG: tl.constexpr, MEAN: tl.constexpr, ADAGRAD: tl.constexpr,
    BLOCK_P: tl.constexpr, BLOCK_D: tl.constexpr,
):  # fmt: skip
    # Block b of BLOCK_P sorted positions: gather each entry's upstream gradient, sum every run of equal rows
    # inside the block (a 0/1 matrix product), update the rows whose whole run lies here, and leave the two
    # partial sums of runs that cross the block's edges (partials[b, 0]: the first run, begun in an earlier
    # block; partials[b, 1]: the last run, begun here and going on) for the cross-block kernel.
    b = tl.program_id(0)
    p0 = b.to(tl.int64) * BLOCK_P
    pos = p0 + tl.arange(0, BLOCK_P)
    live = pos < nnz
    last = tl.minimum(p0 + BLOCK_P, nnz) - 1
    row = tl.load(sorted_rows_ptr + pos, mask=live, other=-1)
    prev = tl.load(sorted_rows_ptr + pos - 1, mask=live & (pos > 0), other=-1)
    nxt = tl.load(sorted_rows_ptr + pos + 1, mask=pos + 1 < nnz, other=-1)
    # The block's edges, picked from the lanes and broadcast back (the interpreter refuses a scalar bool in a
    # tensor's mask): its first row, the row before it, its last row, the row after it.
    edge = tl.zeros_like(row)
    first_row = edge + tl.sum(tl.where(pos == p0, row, 0), axis=0)
    before = edge + tl.sum(tl.where(pos == p0, prev, 0), axis=0)
    last_row = edge + tl.sum(tl.where(pos == last, row, 0), axis=0)
    after = edge + tl.sum(tl.where(pos == last, nxt, 0), axis=0)
    valid = live & (row < num_rows)  # num_rows: the out-of-range sentinel, sorted last, never updated

    cols = tl.arange(0, BLOCK_D)
    col_mask = cols < D
    e = tl.load(order_ptr + pos, mask=valid, other=0)  # entry index into the flat ids
    if FIXED_BAG:
        bag = e // bag_size
    else:
        bag = tl.load(bag_of_entry_ptr + e, mask=valid, other=0)
    tile_mask = valid[:, None] & col_mask[None, :]
    v = _entry_gradient(
        grad_ptr, offsets_ptr, bag, valid, tile_mask, cols, bag_size, stride_g, FIXED_BAG, MEAN
    )
    # Each run's sum inside the block, at every position of the run: S = M·V with M[i, j] = 1 where positions
    # i and j hold the same row. A 0/1 matrix times fp32 values in fp32 ("ieee": no TF32 rounding of V), a
    # fixed summation order, and a tl.dot the interpreter runs as one matmul (a scan runs element by element).
    same_run = (row[:, None] == row[None, :]).to(tl.float32)
    sums = tl.dot(same_run, v, input_precision="ieee")
    ends = valid & ((pos == last) | (row != nxt))  # one position per run: where its update is applied
    begun_before = (row == first_row) & (first_row == before)
    goes_on = (row == last_row) & (last_row == after)

    lr = tl.load(lr_ptr)
    whole = ends & ~begun_before & ~goes_on
    _apply_update(weight_ptr, state_ptr, lr, row, sums, whole, D, eps, stride_w, cols, col_mask, ADAGRAD)

    slot = partials_ptr + b.to(tl.int64) * 2 * D + (edge[:, None] + cols[None, :])  # one lane writes each
    tl.store(slot, sums, mask=(ends & begun_before)[:, None] & col_mask[None, :])
    tl.store(slot + D, sums, mask=(ends & goes_on & ~begun_before)[:, None] & col_mask[None, :])
    head = (last_row < num_rows) & (last_row == after) & ~((last_row == first_row) & (first_row == before))
    through = (first_row == before) & (last_row == after) & (first_row == last_row)
    flag = head.to(tl.int32) * HEAD + through.to(tl.int32) * THROUGH  # the same in every lane
    tl.store(flags_ptr + b + tl.zeros_like(pos), flag, mask=pos == p0)


@triton.jit
def _tbe_cross_block_update_kernel(
    weight_ptr, state_ptr, lr_ptr, sorted_rows_ptr, partials_ptr, flags_ptr,
    nnz, num_blocks, D, eps, stride_w,
    ADAGRAD: tl.constexpr, BLOCK_P: tl.constexpr, HEADS: tl.constexpr, BLOCK_D: tl.constexpr,
):  # fmt: skip
    # HEADS blocks per program. A block flagged HEAD starts a run that goes on into the next blocks: add the
    # partial sums of the blocks it crosses, in block order (the same sum every run), and update its row.
    blk = tl.program_id(0) * HEADS + tl.arange(0, HEADS)
    head = (tl.load(flags_ptr + blk, mask=blk < num_blocks, other=0) & HEAD) != 0
    row = tl.load(sorted_rows_ptr + tl.minimum((blk.to(tl.int64) + 1) * BLOCK_P, nnz) - 1, mask=head, other=0)
    cols = tl.arange(0, BLOCK_D)
    col_mask = cols < D
    parts = partials_ptr + cols[None, :]
    g = tl.load(
        parts + (blk.to(tl.int64) * 2 + 1)[:, None] * D, mask=head[:, None] & col_mask[None, :], other=0.0
    )
    k = blk.to(tl.int64) + 1  # the run's next block: it exists, since the run goes on
    on = head
    while tl.max(on.to(tl.int32), axis=0) > 0:
        g += tl.load(parts + (k * 2)[:, None] * D, mask=on[:, None] & col_mask[None, :], other=0.0)
        on = on & ((tl.load(flags_ptr + k, mask=on, other=0) & THROUGH) != 0)
        k += 1
    lr = tl.load(lr_ptr)
    _apply_update(weight_ptr, state_ptr, lr, row, g, head, D, eps, stride_w, cols, col_mask, ADAGRAD)


def _forward(weight, table_offsets, flat, offsets, B: int, bag_size: int, mean: bool) -> torch.Tensor:
    F = table_offsets.numel() - 1
    D = weight.shape[1]
    out = torch.empty((B, F, D), device=weight.device, dtype=weight.dtype)
    num_bags = B * F
    if num_bags == 0 or D == 0:
        return out
    fixed = offsets is None
    args = (weight, table_offsets, flat, flat if fixed else offsets, out,
            num_bags, flat.numel(), weight.shape[0], F, D, bag_size, weight.stride(0), D)  # fmt: skip
    constexprs = (("FIXED_BAG", fixed), ("MEAN", mean), ("BLOCK_BAGS", BLOCK_BAGS), ("BLOCK_D", next_pow2(D)))
    _launch_fwd((cdiv(num_bags, BLOCK_BAGS),), args, constexprs, 1 if D <= 32 else 4, 3)
    return out


def _segment_block(D: int) -> int:
    """Sorted positions per block of the update kernel: 64 (a [64, 64] run mask) down to 16 for wide rows."""
    return max(16, min(64, 1024 // next_pow2(D)))


def _update(grad, weight, table_offsets, flat, offsets, state, lr, bag_size, mean, adagrad, eps,
            deterministic, exchange=None) -> None:  # fmt: skip
    """Sort the entries by row, sum each run of equal rows, apply the optimizer to each touched row once."""
    fixed = offsets is None
    nnz, F, D, R = flat.numel(), table_offsets.numel() - 1, weight.shape[1], weight.shape[0]
    if nnz == 0 or D == 0:
        return
    grad = grad.reshape(-1, D).contiguous()  # [B·F, D]: row k is bag k's upstream gradient
    if exchange is not None:  # e.g. every data-parallel rank's entries, in rank order (fixed bags)
        flat, grad = exchange(flat, grad)
        nnz = flat.numel()
    bags = None if fixed else feature_of_entry(flat, offsets, F, bag_size)[1]
    bag_size = max(bag_size, 1)
    bag_of_entry = flat if bags is None else bags
    bag_ends = flat if offsets is None else offsets
    modes = (("FIXED_BAG", fixed), ("MEAN", mean))
    if not deterministic:  # SGD by atomic adds: one launch (the module docstring)
        args = (weight, table_offsets, flat, bag_of_entry, bag_ends, grad, lr,
                nnz, R, F, D, bag_size, weight.stride(0), grad.stride(0))  # fmt: skip
        block = max(16, 2048 // next_pow2(D))
        constexprs = (*modes, ("BLOCK", block), ("BLOCK_D", next_pow2(D)))
        _launch_atomic((cdiv(nnz, block),), args, constexprs, 4, 1)
        return
    key_dtype = torch.int32 if R < 2**31 - 1 else torch.int64  # int32 keys: half the radix sort's passes
    rows = torch.empty(nnz, dtype=key_dtype, device=flat.device)
    rows_args = (flat, table_offsets, bag_of_entry, rows, nnz, F, bag_size, R)
    _launch_rows((cdiv(nnz, 1024),), rows_args, (("FIXED_BAG", fixed), ("BLOCK", 1024)), 4, 3)
    sorted_rows, order = torch.sort(rows, stable=True)
    block_p, block_d = _segment_block(D), dot_block(D)  # tl.dot: every tile dimension >= 16
    blocks = cdiv(nnz, block_p)
    partials = torch.empty((blocks, 2, D), dtype=torch.float32, device=flat.device)
    flags = torch.empty(blocks, dtype=torch.int32, device=flat.device)
    state_or_weight = state if adagrad else weight
    sizes = (("BLOCK_P", block_p), ("BLOCK_D", block_d))
    args = (weight, state_or_weight, lr, sorted_rows, order, bag_of_entry, bag_ends, grad, partials, flags,
            nnz, R, D, bag_size, eps, weight.stride(0), grad.stride(0))  # fmt: skip
    _launch_blocks((blocks,), args, (*modes, ("ADAGRAD", adagrad), *sizes), 4, 3)
    args = (weight, state_or_weight, lr, sorted_rows, partials, flags,
            nnz, blocks, D, eps, weight.stride(0))  # fmt: skip
    constexprs = (("ADAGRAD", adagrad), ("HEADS", CROSS_HEADS), *sizes)  # any order: named
    _launch_cross((cdiv(blocks, CROSS_HEADS),), args, constexprs, 1, 3)


# Launches cached per exact arguments (kernels.fast_launch): its doc has the host time saved per launch.
_launch_fwd = CachedLauncher(_tbe_fwd_kernel)
_launch_rows = CachedLauncher(_tbe_rows_kernel)
_launch_blocks = CachedLauncher(_tbe_block_update_kernel)
_launch_cross = CachedLauncher(_tbe_cross_block_update_kernel)
_launch_atomic = CachedLauncher(_tbe_atomic_sgd_kernel)


# ---- the ops (kernels.library): fused_kernels::embedding_tbe and fused_kernels::embedding_tbe_update ------
# The lookup op takes a *trigger*: a 0-element tensor. With an optimizer it is _TRIGGER, a leaf that requires
# grad, so the output requires grad and autograd calls the registered backward, which runs the update op
# (it mutates weight and state: declared) and returns no gradient; the weight itself stays out of autograd.
# One CPU leaf for every device: 0 elements, never read, never given a .grad. Without an optimizer the
# trigger is _NO_TRIGGER and the lookup is a plain op. Value checks (ids, offsets: a host sync) and the
# address check of the weight run inside the op, at run time, also under torch.compile.
_TRIGGER = torch.zeros(0, requires_grad=True)
_NO_TRIGGER = torch.zeros(0)


def _fake_lookup(trigger, weight, table_offsets, flat, offsets, state, lr, B, bag_size, mean, adagrad, eps,
                 deterministic, check_ids):  # fmt: skip
    return weight.new_empty((B, table_offsets.shape[0] - 1, weight.shape[1]))


@custom_op(
    "embedding_tbe",
    "(Tensor trigger, Tensor weight, Tensor table_offsets, Tensor flat, Tensor? offsets, Tensor? state, "
    "Tensor? lr, int B, int bag_size, bool mean, bool adagrad, float eps, bool deterministic, "
    "bool check_ids) -> Tensor",
    fake=_fake_lookup,
)
def _lookup_op(trigger, weight, table_offsets, flat, offsets, state, lr, B, bag_size, mean, adagrad, eps,
               deterministic, check_ids):  # fmt: skip
    """The pooled lookup ``[B, F, D]`` on checked shapes; ``lr`` None: no optimizer. Runs the checks that
    read values or addresses first."""
    _check_values(weight, table_offsets, flat, offsets, bag_size, check_ids)
    if lr is not None:
        check_written(weight, state if adagrad else None, lr)
    return _forward(weight, table_offsets, flat, offsets, B, bag_size, mean)


@custom_op(
    "embedding_tbe_update",
    "(Tensor grad, Tensor(a!) weight, Tensor(b!)? state, Tensor table_offsets, Tensor flat, Tensor? offsets, "
    "Tensor lr, int bag_size, bool mean, bool adagrad, float eps, bool deterministic) -> ()",
    mutates_args=("weight", "state"),
)
def _update_op(grad, weight, state, table_offsets, flat, offsets, lr, bag_size, mean, adagrad, eps,
               deterministic):  # fmt: skip
    """The optimizer step of the backward: the touched rows of ``weight`` (and ``state``) updated in place."""
    _update(
        grad, weight, table_offsets, flat, offsets, state, lr, bag_size, mean, adagrad, eps, deterministic
    )


def _setup_context(ctx, inputs, output):
    ctx.save_for_backward(*inputs[1:7])  # weight, table_offsets, flat, offsets, state, lr
    ctx.flags = inputs[8:13]  # bag_size, mean, adagrad, eps, deterministic


def _autograd_backward(ctx, grad):
    weight, table_offsets, flat, offsets, state, lr = ctx.saved_tensors
    if lr is not None:  # the update, in place; no gradient returned (the module docstring)
        _update_op(grad, weight, state, table_offsets, flat, offsets, lr, *ctx.flags)
    return (None,) * 14


_lookup_op.register_autograd(_autograd_backward, setup_context=_setup_context)


def _check_values(weight, table_offsets, flat, offsets, bag_size: int, check_ids: bool) -> None:
    """The checks that read values (a host sync on a GPU; never while capturing a CUDA graph)."""
    sync_ok = not capturing(weight)
    if check_ids and not sync_ok:
        raise RuntimeError(
            f"{FN}: check_ids=True needs a host sync, which CUDA graph capture forbids: pass check_ids=False "
            "(out-of-range ids then pool as zeros and update nothing; see the module docstring)"
        )
    if offsets is not None and sync_ok:
        check_offsets(offsets, flat.numel())
    if sync_ok and (check_ids or weight.device.type == "cpu" or debug_checks()):
        F = table_offsets.numel() - 1
        check_values(flat, offsets, table_offsets, F, bag_size, weight.shape[0], ids=check_ids)


class _TBEExchangeFunction(torch.autograd.Function):
    """With ``exchange`` (a Python callable, which no op schema can carry): the same lookup and update, the
    callable run between them in backward. torch.compile does not trace this path (see embedding_tbe)."""

    @staticmethod
    def forward(ctx, trigger, weight, table_offsets, flat, offsets, state, lr, B, bag_size, mean, adagrad,
                eps, deterministic, check_ids, exchange):  # fmt: skip
        ctx.flags = (bag_size, mean, adagrad, eps, deterministic, exchange)
        ctx.save_for_backward(weight, table_offsets, flat, offsets, state, lr)
        return _lookup_op(_NO_TRIGGER, weight, table_offsets, flat, offsets, state, lr, B, bag_size, mean,
                          adagrad, eps, deterministic, check_ids)  # fmt: skip

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        weight, table_offsets, flat, offsets, state, lr = ctx.saved_tensors
        _update(grad, weight, table_offsets, flat, offsets, state, lr, *ctx.flags)
        return (None,) * 15


def _apply_with_exchange(*args):
    return _TBEExchangeFunction.apply(*args)


@functools.cache
def _with_exchange():
    """:func:`_apply_with_exchange` kept out of torch.compile's graphs; made on first use, since
    ``torch.compiler.disable`` imports the compiler's tracer (2.4 s of every process's start otherwise)."""
    return torch.compiler.disable(_apply_with_exchange)


def embedding_tbe(
    weight: torch.Tensor,
    table_offsets: torch.Tensor,
    ids: torch.Tensor,
    offsets: torch.Tensor | None = None,
    *,
    pooling: str = "sum",
    optimizer: str | None = None,
    lr: torch.Tensor | float | None = None,
    state: torch.Tensor | None = None,
    eps: float = 1e-8,
    check_ids: bool = True,
    deterministic: bool = True,
    exchange=None,
) -> torch.Tensor:
    """Pooled lookups of all ``F`` tables in one launch → ``[B, F, D]`` (functional form).

    ``weight [R, D]`` packed tables; ``table_offsets`` int64 ``[F+1]`` (:func:`table_offsets_for`); ``ids``
    int64 local ids ``[B, F]`` / ``[B, F, L]``, or flat ``[nnz]`` with ``offsets [B·F + 1]``.
    ``optimizer=None``: a plain lookup, no autograd. ``"sgd"`` / ``"rowwise_adagrad"``: the result requires
    grad, and its backward updates ``weight`` (and ``state``, fp32 ``[R]``, for Adagrad) in place with
    learning rate ``lr`` (a float, or a 1-element fp32 tensor on the weight's device, read at backward time).
    ``deterministic=False`` (SGD, fp32 weight): the update by atomic adds, no sort (the module docstring).
    ``exchange(ids, grad) -> (ids, grad)``: called in backward before the update, with this call's flat local
    ids and its upstream gradient rows ``[B·F, D]``; it may return more samples' worth of both (fixed bags
    only), e.g. every data-parallel rank's (:class:`lecture_code.training.data_parallel.RowExchange`).

    The ops ``fused_kernels::embedding_tbe`` (the lookup; with an optimizer, its autograd formula is the
    update) and ``fused_kernels::embedding_tbe_update`` (mutates ``weight`` and ``state``): torch.compile
    traces a training step through them with no graph break, the update in the compiled backward. One
    exception, a graph break by design: with ``exchange``, a Python callable that no op schema can carry (and
    that runs collectives in backward), the call runs outside the compiled graph (``torch.compiler.disable``).
    """
    if exchange is not None and offsets is not None:
        raise ValueError(f"{FN}: exchange needs fixed-size bags (ids [B, F] or [B, F, L]), got offsets")
    check_weight(weight, MAX_DIM)
    F = check_table_offsets(table_offsets, weight)
    if pooling not in POOLINGS:
        raise ValueError(f"{FN}: pooling {pooling!r} is not one of {POOLINGS}")
    if optimizer is not None:
        lr = check_optimizer_args(weight, optimizer, lr, state, eps, deterministic)
    check_tensor(FN, "ids", ids)
    check_device(FN, "ids", ids, weight, like="weight")
    if offsets is not None:
        check_tensor(FN, "offsets", offsets)
        check_device(FN, "offsets", offsets, weight, like="weight")
    flat, offsets, B, bag_size = bag_layout(ids, offsets, F)
    if B * F > launch.INT32_LIMIT - BLOCK_BAGS:  # the forward numbers bags in int32
        raise ValueError(f"{FN}: B*F = {B}*{F} bags is above the kernel's int32 bag numbers (< 2**31); "
                         "split the batch")  # fmt: skip
    mean = pooling == "mean"
    if optimizer is None:
        return _lookup_op(_NO_TRIGGER, weight, table_offsets, flat, offsets, None, None, B, bag_size, mean,
                          False, 0.0, True, check_ids)  # fmt: skip
    adagrad = optimizer == "rowwise_adagrad"
    args = (weight, table_offsets, flat, offsets, state if adagrad else None, lr, B, bag_size, mean, adagrad,
            float(eps), deterministic, check_ids)  # fmt: skip
    if exchange is not None:
        return _with_exchange()(_TRIGGER, *args, exchange)
    return _lookup_op(_TRIGGER, *args)


class TableBatchedEmbedding(torch.nn.Module):
    """``F`` embedding tables in one packed buffer, looked up in one launch, trained by a fused optimizer.

    Args:
        table_sizes: ``n_f`` rows per table. dim: ``D``. optimizer: ``"sgd"`` or ``"rowwise_adagrad"``.
        lr, eps: the optimizer's (``lr`` settable later: ``module.lr = x`` fills ``lr_tensor``).
        pooling: ``"sum"`` or ``"mean"`` over a bag. check_ids, deterministic: see the module docstring
            (``deterministic=False``: SGD by atomic adds, no sort; settable later as an attribute).

    Buffers (all in ``state_dict`` but ``lr_tensor`` and ``table_offsets``): ``weight [R, D]`` (the packed
    tables, updated in place by backward), ``momentum [R]`` fp32 (row-wise Adagrad only), ``table_offsets``
    int64 ``[F+1]``. Checkpoints interchangeable with ``SparseArch``'s list of ``nn.Embedding``:
    :meth:`embedding_state_dict` and :meth:`load_embedding_state_dict`.
    """

    def __init__(
        self,
        table_sizes: Sequence[int],
        dim: int,
        optimizer: str = "sgd",
        lr: float = 0.01,
        eps: float = 1e-8,
        pooling: str = "sum",
        check_ids: bool = True,
        dtype: torch.dtype = torch.float32,
        device=None,
        deterministic: bool = True,
    ):
        super().__init__()
        name = "TableBatchedEmbedding"
        self.table_sizes = tuple(int(n) for n in table_sizes)
        if not self.table_sizes or min(self.table_sizes) < 1:
            raise ValueError(f"{name}: need >= 1 table of >= 1 row, got {self.table_sizes}")
        if not isinstance(dim, int) or not 1 <= dim <= MAX_DIM:
            raise ValueError(f"{name}: dim must be an int in 1..{MAX_DIM} (MAX_DIM), got {dim!r}")
        if dtype not in SUPPORTED_DTYPES:
            raise TypeError(f"{name}: dtype {dtype} is not supported (use float32, float16 or bfloat16)")
        if not isinstance(lr, numbers.Real):
            raise TypeError(f"{name}: lr must be a number, got {type(lr).__name__}")
        if not isinstance(eps, numbers.Real) or not eps >= 0:
            raise ValueError(f"{name}: eps must be a number >= 0, got {eps!r}")
        if optimizer not in OPTIMIZERS:
            raise ValueError(f"{name}: optimizer {optimizer!r} is not one of {OPTIMIZERS}")
        if pooling not in POOLINGS:
            raise ValueError(f"{name}: pooling {pooling!r} is not one of {POOLINGS}")
        self.dim, self.optimizer, self.eps = dim, optimizer, eps
        self.pooling, self.check_ids, self.deterministic = pooling, check_ids, deterministic
        self.exchange = None  # settable: see embedding_tbe's exchange (data-parallel training)
        total = sum(self.table_sizes)
        self.register_buffer("weight", torch.empty(total, dim, dtype=dtype, device=device))
        self.register_buffer("table_offsets", table_offsets_for(self.table_sizes, device), persistent=False)
        self.register_buffer("lr_tensor", torch.full((1,), float(lr), device=device), persistent=False)
        if optimizer == "rowwise_adagrad":
            self.register_buffer("momentum", torch.zeros(total, dtype=torch.float32, device=device))
        else:
            self.momentum = None
        self.reset_parameters()

    @property
    def lr(self) -> float:
        return float(self.lr_tensor[0])

    @lr.setter
    def lr(self, value: float) -> None:
        self.lr_tensor.fill_(float(value))  # in place: a captured CUDA graph reads the new value

    @property
    def num_features(self) -> int:
        return len(self.table_sizes)

    def reset_parameters(self) -> None:
        """DLRM's init, table by table: ``Uniform(-sqrt(1/n_f), sqrt(1/n_f))``; Adagrad state to 0."""
        with torch.no_grad():
            for w, n in zip(self.embedding_weights(), self.table_sizes, strict=True):
                w.uniform_(-((1.0 / n) ** 0.5), (1.0 / n) ** 0.5)
            if self.momentum is not None:
                self.momentum.zero_()

    def embedding_weights(self) -> list[torch.Tensor]:
        """The ``F`` tables as views ``[n_f, D]`` into the packed weight (writes go through)."""
        return list(torch.split(self.weight, self.table_sizes, dim=0))

    def embedding_state_dict(self, prefix: str = "") -> dict[str, torch.Tensor]:
        """``{f"{prefix}{f}.weight": [n_f, D]}``: the keys of an ``nn.ModuleList`` of ``nn.Embedding``
        (``prefix="sparse_arch.embeddings."`` gives a ``SparseArch``'s). Copies, safe to save."""
        return {f"{prefix}{f}.weight": w.detach().clone() for f, w in enumerate(self.embedding_weights())}

    def load_embedding_state_dict(self, state: dict[str, torch.Tensor], prefix: str = "") -> None:
        """Copy per-table weights (:meth:`embedding_state_dict`'s keys) into the packed buffer."""
        with torch.no_grad():
            for f, (w, n) in enumerate(zip(self.embedding_weights(), self.table_sizes, strict=True)):
                src = state[f"{prefix}{f}.weight"]
                if tuple(src.shape) != (n, self.dim):
                    raise ValueError(f"table {f}: expected shape ({n}, {self.dim}), got {tuple(src.shape)}")
                w.copy_(src)

    @classmethod
    def from_embeddings(cls, embeddings: Sequence[torch.nn.Embedding | torch.Tensor], **kwargs):
        """A TBE holding copies of these tables (``nn.Embedding`` modules or ``[n_f, D]`` tensors)."""
        weights = [e.weight if isinstance(e, torch.nn.Module) else e for e in embeddings]
        kwargs.setdefault("dtype", weights[0].dtype)
        kwargs.setdefault("device", weights[0].device)
        tbe = cls([w.shape[0] for w in weights], weights[0].shape[1], **kwargs)
        tbe.load_embedding_state_dict({f"{f}.weight": w for f, w in enumerate(weights)})
        return tbe

    def forward(self, ids: torch.Tensor, offsets: torch.Tensor | None = None) -> torch.Tensor:
        """Local ids ``[B, F]`` / ``[B, F, L]`` (or flat ``[nnz]`` + ``offsets [B·F+1]``) → ``[B, F, D]``.

        Under ``torch.is_grad_enabled()`` and ``self.training`` the result requires grad and its backward
        updates the tables; otherwise it is a plain lookup.
        """
        train = self.training and torch.is_grad_enabled()
        return embedding_tbe(
            self.weight, self.table_offsets, ids, offsets,
            pooling=self.pooling, optimizer=self.optimizer if train else None, lr=self.lr_tensor,
            state=self.momentum, eps=self.eps, check_ids=self.check_ids, deterministic=self.deterministic,
            exchange=self.exchange,
        )  # fmt: skip

    def extra_repr(self) -> str:
        return (
            f"num_features={self.num_features}, rows={self.weight.shape[0]}, dim={self.dim}, "
            f"optimizer={self.optimizer}, pooling={self.pooling}"
            + ("" if self.deterministic else ", deterministic=False")
        )
