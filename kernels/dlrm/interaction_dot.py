"""DLRM's ``dot`` interaction, fused: pairwise dot products of the ``F`` vectors, forward and backward.

Shapes (notation of ``lecture_code.model``: B batch, Fs sparse features, D embedding dim, ``F = Fs + 1``):
``dense [B, D]``, ``sparse [B, Fs, D]`` → ``out [B, D + F(F-1)/2]`` (16 + 351 = 367 for Kaggle: Fs = 26).
A combined ``T [B, F, D]`` works too: pass ``T[:, 0]`` and ``T[:, 1:]`` (views; the kernels take strides).

Forward, per sample, with ``T = [dense; sparse]`` (``[F, D]``, the dense vector as row 0)::

    Z = T Tᵀ                                         [F, F], symmetric
    out = [dense, Z[1,0], Z[2,0], Z[2,1], Z[3,0], …]  strict lower triangle, row-major: pair (i, j), i > j,
                                                     at column D + i(i-1)/2 + j

That is the order of ``torch.tril_indices(F, F, -1)``, DLRM's ``li, lj`` and
:class:`lecture_code.model.interaction_arch.DotInteraction` (tested against it).

Backward. With ``G [F, F]`` the upstream gradient scattered back from the triangle (``G[i, j] = dout[D +
i(i-1)/2 + j]`` for ``i > j``, 0 elsewhere), ``Z = T Tᵀ`` gives ``dT = (G + Gᵀ) T``; the symmetric
``S = G + Gᵀ`` is loaded directly (``S[i, j] = dout[D + idx(max(i, j), min(i, j))]``, 0 on the diagonal)::

    d_dense  = dout[:D] + dT[0]        the passthrough plus the pair terms
    d_sparse = dT[1:]

Saved for backward: the inputs (alive anyway: the embeddings and the bottom MLP's output); ``Z`` is never
needed again.

One program handles ``SAMPLES`` samples, one at a time, with the ``[F, D]`` tile on chip: padded to powers of
two ≥ 16 (``tl.dot``'s minimum; odd F and D are masked with zeros, which add nothing to a dot product).
Products in fp32 (``input_precision="ieee"``: no TF32 rounding; the inputs upcast, so bf16 is exact under the
interpreter too) and rounded once to the input dtype. The FLOPs are negligible (F²·D = 11.7k MACs per sample,
the 32×32×16 padded tile on CUDA cores); bytes decide. Forward reads B·F·D·s, writes B·(D + F(F-1)/2)·s:
for Kaggle (B = 2048, fp32) 3.5 MB + 3.0 MB. Eager runs cat + bmm + index_select + cat: it also writes the
cat (3.5 MB) and the full ``[B, F, F]`` products (6 MB), and reads them back. Backward reads dout and T,
writes dT: 3.0 + 3.5 + 3.5 MB; eager's autograd of those four ops moves about twice that.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.fast_launch import CachedLauncher
from kernels.launch import (
    MAX_TILE_ELEMENTS,
    cdiv,
    check_device,
    check_dtype,
    check_tensor,
    dot_block,
    int32_offsets,
)
from kernels.library import custom_op

__all__ = ["interaction_dot", "interaction_dot_output_dim"]

SAMPLES = 1  # samples per program: B = 2048 gives 2048 programs of one warp each (WARPS)
WARPS = 1  # H100 sweep (B 2048, Fs 26, D 16, fp32, 2026-11-23): fwd 8.0 µs, bwd 5.5 µs; 4 samples × 4 warps
# (the old choice) 13.1 and 8.1: one sample per warp keeps more samples in flight to hide the loads


def interaction_dot_output_dim(num_sparse_features: int, embedding_dim: int) -> int:
    """``D + F(F-1)/2`` with ``F = Fs + 1``: 367 for Fs = 26, D = 16."""
    f = num_sparse_features + 1
    return embedding_dim + f * (f - 1) // 2


@triton.jit
def _load_t(dense_ptr, sparse_ptr, b, F, D, stride_db, stride_dd, stride_sb, stride_sf, stride_sd,
            BLOCK_F: tl.constexpr, BLOCK_D: tl.constexpr):  # fmt: skip
    """Sample b's fp32 tile T ``[BLOCK_F, BLOCK_D]``: row 0 = dense, rows 1..F-1 = sparse, zeros outside."""
    fi = tl.arange(0, BLOCK_F)
    di = tl.arange(0, BLOCK_D)
    d_mask = di < D
    dense = tl.load(dense_ptr + b * stride_db + di * stride_dd, mask=d_mask, other=0.0).to(tl.float32)
    s_mask = ((fi >= 1) & (fi < F))[:, None] & d_mask[None, :]
    ptrs = sparse_ptr + b * stride_sb + (fi - 1)[:, None] * stride_sf + di[None, :] * stride_sd
    sparse = tl.load(ptrs, mask=s_mask, other=0.0).to(tl.float32)
    return tl.where((fi == 0)[:, None], dense[None, :], sparse), dense


