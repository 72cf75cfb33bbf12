"""Launch helpers shared by every Triton kernel here: argument checks, grid arithmetic, tile rules and the
deterministic second stage of a column-sum reduction.

Kernel modules import from here, never from one another, so a new kernel (embedding, interaction, LoRA)
takes what it needs without pulling in an unrelated kernel.

- Host integer arithmetic: :func:`cdiv`, :func:`next_pow2`; the GPU's width: :func:`sm_count`.
- Argument checks with messages that name the function and the argument: :func:`check_device`,
  :func:`check_dtype` (over :data:`SUPPORTED_DTYPES`); ``[..., N]`` → ``[M, N]``: :func:`as_rows`.
- The tile rule of the pointwise kernels (bias+ReLU, add-mul-act): :func:`pointwise_tile`.
- Column sums over rows (``grad_bias``) in two deterministic stages: each backward program writes one row of
  a ``[G, N]`` fp32 partial buffer (:func:`row_groups` picks G, :data:`REDUCE_CONFIGS` the tiles), then
  :func:`reduce_partials` sums the G rows in a fixed order. Chosen over ``tl.atomic_add``, whose float sums
  depend on arrival order.
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from kernels.fast_launch import CachedLauncher
from kernels.runtime import interpreting

__all__ = [
    "MAX_BLOCK_N",
    "MAX_ROW_GROUPS",
    "REDUCE_CONFIGS",
    "ROWS_PER_GROUP_MIN",
    "SUPPORTED_DTYPES",
    "TILE_ELEMENTS",
    "as_rows",
    "cdiv",
    "check_device",
    "check_dtype",
    "next_pow2",
    "pointwise_tile",
    "reduce_partials",
    "row_groups",
    "sm_count",
]

SUPPORTED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)

# Pointwise forward tiles: see pointwise_tile. About 4096 elements per program (32 per thread at 4 warps:
# 16-byte loads, several in flight), at most 1024 columns wide.
TILE_ELEMENTS = 4096
MAX_BLOCK_N = 1024

# Row-reduction backward tiles: each program loops over its row strip BLOCK_M rows at a time.
REDUCE_CONFIGS = [
    triton.Config({"BLOCK_M": 32, "BLOCK_N": 256}, num_warps=8),
    triton.Config({"BLOCK_M": 16, "BLOCK_N": 128}, num_warps=4),
    triton.Config({"BLOCK_M": 16, "BLOCK_N": 512}, num_warps=8),
    triton.Config({"BLOCK_M": 64, "BLOCK_N": 128}, num_warps=8),
    triton.Config({"BLOCK_M": 8, "BLOCK_N": 1024}, num_warps=8),
]
MAX_ROW_GROUPS = 256  # G: rows of the fp32 partial-sum buffer
ROWS_PER_GROUP_MIN = 64


# Host-side integer helpers. triton.cdiv / triton.next_power_of_2 work here too, but recent Triton wraps them
# for use inside kernels and a host call then costs ~5 µs; a launcher makes several per call.
def cdiv(a: int, b: int) -> int:
    """⌈a / b⌉ for positive ints."""
    return -(-a // b)


def next_pow2(n: int) -> int:
    """The smallest power of two ≥ n (1 for n ≤ 1)."""
    return 1 << max(0, n - 1).bit_length()


@functools.cache
def _cuda_sm_count(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


def sm_count(device: torch.device) -> int:
    """Streaming multiprocessors on ``device``: how many programs run at once, at least. 1 under the
    interpreter, which runs programs one after another (so there, fewer and larger programs are faster)."""
    if device.type != "cuda":
        return 1
    return _cuda_sm_count(device.index if device.index is not None else torch.cuda.current_device())


def pointwise_tile(M: int, N: int, num_sms: int) -> tuple[int, int]:
    """(BLOCK_M, BLOCK_N) for an elementwise pass over ``[M, N]``; the kernels run it with 4 warps.

    - ``BLOCK_N``: the row, up to 1024 columns (a power of two: ``tl.arange`` needs one), so each warp reads
      long contiguous runs and every thread issues 16-byte loads;
    - ``BLOCK_M``: enough rows for ≈ ``TILE_ELEMENTS`` per program (tall tiles when N is narrow, so few lanes
      are masked), no more rows than M has;
    - then halve ``BLOCK_M`` while there are fewer than 4 programs per SM: a small problem still spreads over
      the whole GPU instead of leaving SMs idle.

    Why a rule and not the autotuner: see :mod:`kernels.bias_relu`.
    """
    block_n = min(next_pow2(N), MAX_BLOCK_N)
    block_m = min(max(1, TILE_ELEMENTS // block_n), next_pow2(M))
    while block_m > 1 and cdiv(M, block_m) * cdiv(N, block_n) < 4 * num_sms:
        block_m //= 2
    return block_m, block_n


def check_device(fn: str, name: str, t: torch.Tensor, x: torch.Tensor) -> None:
    """``t`` (called ``name``) is on x's device, which Triton can use (CUDA, or CPU when interpreting)."""
    if t.device != x.device:
        raise ValueError(f"{fn}: {name} is on {t.device} but x is on {x.device}")
    if t.device.type != "cuda" and not (interpreting() and t.device.type == "cpu"):
        raise ValueError(
            f"{fn}: {name} is on {t.device}; Triton kernels need CUDA tensors "
            "(or CPU tensors with TRITON_INTERPRET=1)"
        )


