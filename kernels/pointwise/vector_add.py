"""Vector add, the smallest Triton kernel: proves the runtime mode works (GPU or CPU interpreter).

Math: ``out[i] = x[i] + y[i]`` for i < n.
Bytes moved: reads 2·n·s, writes n·s (s = element size) → 3·n·s bytes; no FLOPs worth counting, so the
kernel is memory-bound and its ceiling is the device's copy bandwidth.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels import launch
from kernels.launch import MAX_TILE_ELEMENTS, check_device, check_tensor

# The dtypes Triton loads and adds like torch does (not bool, complex or the fp8 formats).
DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64,
          torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)  # fmt: skip


@triton.jit
def _vector_add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offsets = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n  # the last block is partial when n is not a multiple of BLOCK
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x + y, mask=mask)


def _check(x: torch.Tensor, y: torch.Tensor, block: int) -> None:
    check_tensor("vector_add", "x", x)
    check_tensor("vector_add", "y", y)
    if x.shape != y.shape:
        raise ValueError(f"vector_add: shapes differ, x {tuple(x.shape)} vs y {tuple(y.shape)}")
    if x.dtype != y.dtype:
        raise TypeError(f"vector_add: dtypes differ, x {x.dtype} vs y {y.dtype}")
    if x.device != y.device:
        raise ValueError(f"vector_add: devices differ, x on {x.device} vs y on {y.device}")
    check_device("vector_add", "x", x, x)
    if x.dtype not in DTYPES:
        raise TypeError(f"vector_add: x has dtype {x.dtype}, not supported (use one of {DTYPES})")
    if not isinstance(block, int) or block < 1 or block & (block - 1) or block > MAX_TILE_ELEMENTS:
        raise ValueError(f"vector_add: block must be a power of two from 1 to {MAX_TILE_ELEMENTS} "
                         f"(tl.arange's rule), got {block!r}")  # fmt: skip
    # The kernel's offsets are int32 (pid * BLOCK + arange): past 2**31 they would wrap around.
    if x.numel() > launch.INT32_LIMIT - block:
        raise ValueError(f"vector_add: x has {x.numel()} elements; this kernel's int32 offsets cover at "
                         f"most {launch.INT32_LIMIT - block} (2**31 - block)")  # fmt: skip


def vector_add(x: torch.Tensor, y: torch.Tensor, block: int = 1024) -> torch.Tensor:
    """``x + y`` with a Triton kernel. Any shape; non-contiguous inputs are made contiguous first."""
    _check(x, y, block)
    x_c, y_c = x.contiguous(), y.contiguous()
    out = torch.empty_like(x_c)
    n = out.numel()
    if n == 0:
        return out
    grid = (triton.cdiv(n, block),)
    _vector_add_kernel[grid](x_c, y_c, out, n, BLOCK=block)
    return out
