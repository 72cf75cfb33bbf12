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

1. Host (torch, no sync): global row per entry (out-of-range entries get the sentinel ``R``), a *stable*
   ``torch.sort`` → ``sorted_rows``, ``order``; ``run_end[i] = searchsorted(sorted_rows, sorted_rows[i],
   right=True)``: where the run of equal rows that contains position ``i`` ends.
2. Kernel: one program per sorted position. Only the first position of each run (the *leader*) works: it
   sums the run's gradients in sorted (= stable, input) order in fp32 and applies the update to its row
   once. Each touched row is read and written by exactly one program: no atomics, and the same bits every run.

Cost of that choice: a sort of nnz int64 keys (≈ 20–30 µs for 53k keys on an H100 through cub, an estimate
to be measured), and a hot row's whole run is summed by one program serially (a Zipf head row seen 1000 times
is 1000 sequential D-vector loads). The alternative, ``tl.atomic_add`` of each entry's gradient into a dense
``[R, D]`` gradient (or into the weight, for SGD), needs no sort but is non-deterministic in float (arrival
order) and cannot do Adagrad's per-row ``mean(g²)`` without a second pass over a dense buffer
(2 GiB for the Kaggle tables).
Bytes: read nnz·8 (sort keys, order) + nnz·D·s (gradient rows, gathered) + U·D·s (the U unique rows), write
U·D·s (+ U·4 read and written for the Adagrad state).

Out-of-range ids (``id < 0`` or ``id ≥ n_f``). ``check_ids=True`` (the default) checks once per call, outside
the kernels: one fused torch reduction over the ids plus ONE device→host sync (``bool(bad.any())``,
≈ 10–20 µs on a GPU), and raises ``IndexError`` naming the feature and the bad value. A CUDA-graph step
(no host sync allowed) passes ``check_ids=False``: the kernels then still never touch memory outside the
table — an out-of-range entry pools as zeros and updates nothing — but no error is raised. Ids that come
from :class:`~lecture_code.model.hashing.BatchedModulusHash` are in range by construction.

Autograd. The packed weight is *not* a leaf that receives ``.grad``: the backward has already applied the
update, and returns ``None`` for it. The module keeps ``weight`` as a buffer (not a parameter), so an outer
``torch.optim`` optimizer built from ``model.parameters()`` (the MLPs) never sees it, and DDP does not
all-reduce it. Consequences: each ``backward()`` applies one update at once (gradient accumulation over
micro-batches becomes one update per micro-batch); ``zero_grad`` has nothing to clear here; the learning rate
lives in a 1-element device tensor (``lr_tensor``) that a schedule, or a CUDA-graph replay, reads each step.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import triton
import triton.language as tl

from kernels.launch import cdiv, check_device, next_pow2

__all__ = ["OPTIMIZERS", "POOLINGS", "TableBatchedEmbedding", "embedding_tbe", "table_offsets_for"]

OPTIMIZERS = ("sgd", "rowwise_adagrad")
POOLINGS = ("sum", "mean")
BLOCK_BAGS = 16  # bags per forward program: a [16, D] tile per gather step


