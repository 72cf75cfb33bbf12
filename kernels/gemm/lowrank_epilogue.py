"""Step 5 of the GEMM build-up: an epilogue that adds a low-rank term, ``C = A·B + s·(A·Lᵀ)·Rᵀ``.

With A = x ``[M, K]``, B = Wᵀ (W ``[N, K]``), L = the LoRA matrix A ``[r, K]`` and R = the LoRA matrix B
``[N, r]``, this is a LoRA linear layer without its bias: ``y = x Wᵀ + s·(x Aᵀ) Bᵀ``. (In this module the GEMM
operands keep the names a, b of steps 1–4; the low-rank factors are ``lora_a`` [r, K] and ``lora_b`` [N, r].)

FLOPs: 2·M·N·K for the GEMM, plus 2·M·K·r (the *shrink* t = x Aᵀ) and 2·M·r·N (the *expand* t Bᵀ): at
r = 16 and K = N = 4096, under 1% more. Bytes: eager PyTorch writes t, reads it, writes the ``[M, N]`` product
t Bᵀ, reads it again to add it to the GEMM's output and writes the sum — several extra passes over ``[M, N]``
for under 1% more arithmetic. Here nothing but C leaves the program:

- **the shrink in the main loop**: the tile of x the K loop already loaded is multiplied by a ``[BLOCK_K, r]``
  tile of Aᵀ too, accumulating t for the tile's rows (``[BLOCK_M, BLOCK_R]`` fp32, in registers);
- **the expand in the epilogue**: after the loop, ``acc += (s·t) · Bᵀ[:, cols]``, one more ``tl.dot`` of
  depth r, before the single store of C. t is rounded to the input dtype first and then scaled, as a
  torch LoRA layer stores ``x Aᵀ`` before using it.

The small operands (Aᵀ and Bᵀ tiles: any strides, any r up to :data:`MAX_RANK`, padded to ``BLOCK_R``, a
power of two ≥ 16) come by masked pointer loads; x, W and C by descriptors, as in step 4 (same layout rules,
same :data:`kernels.gemm.descriptors.NEEDS`). Every program recomputes t for its tile, once per column block:
the shrink costs ``num_pid_n`` times its FLOPs. The LoRA kernels (:mod:`kernels.lora.gemm`) take it from here.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.fast_launch import ensure_allocator
from kernels.gemm.checks import check_operands, output
from kernels.gemm.descriptors import check_layouts, descriptor_problem, descriptors_unmet
from kernels.gemm.grouped import grouped_tile
from kernels.gemm.tiles import Tiles, default_tiles, persistent_programs
from kernels.launch import check_device, check_dtype, check_tensor, dot_block, input_precision
from kernels.runtime import dot_upcast, interpreting

__all__ = ["MAX_RANK", "matmul_lowrank"]

MAX_RANK = 64  # BLOCK_R ≤ 64: t [BLOCK_M, BLOCK_R] in fp32 stays in registers beside the accumulator


@triton.jit
def _matmul_lowrank_kernel(
    a_ptr, b_ptr, la_ptr, lb_ptr, c_ptr, M, N, K, R, scale,
    stride_am, stride_b, stride_cm, stride_lar, stride_lak, stride_lbn, stride_lbr,
    B_KMAJOR: tl.constexpr, DOT_UPCAST: tl.constexpr, INPUT_PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_R: tl.constexpr,
    GROUP_M: tl.constexpr,
):  # fmt: skip
    # Step 4's kernel, plus t = x·Aᵀ in the K loop and acc += (s·t)·Bᵀ before the store.
    dtype = c_ptr.dtype.element_ty
    a_desc = tl.make_tensor_descriptor(a_ptr, [M, K], [stride_am, 1], [BLOCK_M, BLOCK_K])
    if B_KMAJOR:
        b_desc = tl.make_tensor_descriptor(b_ptr, [N, K], [stride_b, 1], [BLOCK_N, BLOCK_K])
    else:
        b_desc = tl.make_tensor_descriptor(b_ptr, [K, N], [stride_b, 1], [BLOCK_K, BLOCK_N])
    c_desc = tl.make_tensor_descriptor(c_ptr, [M, N], [stride_cm, 1], [BLOCK_M, BLOCK_N])
    rs = tl.arange(0, BLOCK_R)
    ks = tl.arange(0, BLOCK_K)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    for tile_id in range(tl.program_id(0), num_pid_m * num_pid_n, tl.num_programs(0)):
        pid_m, pid_n = grouped_tile(tile_id, num_pid_m, num_pid_n, GROUP_M)
        off_m = pid_m * BLOCK_M
        off_n = pid_n * BLOCK_N
        acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        t = tl.zeros([BLOCK_M, BLOCK_R], dtype=tl.float32)
        for k in range(0, tl.cdiv(K, BLOCK_K)):
            x = a_desc.load([off_m, k * BLOCK_K])
            if B_KMAJOR:
                w = b_desc.load([off_n, k * BLOCK_K]).T
            else:
                w = b_desc.load([k * BLOCK_K, off_n])
            kk = k * BLOCK_K + ks  # Aᵀ tile [BLOCK_K, BLOCK_R]: rows ≥ K and ranks ≥ R read 0
            la = tl.load(
                la_ptr + kk[:, None] * stride_lak + rs[None, :] * stride_lar,
                mask=(kk < K)[:, None] & (rs < R)[None, :], other=0.0,
            )  # fmt: skip
            if DOT_UPCAST:
                x, w, la = x.to(tl.float32), w.to(tl.float32), la.to(tl.float32)
            acc = tl.dot(x, w, acc, input_precision=INPUT_PRECISION)
            t = tl.dot(x, la, t, input_precision=INPUT_PRECISION)  # the shrink, on the same x tile
        # Epilogue: the expand. Bᵀ tile [BLOCK_R, BLOCK_N]; s·t rounded as torch would store x·Aᵀ.
        cols = off_n + tl.arange(0, BLOCK_N)
        lb = tl.load(
            lb_ptr + cols[None, :].to(tl.int64) * stride_lbn + rs[:, None] * stride_lbr,
            mask=(rs < R)[:, None] & (cols < N)[None, :], other=0.0,
        )  # fmt: skip
        ts = (t.to(dtype).to(tl.float32) * scale).to(dtype)
        if DOT_UPCAST:
            ts, lb = ts.to(tl.float32), lb.to(tl.float32)
        acc = tl.dot(ts, lb, acc, input_precision=INPUT_PRECISION)
        c_desc.store([off_m, off_n], acc.to(dtype))


def _check_lowrank(fn: str, a: torch.Tensor, b: torch.Tensor, lora_a, lora_b, scale) -> None:
    K, N = a.shape[1], b.shape[1]
    check_tensor(fn, "lora_a", lora_a)
    check_tensor(fn, "lora_b", lora_b)
    if lora_a.dim() != 2 or lora_a.shape[1] != K:
        raise ValueError(
            f"{fn}: lora_a must be [r, K] with K = {K} (a's columns), got shape {tuple(lora_a.shape)}"
        )
    r = lora_a.shape[0]
    if lora_b.dim() != 2 or tuple(lora_b.shape) != (N, r):
        raise ValueError(
            f"{fn}: lora_b must be [N, r] = {(N, r)} (b's columns, lora_a's rows), "
            f"got shape {tuple(lora_b.shape)}"
        )
    if not 1 <= r <= MAX_RANK:
        raise ValueError(f"{fn}: the rank r (lora_a's rows) must be from 1 to {MAX_RANK}, got {r}")
    for name, t in (("lora_a", lora_a), ("lora_b", lora_b)):
        check_device(fn, name, t, a, like="a")
        check_dtype(fn, name, t, a, like="a")
    if isinstance(scale, bool) or not isinstance(scale, (int, float)):
        raise TypeError(f"{fn}: scale must be a Python float, got {type(scale).__name__}")


def matmul_lowrank(
    a: torch.Tensor,
    b: torch.Tensor,
    lora_a: torch.Tensor,
    lora_b: torch.Tensor,
    scale: float,
    out: torch.Tensor | None = None,
    tiles: Tiles | None = None,
    programs: int | None = None,
) -> torch.Tensor:
    """``a @ b + scale · (a @ lora_aᵀ) @ lora_bᵀ`` in one kernel: a ``[M, K]``, b ``[K, N]`` (layouts as
    :func:`kernels.gemm.descriptors.matmul_descriptors`), lora_a ``[r, K]``, lora_b ``[N, r]`` (any strides),
    r ≤ :data:`MAX_RANK` → ``[M, N]``. The reference is :func:`kernels.reference.matmul_lowrank`."""
    fn = "matmul_lowrank"
    check_operands(fn, a, b)
    _check_lowrank(fn, a, b, lora_a, lora_b, scale)
    why = descriptors_unmet(a.device)
    if why:
        raise RuntimeError(f"{fn}: {why}")
    if programs is not None and (not isinstance(programs, int) or programs < 1):
        raise ValueError(f"{fn}: programs must be a positive int, got {programs!r}")
    (M, K), N = a.shape, b.shape[1]
    out = output(fn, out, a, N, {"a": a, "b": b, "lora_a": lora_a, "lora_b": lora_b})
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
    _matmul_lowrank_kernel[grid](
        a, b, lora_a, lora_b, out, M, N, K, lora_a.shape[0], float(scale),
        a.stride(0), b.stride(1) if b_kmajor else b.stride(0), out.stride(0),
        *lora_a.stride(), *lora_b.stride(),
        B_KMAJOR=b_kmajor, DOT_UPCAST=dot_upcast(a.dtype), INPUT_PRECISION=input_precision(a.dtype),
        BLOCK_M=t.block_m, BLOCK_N=t.block_n, BLOCK_K=t.block_k, BLOCK_R=dot_block(lora_a.shape[0]),
        GROUP_M=t.group_m, num_warps=t.num_warps, num_stages=t.num_stages,
    )  # fmt: skip
    return out