def check_dtype(fn: str, name: str, t: torch.Tensor, x: torch.Tensor) -> None:
    """``t`` (called ``name``) has a supported dtype, the same as x's."""
    if t.dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"{fn}: {name} has dtype {t.dtype}, not supported (use float32, float16 or bfloat16)")
    if t.dtype != x.dtype:
        raise TypeError(f"{fn}: {name} has dtype {t.dtype} but x has {x.dtype}")


def as_rows(t: torch.Tensor, name: str, need_view: bool = False) -> torch.Tensor:
    """``[..., N]`` → ``[M, N]``: a view when the strides allow, else a copy (refused if ``need_view``)."""
    if t.dim() == 2:
        return t
    if t.dim() < 1:
        raise ValueError(f"{name} must have at least 1 dimension, got a 0-d tensor")
    if t.dim() == 1:
        return t.view(1, -1)
    try:
        return t.view(-1, t.shape[-1])
    except RuntimeError:
        if need_view:
            raise ValueError(
                f"{name} of shape {tuple(t.shape)} and strides {t.stride()} cannot be flattened to 2-D "
                "without a copy, so it cannot be written in place"
            ) from None
        return t.reshape(-1, t.shape[-1])


def row_groups(M: int) -> tuple[int, int]:
    """(G, rows per group) for a row reduction: ≥ ROWS_PER_GROUP_MIN rows each, ≤ MAX_ROW_GROUPS groups."""
    G = max(1, min(M // ROWS_PER_GROUP_MIN, MAX_ROW_GROUPS))  # floor: each group gets ≥ the minimum
    return G, cdiv(M, G)


@triton.jit
def _column_sum_kernel(partial_ptr, out_ptr, G, N, BLOCK_G: tl.constexpr, BLOCK_N: tl.constexpr):
    # out[n] = Σ_g partial[g, n]: the second, small stage of a row reduction (fixed order).
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_mask = cols < N
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    for g0 in range(0, G, BLOCK_G):
        groups = g0 + tl.arange(0, BLOCK_G)
        mask = (groups < G)[:, None] & col_mask[None, :]
        acc += tl.sum(
            tl.load(partial_ptr + groups[:, None] * N + cols[None, :], mask=mask, other=0.0), axis=0
        )
    tl.store(out_ptr + cols, acc.to(out_ptr.dtype.element_ty), mask=col_mask)


_launch_column_sum = CachedLauncher(_column_sum_kernel)  # cached per shape (kernels.fast_launch)


def reduce_partials(partial: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Sum a ``[G, N]`` fp32 partial buffer over its rows into a new ``[N]`` tensor of ``dtype``."""
    G, N = partial.shape
    out = torch.empty(N, device=partial.device, dtype=dtype)
    block_n = 256
    _launch_column_sum(
        (cdiv(N, block_n),), (partial, out, G, N), (("BLOCK_G", 32), ("BLOCK_N", block_n)), 4, 3
    )
    return out