@triton.jit
def _tbe_fwd_kernel(
    weight_ptr, table_offsets_ptr, indices_ptr, offsets_ptr, out_ptr,
    num_bags, F, D, bag_size, stride_w, stride_o,
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
        start = tl.load(offsets_ptr + bags64, mask=bag_mask, other=0)
        length = tl.load(offsets_ptr + bags64 + 1, mask=bag_mask, other=0) - start
    cols = tl.arange(0, BLOCK_D)
    col_mask = cols < D
    acc = tl.zeros([BLOCK_BAGS, BLOCK_D], dtype=tl.float32)
    for j in range(0, tl.max(length, axis=0)):  # the longest bag of this block; shorter ones are masked
        live = j < length
        ids = tl.load(indices_ptr + start + j, mask=live, other=0)
        ok = live & (ids >= 0) & (ids < table_rows)  # out-of-range ids pool as zeros, never read outside
        rows = row_base + ids
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
def _tbe_bwd_update_kernel(
    weight_ptr, state_ptr, lr_ptr, sorted_rows_ptr, run_end_ptr, order_ptr, bag_of_entry_ptr, offsets_ptr,
    grad_ptr, num_rows, D, bag_size, eps, stride_w, stride_g,
    FIXED_BAG: tl.constexpr, MEAN: tl.constexpr, ADAGRAD: tl.constexpr, BLOCK_D: tl.constexpr,
):  # fmt: skip
    # One program per sorted position i; only a run's leader (first position of a row) does the work.
    i = tl.program_id(0)
    row = tl.load(sorted_rows_ptr + i)
    prev = tl.load(sorted_rows_ptr + i - 1, mask=i > 0, other=-1)
    if (row != prev) & (row < num_rows):  # leader of a valid row (row == num_rows: out-of-range sentinel)
        cols = tl.arange(0, BLOCK_D)
        col_mask = cols < D
        end = tl.load(run_end_ptr + i)
        g = tl.zeros([BLOCK_D], dtype=tl.float32)
        for j in range(i, end):  # the run, in stable-sort (input) order: the same sum every time
            e = tl.load(order_ptr + j)  # entry index into the flat ids
            if FIXED_BAG:
                bag = e // bag_size
            else:
                bag = tl.load(bag_of_entry_ptr + e)
            dout = tl.load(grad_ptr + bag * stride_g + cols, mask=col_mask, other=0.0).to(tl.float32)
            if MEAN:
                if FIXED_BAG:
                    n = bag_size
                else:
                    n = tl.load(offsets_ptr + bag + 1) - tl.load(offsets_ptr + bag)
                dout = dout / n  # n >= 1: this entry belongs to the bag (n may be a constexpr 1)
            g += dout
        lr = tl.load(lr_ptr)
        w_ptrs = weight_ptr + row * stride_w + cols
        w = tl.load(w_ptrs, mask=col_mask, other=0.0).to(tl.float32)
        if ADAGRAD:
            m = tl.load(state_ptr + row) + tl.sum(g * g, axis=0) / D  # masked lanes hold 0
            tl.store(state_ptr + row, m)
            w = w - lr * g / (tl.sqrt(m) + eps)
        else:
            w = w - lr * g
        tl.store(w_ptrs, w.to(weight_ptr.dtype.element_ty), mask=col_mask)


def table_offsets_for(table_sizes: Sequence[int], device=None) -> torch.Tensor:
    """int64 ``[F+1]``: ``[0, n_0, n_0+n_1, …, R]``, where table ``f``'s rows start in the packed weight."""
    sizes = torch.tensor([int(n) for n in table_sizes], dtype=torch.int64)
    return torch.cat([sizes.new_zeros(1), sizes.cumsum(0)]).to(device)


def _bag_layout(ids: torch.Tensor, offsets: torch.Tensor | None, F: int):
    """(flat local ids [nnz], offsets or None, B, bag_size) from either input form (see the docstring)."""
    if ids.dtype != torch.int64:
        raise TypeError(f"embedding_tbe: ids must be int64, got {ids.dtype}")
    if offsets is None:
        if ids.dim() not in (2, 3) or ids.shape[1] != F:
            raise ValueError(f"embedding_tbe: ids must be [B, {F}] or [B, {F}, L], got {tuple(ids.shape)}")
        bag_size = 1 if ids.dim() == 2 else ids.shape[2]
        return ids.reshape(-1).contiguous(), None, ids.shape[0], bag_size
    if offsets.dtype != torch.int64 or offsets.dim() != 1 or ids.dim() != 1:
        raise ValueError("embedding_tbe: with offsets, ids must be 1-D and offsets 1-D int64 [B*F + 1]")
    if (offsets.numel() - 1) % F != 0 or offsets.numel() < 1:
        raise ValueError(f"embedding_tbe: offsets has {offsets.numel()} entries, expected B*{F} + 1")
    return ids.contiguous(), offsets.contiguous(), (offsets.numel() - 1) // F, 0


def _feature_of_entry(flat: torch.Tensor, offsets, F: int, bag_size: int):
    """(feature [nnz], bag [nnz] or None) of every flat entry, with torch ops and no host sync."""
    nnz = flat.numel()
    if offsets is None:
        return (torch.arange(nnz, device=flat.device) // bag_size) % F, None
    lengths = offsets[1:] - offsets[:-1]
    bag_ids = torch.arange(lengths.numel(), device=flat.device)
    bags = torch.repeat_interleave(bag_ids, lengths, output_size=nnz)  # output_size: no host sync
    return bags % F, bags


def _check_ids(flat, offsets, table_offsets, F: int, bag_size: int) -> None:
    """One reduction + one host sync: raise IndexError on the first id outside its table."""
    if flat.numel() == 0:
        return
    feature, _ = _feature_of_entry(flat, offsets, F, bag_size)
    sizes = table_offsets[1:] - table_offsets[:-1]
    bad = (flat < 0) | (flat >= sizes[feature])
    if bool(bad.any()):  # the one sync
        e = int(bad.nonzero()[0, 0])
        f = int(feature[e])
        raise IndexError(
            f"embedding_tbe: id {int(flat[e])} of feature {f} is out of range for its table of "
            f"{int(sizes[f])} rows (entry {e} of the flat ids)"
        )


def _forward(weight, table_offsets, flat, offsets, B: int, bag_size: int, mean: bool) -> torch.Tensor:
    F = table_offsets.numel() - 1
    D = weight.shape[1]
    out = torch.empty((B, F, D), device=weight.device, dtype=weight.dtype)
    num_bags = B * F
    if num_bags == 0 or D == 0:
        return out
    fixed = offsets is None
    _tbe_fwd_kernel[(cdiv(num_bags, BLOCK_BAGS),)](
        weight, table_offsets, flat, flat if fixed else offsets, out,
        num_bags, F, D, bag_size, weight.stride(0), D,
        FIXED_BAG=fixed, MEAN=mean, BLOCK_BAGS=BLOCK_BAGS, BLOCK_D=next_pow2(D),
        num_warps=1 if D <= 32 else 4,
    )  # fmt: skip
    return out


def _backward_update(ctx, grad: torch.Tensor) -> None:
    """Sort + segment-reduce the per-entry gradients and apply the optimizer to each touched row once."""
    weight, table_offsets, flat, offsets, state, lr = ctx.saved_tensors
    offsets = None if ctx.fixed else offsets
    nnz, F, D, R = flat.numel(), table_offsets.numel() - 1, weight.shape[1], weight.shape[0]
    if nnz == 0 or D == 0:
        return
    grad = grad.reshape(-1, D).contiguous()  # [B·F, D]: row k is bag k's upstream gradient
    feature, bags = _feature_of_entry(flat, offsets, F, ctx.bag_size)
    sizes = table_offsets[1:] - table_offsets[:-1]
    valid = (flat >= 0) & (flat < sizes[feature])
    rows = torch.where(valid, table_offsets[feature] + flat, R)  # R: the sentinel, sorts last, skipped
    sorted_rows, order = torch.sort(rows, stable=True)
    run_end = torch.searchsorted(sorted_rows, sorted_rows, right=True)
    _tbe_bwd_update_kernel[(nnz,)](
        weight, state if ctx.adagrad else weight, lr, sorted_rows, run_end, order,
        flat if bags is None else bags, flat if offsets is None else offsets, grad,
        R, D, max(ctx.bag_size, 1), ctx.eps, weight.stride(0), grad.stride(0),
        FIXED_BAG=ctx.fixed, MEAN=ctx.mean, ADAGRAD=ctx.adagrad, BLOCK_D=next_pow2(D), num_warps=1,
    )  # fmt: skip


class _TBEFunction(torch.autograd.Function):
    """Forward: the pooled lookup. Backward: the fused optimizer update, in place; no gradient returned."""

    @staticmethod
    def forward(
        ctx, trigger, weight, table_offsets, flat, offsets, state, lr, B, bag_size, mean, adagrad, eps
    ):
        ctx.fixed, ctx.bag_size, ctx.mean = offsets is None, bag_size, mean
        ctx.adagrad, ctx.eps = adagrad, eps
        ctx.save_for_backward(weight, table_offsets, flat, offsets, state, lr)
        return _forward(weight, table_offsets, flat, offsets, B, bag_size, mean)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        _backward_update(ctx, grad)
        return (None,) * 12  # the weight got its update, not a gradient


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
) -> torch.Tensor:
    """Pooled lookups of all ``F`` tables in one launch → ``[B, F, D]`` (functional form).

    ``weight [R, D]`` packed tables; ``table_offsets`` int64 ``[F+1]`` (:func:`table_offsets_for`); ``ids``
    int64 local ids ``[B, F]`` / ``[B, F, L]``, or flat ``[nnz]`` with ``offsets [B·F + 1]``.
    ``optimizer=None``: a plain lookup, no autograd. ``"sgd"`` / ``"rowwise_adagrad"``: the result requires
    grad, and its backward updates ``weight`` (and ``state``, fp32 ``[R]``, for Adagrad) in place with
    learning rate ``lr`` (a float, or a 1-element fp32 tensor on the weight's device, read at backward time).
    """
    F = table_offsets.numel() - 1
    if weight.dim() != 2:
        raise ValueError(f"embedding_tbe: weight must be [R, D], got {tuple(weight.shape)}")
    if pooling not in POOLINGS:
        raise ValueError(f"embedding_tbe: pooling {pooling!r} is not one of {POOLINGS}")
    if table_offsets.dtype != torch.int64 or F < 1:
        raise ValueError("embedding_tbe: table_offsets must be int64 [F+1] with F >= 1")
    for name, t in (("table_offsets", table_offsets), ("ids", ids), ("offsets", offsets), ("state", state)):
        if t is not None:
            check_device("embedding_tbe", name, t, weight)
    flat, offsets, B, bag_size = _bag_layout(ids, offsets, F)
    if check_ids:
        _check_ids(flat, offsets, table_offsets, F, bag_size)
    mean = pooling == "mean"
    if optimizer is None:
        return _forward(weight, table_offsets, flat, offsets, B, bag_size, mean)
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"embedding_tbe: optimizer {optimizer!r} is not one of {OPTIMIZERS} (or None)")
    adagrad = optimizer == "rowwise_adagrad"
    if adagrad and (state is None or state.shape != (weight.shape[0],) or state.dtype != torch.float32):
        raise ValueError(f"embedding_tbe: rowwise_adagrad needs state, fp32 [{weight.shape[0]}]")
    if lr is None:
        raise ValueError("embedding_tbe: an optimizer needs lr")
    if not isinstance(lr, torch.Tensor):
        lr = torch.full((1,), float(lr), device=weight.device, dtype=torch.float32)
    # A 0-element leaf that requires grad: it makes the output require grad, so autograd calls our backward,
    # while the weight itself stays out of autograd (it receives an update, not a .grad).
    trigger = torch.zeros(0, requires_grad=True)
    return _TBEFunction.apply(
        trigger, weight, table_offsets, flat, offsets, state, lr, B, bag_size, mean, adagrad, float(eps)
    )


