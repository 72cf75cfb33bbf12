"""Step 4 of the GEMM build-up: tensor descriptors — tiles moved by the TMA engine (Hopper, sm_90 and newer).

Step 3's program computes a pointer for every element of every tile, and masks at the edges; each warp then
issues loads that stage the tile into shared memory for the tensor cores. A *tensor descriptor*
(``tl.make_tensor_descriptor(base, shape, strides, block_shape)``) describes the whole matrix once: where it
starts, its sizes and strides, and the tile shape. ``desc.load([row, col])`` then names a tile by its corner.
On Hopper the descriptor is what the **TMA** (Tensor Memory Accelerator) reads: one thread asks, the copy
engine moves the whole tile from global to shared memory, and rows or columns outside ``shape`` arrive as
zeros (on a store, they are dropped) — the hardware does the masking. The warps are free for the math,
which Hopper also changes: **wgmma**, a warpgroup (4 warps) MMA that reads its operands straight from
shared memory, asynchronously, so loads of the next K step overlap the current multiply. (Triton emits
wgmma on sm_90 for step 3 too; the descriptor is what changes how tiles arrive.)

The TMA's rules, checked on the host (:func:`descriptor_problem`): the last stride is 1, the base address and
every other stride are multiples of 16 bytes. So A must be row-major with K·e a multiple of 16 (K a multiple
of 8 in 16-bit, of 4 in fp32), and so C with N; B may be row-major ``[K, N]`` or K-major (``b.t()`` row-major:
``nn.Linear``'s ``W`` ``[N, K]`` used as ``Wᵀ``), whose tiles are loaded ``[BLOCK_N, BLOCK_K]`` and transposed
(``.T``) for the dot. Other layouts raise; steps 1–3 take any strides.

Needs (:data:`NEEDS`): compute capability 9.0 on a GPU. Under the interpreter (CPU) descriptors are emulated,
so this step runs there too. On a GPU, Triton allocates the descriptors' scratch through
``triton.set_allocator`` (:func:`kernels.fast_launch.ensure_allocator`).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels import gpu_features
from kernels.fast_launch import ensure_allocator
from kernels.gemm.checks import check_operands, output
from kernels.gemm.grouped import grouped_tile
from kernels.gemm.tiles import Tiles, default_tiles, persistent_programs
from kernels.gpu_features import Needs
from kernels.launch import input_precision
from kernels.runtime import dot_upcast, interpreting

__all__ = ["NEEDS", "check_layouts", "descriptor_problem", "descriptors_unmet", "matmul_descriptors"]

NEEDS = Needs("tensor descriptors (TMA)", capability=(9, 0))
TMA_ALIGN = 16  # bytes: base address and every stride but the last


@triton.jit
def _matmul_descriptors_kernel(
    a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_b, stride_cm,
    B_KMAJOR: tl.constexpr, DOT_UPCAST: tl.constexpr, INPUT_PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
):  # fmt: skip
    # Step 3's persistent, grouped loop; tiles come through descriptors (no pointers, no masks).
    a_desc = tl.make_tensor_descriptor(a_ptr, [M, K], [stride_am, 1], [BLOCK_M, BLOCK_K])
    if B_KMAJOR:  # b is the transpose of a row-major [N, K] matrix (nn.Linear's weight)
        b_desc = tl.make_tensor_descriptor(b_ptr, [N, K], [stride_b, 1], [BLOCK_N, BLOCK_K])
    else:
        b_desc = tl.make_tensor_descriptor(b_ptr, [K, N], [stride_b, 1], [BLOCK_K, BLOCK_N])
    c_desc = tl.make_tensor_descriptor(c_ptr, [M, N], [stride_cm, 1], [BLOCK_M, BLOCK_N])
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    for tile_id in range(tl.program_id(0), num_pid_m * num_pid_n, tl.num_programs(0)):
        pid_m, pid_n = grouped_tile(tile_id, num_pid_m, num_pid_n, GROUP_M)
        off_m = pid_m * BLOCK_M
        off_n = pid_n * BLOCK_N
        acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        for k in range(0, tl.cdiv(K, BLOCK_K)):
            a = a_desc.load([off_m, k * BLOCK_K])  # outside [M, K]: zeros, filled in by the TMA
            if B_KMAJOR:
                b = b_desc.load([off_n, k * BLOCK_K]).T
            else:
                b = b_desc.load([k * BLOCK_K, off_n])
            if DOT_UPCAST:
                a = a.to(tl.float32)
                b = b.to(tl.float32)
            acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION)
        c_desc.store([off_m, off_n], acc.to(c_ptr.dtype.element_ty))  # outside [M, N]: dropped


def descriptors_unmet(device: torch.device) -> str | None:
    """Why ``device`` cannot run this step (a GPU below sm_90), or None (sm_90+, or the interpreter)."""
    return gpu_features.unmet(NEEDS, device)


def descriptor_problem(name: str, t: torch.Tensor) -> str | None:
    """Why a tensor descriptor cannot describe the 2-D tensor ``t`` (called ``name``) as stored, or None."""
    e = t.element_size()
    if t.stride(1) != 1:
        return f"{name} needs a unit last stride, got strides {t.stride()}"
    if t.data_ptr() % TMA_ALIGN:
        off = t.data_ptr() % TMA_ALIGN
        return f"{name}'s address must be a multiple of {TMA_ALIGN} bytes, got one {off} bytes past it"
    if (t.stride(0) * e) % TMA_ALIGN:
        return (
            f"{name}'s row stride must be a multiple of {TMA_ALIGN} bytes, got {t.stride(0)} elements of {e} "
            f"bytes ({t.stride(0) * e} bytes)"
        )
    return None


def check_layouts(fn: str, a: torch.Tensor, b: torch.Tensor) -> bool:
    """Raise unless descriptors can describe a and b (b as stored, or ``b.t()``); return: b is K-major."""
    b_kmajor = b.stride(1) != 1 or (b.shape[1] == 1 and b.stride(0) == 1)
    for name, t in (("a", a), ("b" if not b_kmajor else "b.t()", b.t() if b_kmajor else b)):
        problem = descriptor_problem(name, t)
        if problem:
            raise ValueError(
                f"{fn}: {problem} (TMA's rules; a row-major a [M, K], and b [K, N] row-major or the "
                "transpose of a row-major [N, K]; steps 1-3 take any strides)"
            )
    return b_kmajor


def matmul_descriptors(
    a: torch.Tensor,
    b: torch.Tensor,
    out: torch.Tensor | None = None,
    tiles: Tiles | None = None,
    programs: int | None = None,
) -> torch.Tensor:
    """``a @ b`` with tensor descriptors (TMA on Hopper), persistent and grouped as
    :func:`kernels.gemm.persistent.matmul_persistent`. Layouts: see the module docstring; on a GPU below
    sm_90 it raises, saying so."""
    fn = "matmul_descriptors"
    check_operands(fn, a, b)
    why = descriptors_unmet(a.device)
    if why:
        raise RuntimeError(f"{fn}: {why}; use kernels.gemm.persistent.matmul_persistent")
    if programs is not None and (not isinstance(programs, int) or programs < 1):
        raise ValueError(f"{fn}: programs must be a positive int, got {programs!r}")
    (M, K), N = a.shape, b.shape[1]
    out = output(fn, out, a, N, {"a": a, "b": b})
    if M == 0 or N == 0:
        return out
    if K == 0:
        return out.zero_()
    b_kmajor = check_layouts(fn, a, b)
    problem = descriptor_problem("out", out)
    if problem:
        raise ValueError(f"{fn}: {problem} (TMA's rules)")
    t = tiles or default_tiles(M, N, K, a.dtype)
    if not interpreting():
        ensure_allocator()
    grid = (programs or persistent_programs(M, N, t, a.device),)
    _matmul_descriptors_kernel[grid](
        a, b, out, M, N, K, a.stride(0), b.stride(1) if b_kmajor else b.stride(0), out.stride(0),
        B_KMAJOR=b_kmajor, DOT_UPCAST=dot_upcast(a.dtype), INPUT_PRECISION=input_precision(a.dtype),
        BLOCK_M=t.block_m, BLOCK_N=t.block_n, BLOCK_K=t.block_k, GROUP_M=t.group_m,
        num_warps=t.num_warps, num_stages=t.num_stages,
    )  # fmt: skip
    return out
