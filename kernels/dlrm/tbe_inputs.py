"""The table-batched embedding's inputs: the two bag layouts, and every check its arguments get.

:mod:`kernels.dlrm.embedding_tbe` calls these before any kernel runs. What costs a device→host sync is
said at each check (ragged offsets, the ids' range); nothing syncs while a CUDA graph is being captured.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence

import torch

from kernels.gpu_features import TRITON_FLOOR, Needs, unmet
from kernels.launch import (
    MAX_TILE_ELEMENTS,
    check_device,
    check_dtype,
    check_output,
    check_tensor,
)

__all__ = [
    "FN",
    "OPTIMIZERS",
    "POOLINGS",
    "bag_layout",
    "capturing",
    "check_offsets",
    "check_optimizer_args",
    "check_table_offsets",
    "check_values",
    "check_weight",
    "check_written",
    "feature_of_entry",
    "table_offsets_for",
]

FN = "embedding_tbe"
OPTIMIZERS = ("sgd", "rowwise_adagrad")
POOLINGS = ("sum", "mean")


def table_offsets_for(table_sizes: Sequence[int], device=None) -> torch.Tensor:
    """int64 ``[F+1]``: ``[0, n_0, n_0+n_1, …, R]``, where table ``f``'s rows start in the packed weight."""
    sizes = torch.tensor([int(n) for n in table_sizes], dtype=torch.int64)
    return torch.cat([sizes.new_zeros(1), sizes.cumsum(0)]).to(device)


def bag_layout(ids: torch.Tensor, offsets: torch.Tensor | None, F: int):
    """(flat local ids [nnz], offsets or None, B, bag_size) from either input form (see the docstring)."""
    if ids.dtype != torch.int64:
        raise TypeError(f"{FN}: ids must be int64, got {ids.dtype}")
    if offsets is None:
        if ids.dim() not in (2, 3) or ids.shape[1] != F:
            raise ValueError(f"{FN}: ids must be [B, {F}] or [B, {F}, L], got {tuple(ids.shape)}")
        bag_size = 1 if ids.dim() == 2 else ids.shape[2]
        return ids.reshape(-1).contiguous(), None, ids.shape[0], bag_size
    check_tensor(FN, "offsets", offsets)
    if offsets.dtype != torch.int64:
        raise TypeError(f"{FN}: offsets must be int64, got {offsets.dtype}")
    if ids.dim() != 1:
        raise ValueError(f"{FN}: with offsets, ids must be 1-D [nnz] (the bags' ids one after another), got "
                         f"{tuple(ids.shape)}")  # fmt: skip
    if offsets.dim() != 1 or offsets.numel() < 1 or (offsets.numel() - 1) % F != 0:
        raise ValueError(f"{FN}: offsets must be 1-D [B*F + 1] = [B*{F} + 1], got shape "
                         f"{tuple(offsets.shape)}")  # fmt: skip
    return ids.contiguous(), offsets.contiguous(), (offsets.numel() - 1) // F, 0


def capturing(t: torch.Tensor) -> bool:
    """A CUDA graph is being captured on the current stream (no host sync allowed)."""
    return t.device.type == "cuda" and torch.cuda.is_current_stream_capturing()


def check_offsets(offsets: torch.Tensor, nnz: int) -> None:
    """Bag k is ids[offsets[k] : offsets[k+1]]: offsets must start at 0, never decrease and end at nnz.

    Cost: on a GPU one small reduction and one copy of three numbers to the host (a sync, ≈ 10–20 µs), on
    every call with ragged bags whatever ``check_ids`` is: a bad offset would make the backward's
    ``repeat_interleave`` fail on the device. Skipped while a CUDA graph is captured (no sync allowed; a
    replay's offsets are never seen by the host anyway): the forward kernel clamps every bag to the ids
    buffer, so unchecked offsets give wrong bags, never a read outside it.
    """
    down = offsets[1:] < offsets[:-1]
    first, last, decreasing = torch.stack((offsets[0], offsets[-1], down.any().long())).tolist()  # the sync
    if first != 0:
        raise ValueError(f"{FN}: offsets must start at 0 (bag k is ids[offsets[k]:offsets[k+1]]), got "
                         f"offsets[0] = {first}")  # fmt: skip
    if decreasing:
        k = int(down.nonzero()[0, 0])
        raise ValueError(f"{FN}: offsets must not decrease, got offsets[{k + 1}] = {int(offsets[k + 1])} < "
                         f"offsets[{k}] = {int(offsets[k])}")  # fmt: skip
    if last != nnz:
        raise ValueError(f"{FN}: offsets must end at ids.numel() = {nnz}, got offsets[-1] = {last}")


