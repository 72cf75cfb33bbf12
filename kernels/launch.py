"""Launch helpers shared by every Triton kernel here: argument checks, grid arithmetic, tile rules and the
deterministic second stage of a column-sum reduction.

Kernel modules import from here, never from one another, so a new kernel (embedding, interaction, LoRA)
takes what it needs without pulling in an unrelated kernel.

- Host integer arithmetic: :func:`cdiv`, :func:`next_pow2`, :func:`dot_block` (a ``tl.dot`` tile side); the
  GPU's width: :func:`sm_count`; the precision of fp32 dots: :func:`input_precision`.
- Argument checks with messages that name the function and the argument: :func:`check_tensor`,
  :func:`check_device`, :func:`check_dtype` (over :data:`SUPPORTED_DTYPES`); ``[..., N]`` → ``[M, N]``:
  :func:`as_rows`. Outputs written in place: :func:`check_output` (no two elements share memory, none shared
  with an input). Index arithmetic in int32: :func:`int32_offsets`, :func:`check_int32_offsets`. Value checks
  that cost a host sync on a GPU: :func:`debug_checks`.
- The tile rule of the pointwise kernels (bias+ReLU, add-mul-act): :func:`pointwise_tile`.
- Column sums over rows (``grad_bias``) in two deterministic stages: each backward program writes one row of
  a ``[G, N]`` fp32 partial buffer (:func:`row_groups` picks G, :data:`REDUCE_CONFIGS` the tiles), then
  :func:`reduce_partials` sums the G rows in a fixed order. Chosen over ``tl.atomic_add``, whose float sums
  depend on arrival order.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from kernels import gpu_features
from kernels.fast_launch import CachedLauncher
from kernels.runtime import interpreting

__all__ = [
    "DEBUG_ENV",
    "INT32_LIMIT",
    "MAX_BLOCK_N",
    "MAX_TILE_ELEMENTS",
    "MAX_ROW_GROUPS",
    "REDUCE_CONFIGS",
    "ROWS_PER_GROUP_MIN",
    "SUPPORTED_DTYPES",
    "TILE_ELEMENTS",
    "as_rows",
    "cdiv",
    "check_device",
    "check_dtype",
    "check_int32_offsets",
    "check_output",
    "check_tensor",
    "debug_checks",
    "dot_block",
    "input_precision",
    "int32_offsets",
    "next_pow2",
    "pointwise_tile",
    "reduce_partials",
    "row_groups",
    "sm_count",
]

SUPPORTED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)

# Triton refuses a block (tl.arange, a tile) of more elements than this (TRITON_MAX_TENSOR_NUMEL, 2**20 in
# triton 3.x): a launcher whose tile would exceed it raises a clear error before Triton's compiler does.
MAX_TILE_ELEMENTS = 1 << 20
# Kernels index rows in int64 but columns (and other short dimensions) in int32: ``cols * stride`` wraps
# around at 2**31, a read or write far outside the tensor. Read at call time (tests lower it).
INT32_LIMIT = 2**31
DEBUG_ENV = "FUSED_KERNELS_DEBUG"

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


def dot_block(n: int) -> int:
    """A ``tl.dot`` tile side covering ``n``: the next power of two, at least 16 (the reduction side of 16-bit
    operands must be ≥ 16; 16 on every side keeps one tile shape for every dtype)."""
    return max(16, next_pow2(n))


def input_precision(dtype: torch.dtype) -> str:
    """``tl.dot``'s ``input_precision`` for operands of ``dtype``: ``"tf32"`` for fp32 exactly where torch's
    own matmuls would use TF32 (``torch.set_float32_matmul_precision`` not ``"highest"``, on a GPU), else
    ``"ieee"``."""
    if dtype == torch.float32 and not interpreting() and torch.get_float32_matmul_precision() != "highest":
        return "tf32"
    return "ieee"


def sm_count(device: torch.device) -> int:
    """Streaming multiprocessors on ``device`` (:func:`kernels.gpu_features.features`): how many programs run
    at once, at least. 1 under the interpreter, which runs programs one after another (so there, fewer and
    larger programs are faster)."""
    if device.type != "cuda":
        return 1
    return gpu_features.features(device).sm_count  # (looked up on the module: tests patch it)


def pointwise_tile(M: int, N: int, num_sms: int) -> tuple[int, int]:
    """(BLOCK_M, BLOCK_N) for an elementwise pass over ``[M, N]``; the kernels run it with 4 warps.

    - ``BLOCK_N``: the row, up to 1024 columns (a power of two: ``tl.arange`` needs one), so each warp reads
      long contiguous runs and every thread issues 16-byte loads;
    - ``BLOCK_M``: enough rows for ≈ ``TILE_ELEMENTS`` per program (tall tiles when N is narrow, so few lanes
      are masked), no more rows than M has;
    - then halve ``BLOCK_M`` while there are fewer than 4 programs per SM: a small problem still spreads over
      the whole GPU instead of leaving SMs idle.

    Why a rule and not the autotuner: see :mod:`kernels.pointwise.bias_relu`.
    """
    block_n = min(next_pow2(N), MAX_BLOCK_N)
    block_m = min(max(1, TILE_ELEMENTS // block_n), next_pow2(M))
    while block_m > 1 and cdiv(M, block_m) * cdiv(N, block_n) < 4 * num_sms:
        block_m //= 2
    return block_m, block_n


def debug_checks() -> bool:
    """Whether checks that need a host sync run on CUDA tensors (``FUSED_KERNELS_DEBUG=1``).

    The rule of every kernel here: a value check (ids in range, offsets in order) costs a device→host copy
    on a GPU, a sync of ≈ 10–20 µs that also forbids CUDA-graph capture. Where a bad value could make a kernel
    read or write out of bounds, the kernel itself masks it (in bounds, a wrong or empty result, no error);
    the error then comes from a check that runs on CPU tensors always (nothing to sync), and on CUDA tensors
    where the function documents it (an argument such as ``check_ids``, or this flag)."""
    return os.environ.get(DEBUG_ENV, "") not in ("", "0")


def check_tensor(fn: str, name: str, t) -> None:
    """``t`` (called ``name``) is a tensor: a clear TypeError instead of an AttributeError deeper down."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{fn}: {name} must be a torch.Tensor, got {type(t).__name__}")


