"""Step 2 of the GEMM build-up: the same tiled matmul, tiles taken in grouped order (``GROUP_M``).

Nothing changes in what a program computes; only which output tile program ``pid`` takes. Why it matters:
the programs that run at the same time (a *wave*: about one per SM) read their A row blocks and B column
blocks at about the same time, so a block that several of them need is fetched from DRAM once and then served
from the L2 cache, if the wave's blocks fit there. The DRAM bytes of a wave are then about those of the
distinct blocks it touches: ``(row blocks · BLOCK_M + column blocks · BLOCK_N) · K · e``.

- Row by row (step 1): a wave of P programs covers ⌈P / num_pid_n⌉ row blocks but, on a wide C, every column
  block: all of B per wave.
- Grouped: tiles go down ``GROUP_M`` row blocks before moving one column block right, so a wave covers
  ``GROUP_M`` row blocks and about P / GROUP_M column blocks: a squarer patch of C, fewer distinct blocks for
  the same number of tiles.

:func:`wave_footprint` counts the distinct blocks of a wave for either order, from :func:`tile_order`, the
host-side copy of the kernels' mapping (a test checks they agree). ``grouped_tile`` is the ``@triton.jit``
mapping itself, shared with the later steps.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.gemm.checks import check_operands, output
from kernels.gemm.tiles import Tiles, default_tiles, num_tiles
from kernels.launch import input_precision, int32_offsets
from kernels.runtime import dot_upcast

__all__ = ["grouped_tile", "matmul_grouped", "tile_order", "wave_footprint"]


@triton.jit
def grouped_tile(tile_id, num_pid_m, num_pid_n, GROUP_M: tl.constexpr):
    # (pid_m, pid_n) of a tile: down GROUP_M row blocks, then one column block to the right.
    width = GROUP_M * num_pid_n  # tiles in one super-row of GROUP_M row blocks
    first_m = (tile_id // width) * GROUP_M
    group_rows = tl.minimum(num_pid_m - first_m, GROUP_M)  # the last super-row may be shorter
    pid_m = first_m + (tile_id % width) % group_rows
    pid_n = (tile_id % width) // group_rows
    return pid_m, pid_n


@triton.jit
def _matmul_grouped_kernel(
    a_ptr, b_ptr, c_ptr, M, N, K,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
    DOT_UPCAST: tl.constexpr, INPUT_PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
):  # fmt: skip
    # Step 1's kernel; only the tile of program `pid` differs (grouped order).
    pid_m, pid_n = grouped_tile(tl.program_id(0), tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N), GROUP_M)
    rows = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
    cols = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)).to(tl.int64)
    ks = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + rows[:, None] * stride_am + ks[None, :] * stride_ak
    b_ptrs = b_ptr + ks[:, None] * stride_bk + cols[None, :] * stride_bn
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - k * BLOCK_K
        a = tl.load(a_ptrs, mask=(rows[:, None] < M) & (ks[None, :] < k_left), other=0.0)
        b = tl.load(b_ptrs, mask=(ks[:, None] < k_left) & (cols[None, :] < N), other=0.0)
        if DOT_UPCAST:
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    c_ptrs = c_ptr + rows[:, None] * stride_cm + cols[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(rows[:, None] < M) & (cols[None, :] < N))


def matmul_grouped(
    a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None, tiles: Tiles | None = None
) -> torch.Tensor:
    """``a @ b`` with tiles in grouped order (``tiles.group_m`` row blocks per super-row); otherwise as
    :func:`kernels.gemm.tiled.matmul_tiled`."""
    check_operands("matmul_grouped", a, b)
    (M, K), N = a.shape, b.shape[1]
    out = output("matmul_grouped", out, a, N, {"a": a, "b": b})
    if M == 0 or N == 0:
        return out
    if K == 0:
        return out.zero_()
    t = tiles or default_tiles(M, N, K, a.dtype)
    a, b = int32_offsets(a, (1,)), int32_offsets(b, (0,))
    _matmul_grouped_kernel[(num_tiles(M, N, t),)](
        a, b, out, M, N, K, *a.stride(), *b.stride(), *out.stride(),
        DOT_UPCAST=dot_upcast(a.dtype), INPUT_PRECISION=input_precision(a.dtype),
        BLOCK_M=t.block_m, BLOCK_N=t.block_n, BLOCK_K=t.block_k, GROUP_M=t.group_m,
        num_warps=t.num_warps, num_stages=t.num_stages,
    )  # fmt: skip
    return out


def tile_order(num_pid_m: int, num_pid_n: int, group_m: int | None) -> list[tuple[int, int]]:
    """``(pid_m, pid_n)`` of tiles 0, 1, …: row by row if ``group_m`` is None, else :func:`grouped_tile`'s
    order (the same arithmetic, on the host)."""
    order = []
    for tile in range(num_pid_m * num_pid_n):
        if group_m is None:
            order.append((tile // num_pid_n, tile % num_pid_n))
            continue
        width = group_m * num_pid_n
        first_m = (tile // width) * group_m
        rows = min(num_pid_m - first_m, group_m)
        order.append((first_m + (tile % width) % rows, (tile % width) // rows))
    return order


def wave_footprint(
    M: int, N: int, K: int, tiles: Tiles, wave: int, grouped: bool, element_size: int = 2
) -> dict[str, float]:
    """The first ``wave`` tiles of an ``[M, N]`` product (row order, or grouped by ``tiles.group_m``): how
    many distinct row blocks of A and column blocks of B they read, and those blocks' megabytes over all of K
    (the DRAM traffic of the wave if each block is fetched once and then found in L2), next to what its
    tiles read without any reuse."""
    num_pid_m, num_pid_n = -(-M // tiles.block_m), -(-N // tiles.block_n)
    first = tile_order(num_pid_m, num_pid_n, tiles.group_m if grouped else None)[:wave]
    rows, cols = {m for m, _ in first}, {n for _, n in first}
    return {
        "tiles": len(first),
        "A row blocks": len(rows),
        "B column blocks": len(cols),
        "MB, each block once": (len(rows) * tiles.block_m + len(cols) * tiles.block_n)
        * K
        * element_size
        / 1e6,
        "MB, no reuse": len(first) * (tiles.block_m + tiles.block_n) * K * element_size / 1e6,
    }