def feature_of_entry(flat: torch.Tensor, offsets, F: int, bag_size: int):
    """(feature [nnz], bag [nnz] or None) of every flat entry, with torch ops and no host sync."""
    nnz = flat.numel()
    if offsets is None:
        return (torch.arange(nnz, device=flat.device) // bag_size) % F, None
    lengths = offsets[1:] - offsets[:-1]
    bag_ids = torch.arange(lengths.numel(), device=flat.device)
    bags = torch.repeat_interleave(bag_ids, lengths, output_size=nnz)  # output_size: no host sync
    return bags % F, bags


def _preview(t: torch.Tensor, n: int = 8) -> str:
    values = t[:n].tolist()
    return str(values)[:-1] + (", …]" if t.numel() > n else "]")


def check_values(flat, offsets, table_offsets, F: int, bag_size: int, R: int, ids: bool) -> None:
    """table_offsets non-negative, non-decreasing and ≤ R; with ``ids``, every id inside its table. One
    reduction per check and ONE device→host sync for all of them; raise on the first that fails."""
    t = table_offsets
    flags = [(t[0] < 0) | (t[1:] < t[:-1]).any() | (t[-1] > R)]
    if ids and flat.numel():
        feature, _ = feature_of_entry(flat, offsets, F, bag_size)
        sizes = t[1:] - t[:-1]
        bad = (flat < 0) | (flat >= sizes[feature])
        flags.append(bad.any())
    bad_tables, *bad_ids = torch.stack(flags).tolist()  # the one sync
    if bad_tables:
        raise ValueError(
            f"{FN}: table_offsets must be non-decreasing, from >= 0 to <= weight.shape[0] = {R} (table f "
            f"owns weight rows table_offsets[f]:table_offsets[f+1]), got {_preview(t)}"
        )
    if bad_ids and bad_ids[0]:
        e = int(bad.nonzero()[0, 0])
        f = int(feature[e])
        raise IndexError(
            f"{FN}: id {int(flat[e])} of feature {f} is out of range for its table of "
            f"{int(sizes[f])} rows (entry {e} of the flat ids)"
        )


# What the TBE kernels need of a GPU (kernels.gpu_features): gathers, a [64, 64] fp32 tl.dot per update block
# and atomic adds, so Triton's floor, sm_80; small tiles (well under 32 KB of shared memory). No program waits
# on another: the cross-block kernel reads flags the block kernel, a launch earlier, wrote.
GPU_NEEDS = Needs("embedding_tbe's Triton kernels", TRITON_FLOOR, 32 * 1024)


def check_weight(weight, D_max: int) -> None:
    check_tensor(FN, "weight", weight)
    problem = unmet(GPU_NEEDS, weight.device)
    if problem is not None:
        raise RuntimeError(f"{FN}: {problem}; kernels.reference.embedding_tbe computes the same in torch")
    if weight.dim() != 2:
        raise ValueError(f"{FN}: weight must be [R, D] (the packed tables), got shape {tuple(weight.shape)}")
    check_dtype(FN, "weight", weight, weight, like="weight")
    check_device(FN, "weight", weight, weight, like="weight")
    if weight.shape[1] > 1 and weight.stride(1) != 1:
        raise ValueError(
            f"{FN}: weight must have contiguous rows (stride 1 along D), got strides {weight.stride()} for "
            f"shape {tuple(weight.shape)}; pass weight.contiguous() (a transposed view would give wrong rows)"
        )
    if weight.shape[1] > D_max:
        raise ValueError(
            f"{FN}: D = {weight.shape[1]} is above MAX_DIM = {D_max} (a row is one Triton block; the "
            f"cross-block update holds several rows at once, and Triton allows {MAX_TILE_ELEMENTS} elements "
            "per block)"
        )


def check_table_offsets(table_offsets, weight) -> int:
    """Shape, dtype, layout and device of table_offsets; returns F."""
    check_tensor(FN, "table_offsets", table_offsets)
    if table_offsets.dtype != torch.int64:
        raise TypeError(f"{FN}: table_offsets must be int64, got {table_offsets.dtype}")
    if table_offsets.dim() != 1 or table_offsets.numel() < 2:
        raise ValueError(
            f"{FN}: table_offsets must be 1-D [F+1] with F >= 1 tables (table_offsets_for(sizes)), got shape "
            f"{tuple(table_offsets.shape)}"
        )
    if table_offsets.stride(0) != 1:
        raise ValueError(
            f"{FN}: table_offsets must be contiguous, got stride {table_offsets.stride(0)}; pass "
            "table_offsets.contiguous()"
        )
    check_device(FN, "table_offsets", table_offsets, weight, like="weight")
    return table_offsets.numel() - 1


def check_optimizer_args(weight, optimizer: str, lr, state, eps, deterministic: bool) -> torch.Tensor:
    """The optimizer's arguments; returns lr as a 1-element fp32 tensor on the weight's device."""
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"{FN}: optimizer {optimizer!r} is not one of {OPTIMIZERS} (or None)")
    adagrad = optimizer == "rowwise_adagrad"
    if not deterministic and (adagrad or weight.dtype != torch.float32):
        raise ValueError(
            f"{FN}: deterministic=False (atomic adds) is for SGD on an fp32 weight, got optimizer "
            f"{optimizer!r} and weight {weight.dtype}: row-wise Adagrad needs each row's summed gradient "
            f"before its update, and 16-bit atomic adds would round at every add"
        )
    R = weight.shape[0]
    if adagrad:
        if state is None:
            raise ValueError(f"{FN}: rowwise_adagrad needs state, an fp32 [{R}] tensor (one value per row)")
        check_tensor(FN, "state", state)
        if state.dtype != torch.float32:
            raise TypeError(f"{FN}: state must be float32, got {state.dtype}")
        if state.shape != (R,):
            raise ValueError(f"{FN}: state must have shape ({R},) (one value per weight row), got "
                             f"{tuple(state.shape)}")  # fmt: skip
        if R > 1 and state.stride(0) != 1:
            raise ValueError(f"{FN}: state must be contiguous, got stride {state.stride(0)}")
        check_device(FN, "state", state, weight, like="weight")
    if lr is None:
        raise ValueError(f"{FN}: an optimizer needs lr (a float, or a 1-element float32 tensor)")
    if isinstance(lr, torch.Tensor):
        check_device(FN, "lr", lr, weight, like="weight")
        if lr.dtype != torch.float32:
            raise TypeError(f"{FN}: an lr tensor must be float32, got {lr.dtype}")
        if lr.numel() != 1:
            raise ValueError(f"{FN}: an lr tensor must have 1 element, got shape {tuple(lr.shape)}")
    elif isinstance(lr, numbers.Real):
        lr = torch.full((1,), float(lr), device=weight.device, dtype=torch.float32)
    else:
        raise TypeError(f"{FN}: lr must be a float or a 1-element float32 tensor, got {type(lr).__name__}")
    if not isinstance(eps, numbers.Real) or not eps >= 0:
        raise ValueError(f"{FN}: eps must be a number >= 0, got {eps!r}")
    return lr


def check_written(weight, state, lr) -> None:
    """Addresses, checked inside the op (where they exist also under torch.compile): the weight is written in
    place by the backward, so no row may share memory with another, nor with what it reads."""
    check_output(FN, "weight", weight, {"state": state, "lr": lr})