def check_device(fn: str, name: str, t: torch.Tensor, x: torch.Tensor, like: str = "x") -> None:
    """``t`` (called ``name``) is on x's device (x called ``like``), which Triton can use (CUDA, or CPU when
    interpreting)."""
    if t.device != x.device:
        raise ValueError(f"{fn}: {name} is on {t.device} but {like} is on {x.device}")
    if t.device.type != "cuda" and not (interpreting() and t.device.type == "cpu"):
        raise ValueError(
            f"{fn}: {name} is on {t.device}; Triton kernels need CUDA tensors "
            "(or CPU tensors with TRITON_INTERPRET=1)"
        )


def check_dtype(fn: str, name: str, t: torch.Tensor, x: torch.Tensor, like: str = "x") -> None:
    """``t`` (called ``name``) has a supported dtype, the same as x's (x called ``like``)."""
    if t.dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"{fn}: {name} has dtype {t.dtype}, not supported (use float32, float16 or bfloat16)")
    if t.dtype != x.dtype:
        raise TypeError(f"{fn}: {name} has dtype {t.dtype} but {like} has {x.dtype}")


def _layout(t: torch.Tensor) -> str:
    return f"shape {tuple(t.shape)}, strides {t.stride()}"


def _may_self_overlap(t: torch.Tensor) -> bool:
    """True unless the strides prove every element has its own memory: sorted by stride, each dimension's
    stride must exceed the farthest offset the smaller dimensions reach (a stride of 0 never does). Exotic
    interleaved layouts that do not overlap may be refused too; never a layout that overlaps."""
    if t.numel() <= 1 or t.is_contiguous():  # the common case, in one call
        return False
    reach = 0
    for stride, size in sorted((abs(st), sz) for sz, st in zip(t.shape, t.stride(), strict=True) if sz > 1):
        if stride <= reach:
            return True
        reach += stride * (size - 1)
    return False


def _byte_span(t: torch.Tensor) -> tuple[int, int]:
    """[first byte, last byte + 1) of the memory ``t``'s elements can touch."""
    if t.is_contiguous():
        return t.data_ptr(), t.data_ptr() + t.numel() * t.element_size()
    lo = hi = 0
    for size, stride in zip(t.shape, t.stride(), strict=True):
        if stride >= 0:
            hi += (size - 1) * stride
        else:
            lo += (size - 1) * stride
    e = t.element_size()
    return t.data_ptr() + lo * e, t.data_ptr() + (hi + 1) * e


def _row_stride_bytes(t: torch.Tensor) -> int | None:
    """The row stride in bytes of a 2-D view with unit column stride (None for any other layout)."""
    if t.dim() != 2 or (t.shape[1] > 1 and t.stride(1) != 1) or t.stride(0) <= 0:
        return None
    return t.stride(0) * t.element_size()