@triton.jit
def _interaction_dot_fwd_kernel(
    dense_ptr, sparse_ptr, out_ptr, B, F, D,
    stride_db, stride_dd, stride_sb, stride_sf, stride_sd, stride_ob,
    SAMPLES: tl.constexpr, BLOCK_F: tl.constexpr, BLOCK_D: tl.constexpr,
):  # fmt: skip
    fi = tl.arange(0, BLOCK_F)
    di = tl.arange(0, BLOCK_D)
    tri = fi[:, None] * (fi[:, None] - 1) // 2 + fi[None, :]  # column of pair (i, j) after the dense part
    tri_mask = (fi[None, :] < fi[:, None]) & (fi[:, None] < F)  # strict lower triangle, real rows only
    for s in range(SAMPLES):
        b = tl.program_id(0) * SAMPLES + s
        if b < B:
            b64 = b.to(tl.int64)
            t, dense = _load_t(dense_ptr, sparse_ptr, b64, F, D, stride_db, stride_dd, stride_sb, stride_sf,
                               stride_sd, BLOCK_F, BLOCK_D)  # fmt: skip
            z = tl.dot(t, tl.trans(t), input_precision="ieee")  # [BLOCK_F, BLOCK_F], fp32
            row = out_ptr + b64 * stride_ob
            tl.store(row + di, dense.to(out_ptr.dtype.element_ty), mask=di < D)
            tl.store(row + D + tri, z.to(out_ptr.dtype.element_ty), mask=tri_mask)


@triton.jit
def _interaction_dot_bwd_kernel(
    dense_ptr, sparse_ptr, grad_ptr, d_dense_ptr, d_sparse_ptr, B, F, D,
    stride_db, stride_dd, stride_sb, stride_sf, stride_sd, stride_gb,
    SAMPLES: tl.constexpr, BLOCK_F: tl.constexpr, BLOCK_D: tl.constexpr,
):  # fmt: skip
    fi = tl.arange(0, BLOCK_F)
    di = tl.arange(0, BLOCK_D)
    d_mask = di < D
    hi = tl.maximum(fi[:, None], fi[None, :])
    lo = tl.minimum(fi[:, None], fi[None, :])
    sym = hi * (hi - 1) // 2 + lo  # S[i, j] = S[j, i] = the gradient of pair (max, min)
    sym_mask = (fi[:, None] != fi[None, :]) & (hi < F)
    for s in range(SAMPLES):
        b = tl.program_id(0) * SAMPLES + s
        if b < B:
            b64 = b.to(tl.int64)
            t, _ = _load_t(dense_ptr, sparse_ptr, b64, F, D, stride_db, stride_dd, stride_sb, stride_sf,
                           stride_sd, BLOCK_F, BLOCK_D)  # fmt: skip
            g_row = grad_ptr + b64 * stride_gb
            sg = tl.load(g_row + D + sym, mask=sym_mask, other=0.0).to(tl.float32)  # S = G + Gᵀ
            dt = tl.dot(sg, t, input_precision="ieee")  # [BLOCK_F, BLOCK_D]
            g_dense = tl.load(g_row + di, mask=d_mask, other=0.0).to(tl.float32)
            d_dense = g_dense + tl.sum(tl.where((fi == 0)[:, None], dt, 0.0), axis=0)
            tl.store(d_dense_ptr + b64 * D + di, d_dense.to(d_dense_ptr.dtype.element_ty), mask=d_mask)
            sp_mask = ((fi >= 1) & (fi < F))[:, None] & d_mask[None, :]
            ptrs = d_sparse_ptr + b64 * (F - 1) * D + (fi - 1)[:, None] * D + di[None, :]
            tl.store(ptrs, dt.to(d_sparse_ptr.dtype.element_ty), mask=sp_mask)


def _check(dense: torch.Tensor, sparse: torch.Tensor) -> None:
    check_tensor("interaction_dot", "dense", dense)
    check_tensor("interaction_dot", "sparse", sparse)
    check_dtype("interaction_dot", "dense", dense, dense, like="dense")
    check_dtype("interaction_dot", "sparse", sparse, dense, like="dense")
    check_device("interaction_dot", "dense", dense, dense, like="dense")
    check_device("interaction_dot", "sparse", sparse, dense, like="dense")
    if dense.dim() != 2 or sparse.dim() != 3:
        raise ValueError(
            f"interaction_dot: dense must be [B, D] and sparse [B, Fs, D], got {tuple(dense.shape)} and "
            f"{tuple(sparse.shape)}"
        )
    if sparse.shape[0] != dense.shape[0] or sparse.shape[2] != dense.shape[1]:
        raise ValueError(
            f"interaction_dot: sparse {tuple(sparse.shape)} does not match dense {tuple(dense.shape)} "
            "in B or D"
        )
    block_f, block_d = _blocks(sparse.shape[1] + 1, dense.shape[1])
    if max(block_f * block_f, block_f * block_d) > MAX_TILE_ELEMENTS:
        raise ValueError(
            f"interaction_dot: F = {sparse.shape[1] + 1} vectors of D = {dense.shape[1]} do not fit one "
            f"program's tiles ([F, D] and [F, F], padded to {block_f} x {block_d}; Triton allows "
            f"{MAX_TILE_ELEMENTS} elements per block)"
        )