class TableBatchedEmbedding(torch.nn.Module):
    """``F`` embedding tables in one packed buffer, looked up in one launch, trained by a fused optimizer.

    Args:
        table_sizes: ``n_f`` rows per table. dim: ``D``. optimizer: ``"sgd"`` or ``"rowwise_adagrad"``.
        lr, eps: the optimizer's (``lr`` settable later: ``module.lr = x`` fills ``lr_tensor``).
        pooling: ``"sum"`` or ``"mean"`` over a bag. check_ids: see the module docstring.

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
    ):
        super().__init__()
        self.table_sizes = tuple(int(n) for n in table_sizes)
        if not self.table_sizes or min(self.table_sizes) < 1:
            raise ValueError(f"TableBatchedEmbedding: need >= 1 table of >= 1 row, got {self.table_sizes}")
        if optimizer not in OPTIMIZERS:
            raise ValueError(f"TableBatchedEmbedding: optimizer {optimizer!r} is not one of {OPTIMIZERS}")
        if pooling not in POOLINGS:
            raise ValueError(f"TableBatchedEmbedding: pooling {pooling!r} is not one of {POOLINGS}")
        self.dim, self.optimizer, self.eps = dim, optimizer, eps
        self.pooling, self.check_ids = pooling, check_ids
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
            state=self.momentum, eps=self.eps, check_ids=self.check_ids,
        )  # fmt: skip

    def extra_repr(self) -> str:
        return (
            f"num_features={self.num_features}, rows={self.weight.shape[0]}, dim={self.dim}, "
            f"optimizer={self.optimizer}, pooling={self.pooling}"
        )