def _disjoint_bands(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Two 2-D views with one row stride whose column bands do not meet (``buf[:, :K]``, ``buf[:, K:]``):
    disjoint though their byte spans interleave. Measured from a's first byte, every row of a covers
    [0, width_a) modulo the row stride, every row of b [d, d + width_b)."""
    row = _row_stride_bytes(a)
    if row is None or row != _row_stride_bytes(b):
        return False
    d = (b.data_ptr() - a.data_ptr()) % row
    return a.shape[1] * a.element_size() <= d and d + b.shape[1] * b.element_size() <= row


def _same_view(a: torch.Tensor, b: torch.Tensor) -> bool:
    return (a.data_ptr(), a.shape, a.stride(), a.dtype) == (b.data_ptr(), b.shape, b.stride(), b.dtype)


def check_output(
    fn: str,
    name: str,
    out: torch.Tensor,
    reads: dict[str, torch.Tensor | None],
    in_place: tuple[str, ...] = (),
) -> None:
    """``out`` (called ``name``), written by the kernel, has memory of its own for every element, and shares
    none with the tensors the kernel ``reads`` (name → tensor; None skipped) — except those named in
    ``in_place`` when ``out`` *is* that tensor (same address, shape and strides: an elementwise kernel reads
    each element before it writes it, in the same program). Call after the device checks.

    Overlap between ``out`` and an input is judged by the byte spans they touch, except that two 2-D views
    with one row stride and separate column bands (``buf[:, :K]``, ``buf[:, K:]``) pass; other interleaved
    views of one buffer (``t[:, ::2]``, ``t[:, 1::2]``) are refused though they share no element. Cheap:
    shapes, strides and addresses only.
    """
    if out.numel() == 0:
        return
    if _may_self_overlap(out):
        raise ValueError(
            f"{fn}: {name} has elements that share memory ({_layout(out)}), so it cannot be written: the "
            "kernel would write one location several times. Pass a tensor with memory of its own per "
            f"element (e.g. {name}.clone() or torch.empty)"
        )
    start, end = _byte_span(out)
    for other, t in reads.items():
        if t is None or t.numel() == 0 or t.device != out.device:
            continue
        if other in in_place and _same_view(out, t):
            continue
        t_start, t_end = _byte_span(t)
        if t_start < end and start < t_end and not _disjoint_bands(out, t):
            allowed = f", or {other} itself (in place)" if other in in_place else ""
            raise ValueError(
                f"{fn}: {name} ({_layout(out)}) overlaps {other} ({_layout(t)}) in memory: the kernel would "
                f"write {other} while it reads it. Pass tensors that do not overlap{allowed}"
            )


def _int32_ok(t: torch.Tensor, dims: tuple[int, ...]) -> bool:
    if t.numel() <= INT32_LIMIT and t.is_contiguous():  # every index · stride ≤ numel - 1: the common case
        return True
    return all((t.shape[d] - 1) * abs(t.stride(d)) < INT32_LIMIT for d in dims if t.shape[d] > 0)


def int32_offsets(t: torch.Tensor, dims: tuple[int, ...] = (-1,)) -> torch.Tensor:
    """``t`` itself if ``index · stride`` fits int32 along every dimension in ``dims`` (the ones a kernel
    indexes in int32), else a contiguous copy, whose unit last stride does. Only a tensor whose elements span
    2**31 or more can need the copy (e.g. a transposed view of one): an input of that size pays one copy
    instead of a read outside its memory."""
    return t if _int32_ok(t, dims) else t.contiguous()


def check_int32_offsets(fn: str, name: str, t: torch.Tensor, dims: tuple[int, ...] = (-1,)) -> None:
    """For a tensor written in place (no copy possible): ``index · stride`` fits int32 along ``dims``."""
    if not _int32_ok(t, dims):
        raise ValueError(
            f"{fn}: {name} ({_layout(t)}) is too large for the kernel's int32 offsets along dims {dims} "
            f"(index × stride must stay below {INT32_LIMIT}); pass a contiguous {name}"
        )


def as_rows(t: torch.Tensor, name: str, need_view: bool = False) -> torch.Tensor:
    """``[..., N]`` → ``[M, N]``: a view when the strides allow, else a copy (refused if ``need_view``)."""
    if t.dim() == 2:
        return t
    if t.dim() < 1:
        raise ValueError(f"{name} must have at least 1 dimension, got a 0-d tensor")
    if t.dim() == 1:
        return t.view(1, -1)
    rows = 1
    for size in t.shape[:-1]:
        rows *= size  # not view(-1, N): with N = 0 the -1 would be ambiguous
    try:
        return t.view(rows, t.shape[-1])
    except RuntimeError:
        if need_view:
            raise ValueError(
                f"{name} of shape {tuple(t.shape)} and strides {t.stride()} cannot be flattened to 2-D "
                "without a copy, so it cannot be written in place"
            ) from None
        return t.reshape(rows, t.shape[-1])


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