def _blocks(F: int, D: int) -> tuple[int, int]:
    return dot_block(F), dot_block(D)


def _constexprs(block_f: int, block_d: int) -> tuple:
    return (("SAMPLES", SAMPLES), ("BLOCK_F", block_f), ("BLOCK_D", block_d))


_launch_fwd = CachedLauncher(_interaction_dot_fwd_kernel)  # cached per shape: a few µs of host time, not ~50
_launch_bwd = CachedLauncher(_interaction_dot_bwd_kernel)


def _forward(dense: torch.Tensor, sparse: torch.Tensor) -> torch.Tensor:
    B, D = dense.shape
    F = sparse.shape[1] + 1
    out = torch.empty((B, D + F * (F - 1) // 2), device=dense.device, dtype=dense.dtype)
    if B == 0:
        return out
    block_f, block_d = _blocks(F, D)
    args = (dense, sparse, out, B, F, D, dense.stride(0), dense.stride(1),
            sparse.stride(0), sparse.stride(1), sparse.stride(2), out.stride(0))  # fmt: skip
    _launch_fwd((cdiv(B, SAMPLES),), args, _constexprs(block_f, block_d), WARPS, 3)
    return out


def _backward(grad: torch.Tensor, dense: torch.Tensor, sparse: torch.Tensor):
    B, D = dense.shape
    F = sparse.shape[1] + 1
    grad = grad.contiguous() if grad.stride(1) != 1 else grad
    d_dense = torch.empty((B, D), device=dense.device, dtype=dense.dtype)
    d_sparse = torch.empty((B, F - 1, D), device=dense.device, dtype=dense.dtype)
    if B == 0:
        return d_dense, d_sparse
    block_f, block_d = _blocks(F, D)
    args = (dense, sparse, grad, d_dense, d_sparse, B, F, D, dense.stride(0), dense.stride(1),
            sparse.stride(0), sparse.stride(1), sparse.stride(2), grad.stride(0))  # fmt: skip
    _launch_bwd((cdiv(B, SAMPLES),), args, _constexprs(block_f, block_d), WARPS, 3)
    return d_dense, d_sparse


# ---- the op (kernels.library): fused_kernels::interaction_dot and its backward ---------------------------
def _fake_forward(dense, sparse):
    B, D = dense.shape
    F = sparse.shape[1] + 1
    return dense.new_empty((B, D + F * (F - 1) // 2))


def _fake_backward(grad, dense, sparse):
    return dense.new_empty(dense.shape), dense.new_empty((dense.shape[0], sparse.shape[1], dense.shape[1]))


_forward_op = custom_op("interaction_dot", "(Tensor dense, Tensor sparse) -> Tensor", fake=_fake_forward)(
    _forward
)


@custom_op(
    "interaction_dot_backward",
    "(Tensor grad, Tensor dense, Tensor sparse) -> (Tensor, Tensor)",
    fake=_fake_backward,
)
def _backward_op(grad, dense, sparse):
    return _backward(grad.to(dense.dtype), dense, sparse)


def _setup_context(ctx, inputs, output):
    ctx.save_for_backward(*inputs)  # inputs only: Z is not needed by the backward


def _autograd_backward(ctx, grad):
    dense, sparse = ctx.saved_tensors
    d_dense, d_sparse = _backward_op(grad, dense, sparse)
    return (d_dense if ctx.needs_input_grad[0] else None), (d_sparse if ctx.needs_input_grad[1] else None)


_forward_op.register_autograd(_autograd_backward, setup_context=_setup_context)


def interaction_dot(dense: torch.Tensor, sparse: torch.Tensor) -> torch.Tensor:
    """``[dense, strict lower triangle of T Tᵀ]`` with ``T = [dense; sparse]``: ``[B, D]``, ``[B, Fs, D]`` →
    ``[B, D + F(F-1)/2]``, one Triton kernel each way (differentiable in dense and sparse). The op
    ``fused_kernels::interaction_dot``."""
    _check(dense, sparse)
    # Samples are indexed in int64, features and columns in int32: an input too large for that is copied.
    dense, sparse = int32_offsets(dense), int32_offsets(sparse, (1, 2))
    return _forward_op(dense, sparse)
