"""Bias + ReLU, hand-fused: ``out = relu(x + bias)`` with ``bias`` broadcast over the rows.

Shapes: ``x`` is ``[M, N]`` (an N-D ``x`` is flattened to ``[prod(leading dims), N]``), ``bias`` is ``[N]``.

Forward, with ``z = x[m, n] + bias[n]``::

    out[m, n] = 0 if z < 0 else z

That is torch.relu exactly, special values included: NaN stays NaN, ±inf and -0.0 pass through (torch 2.13
on a CPU gives ``relu(-0.0) = -0.0``; so does the CUDA kernel in ``kernels/cuda/pointwise.cuh``).
Why not ``tl.maximum(z, 0)``: it returns 0 for a NaN z, so a diverging run would look healthy.

Bytes moved (element size s): read M·N·s (x) + N·s (bias), write M·N·s (out) → ≈ 2·M·N·s. Two FLOPs per
element: the kernel is memory-bound, so its ceiling is the device's copy bandwidth (``y.copy_(x)`` moves
the same 2·M·N·s). Eager PyTorch runs two kernels (add, then relu) and moves ≈ 4·M·N·s; fusing halves it.

Backward, torch's rule for relu (``threshold_backward``: a select, not a product, so a NaN or inf upstream
gradient where the unit is off still gives 0, and a NaN ``out`` passes the gradient on)::

    grad_x[m, n]  = 0 if out[m, n] <= 0 else grad[m, n]
    grad_bias[n]  = Σ_m grad_x[m, n]

Saved for backward: the *output*, not ``x`` and not a boolean mask. ``out <= 0`` is exactly the ReLU mask, and
the output is alive anyway (it is the next layer's input), so saving it costs no memory; a bool mask would
be a new M·N-byte allocation. In-place mode overwrites ``x`` with ``out``, which is still all we need.
Backward bytes: read grad and out, write grad_x → 3·M·N·s, plus a small partial-sum buffer (below).

``grad_bias`` is a reduction over rows. Each backward program walks down a strip of rows and keeps the
column sums of its strip in fp32 registers, then writes one row of a ``[G, N]`` fp32 partial buffer
(G ≤ 256 row groups); a second small kernel sums the G partial rows. Chosen over ``tl.atomic_add`` because
it is deterministic (the same bits every run) and has no contention; the partial buffer is ≤ 256·N·4 bytes,
noise next to the 3·M·N·s of the main pass.

Named versions: ``v1`` is this file: any shape, any strides (non-contiguous rows and
columns), fp32/fp16/bf16, masked tails, in place or out of place, 2-D tiles picked by a fixed rule
(:func:`kernels.launch.pointwise_tile`). ``v0`` (to be added by the lecture from a real capture) is the
kernel exactly as torch.compile's inductor wrote it, sizes baked in; it is not written by hand here.

Tiles: a rule, not the autotuner. On an H100 (triton 3.6, 2026-11-22) 15 of 16 forward tiles from 1×1024
to 64×64 elements (4 or 8 warps) ran this kernel and add_mul_act's at 90–118% of the copy ceiling for
1024–65536 rows × 4096 columns, fp32 and bf16; only 16×1024 with 8 warps fell to 84–91% (gelu_tanh). With
the rule's 4×1024 tiles, ``benchmarks/bench_pointwise.py`` measured 99–112% of the copy ceiling and
0.97–1.11× torch.compile's speed at every size (median device time).
A memory-bound kernel barely cares about its tile once the loads are 16 bytes wide and the GPU is full,
so autotuning buys nothing here, and it costs: the autotuner's per-call dispatch (≈ 10–25 µs of Python, more
than the kernel's own ≈ 11 µs on the GPU at 1024 × 4096 bf16) and a noisy choice at every new shape. The
backward (a reduction) keeps its small autotuned list.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.fast_launch import CachedLauncher, TunedLauncher
from kernels.launch import (
    REDUCE_CONFIGS,
    as_rows,
    cdiv,
    check_device,
    check_dtype,
    check_int32_offsets,
    check_output,
    check_tensor,
    int32_offsets,
    pointwise_tile,
    reduce_partials,
    row_groups,
    sm_count,
)
from kernels.library import custom_op
from kernels.runtime import autotune_configs


@triton.jit
def _bias_relu_fwd_kernel(
    x_ptr, bias_ptr, out_ptr, M, N,
    stride_xm, stride_xn, stride_b, stride_om, stride_on,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    # 1-D grid over (row tile, column tile); consecutive programs walk along a row band (DRAM-friendly).
    pid = tl.program_id(0)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    pid_m = pid // num_pid_n
    pid_n = pid % num_pid_n
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    row_mask = rows < M
    col_mask = cols < N
    mask = row_mask[:, None] & col_mask[None, :]
    rows64 = rows.to(tl.int64)  # row * stride overflows int32 past 2**31 elements
    # The bias is loaded once per column tile and broadcast over the BLOCK_M rows.
    bias = tl.load(bias_ptr + cols * stride_b, mask=col_mask, other=0.0).to(tl.float32)
    x = tl.load(x_ptr + rows64[:, None] * stride_xm + cols[None, :] * stride_xn, mask=mask, other=0.0)
    z = x.to(tl.float32) + bias[None, :]
    out = tl.where(z < 0, 0.0, z)  # relu; not tl.maximum(z, 0), which turns NaN into 0 (torch.relu keeps NaN)
    tl.store(
        out_ptr + rows64[:, None] * stride_om + cols[None, :] * stride_on,
        out.to(out_ptr.dtype.element_ty),
        mask=mask,
    )


@triton.jit
def _bias_relu_bwd_kernel(
    grad_ptr, out_ptr, grad_x_ptr, partial_ptr, M, N, rows_per_group,
    stride_gm, stride_gn, stride_om, stride_on, stride_gxm, stride_gxn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    # Grid: (column tiles, row groups). This program owns rows [row_start, row_end) of one column tile.
    pid_n = tl.program_id(0)
    pid_g = tl.program_id(1)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    col_mask = cols < N
    row_start = pid_g * rows_per_group
    row_end = tl.minimum(row_start + rows_per_group, M)
    col_sum = tl.zeros([BLOCK_N], dtype=tl.float32)
    for m0 in range(row_start, row_end, BLOCK_M):
        rows = m0 + tl.arange(0, BLOCK_M)
        mask = (rows < row_end)[:, None] & col_mask[None, :]
        rows64 = rows.to(tl.int64)
        g = tl.load(grad_ptr + rows64[:, None] * stride_gm + cols[None, :] * stride_gn, mask=mask, other=0.0)
        o = tl.load(out_ptr + rows64[:, None] * stride_om + cols[None, :] * stride_on, mask=mask, other=0.0)
        gx = tl.where(o <= 0, 0.0, g.to(tl.float32))  # torch's threshold_backward: NaN out passes grad on
        tl.store(
            grad_x_ptr + rows64[:, None] * stride_gxm + cols[None, :] * stride_gxn,
            gx.to(grad_x_ptr.dtype.element_ty),
            mask=mask,
        )
        col_sum += tl.sum(gx, axis=0)  # masked lanes hold 0
    tl.store(partial_ptr + pid_g * N + cols, col_sum, mask=col_mask)  # every group writes its row


_bwd_tuned = triton.autotune(autotune_configs(REDUCE_CONFIGS), key=["M", "N"])(_bias_relu_bwd_kernel)
_launch_fwd = CachedLauncher(_bias_relu_fwd_kernel)  # launches cached per shape (kernels.fast_launch)
_launch_bwd = TunedLauncher(_bwd_tuned)


def _check_tensors(x, bias, out) -> None:
    for name, t in (("x", x), ("bias", bias)) + ((("out", out),) if out is not None else ()):
        check_tensor("bias_relu", name, t)


def _check(x: torch.Tensor, bias: torch.Tensor, out: torch.Tensor | None) -> None:
    _check_tensors(x, bias, out)
    for name, t in (("x", x), ("bias", bias)):
        check_dtype("bias_relu", name, t, x)
        check_device("bias_relu", name, t, x)
    if x.dim() < 1:
        raise ValueError("bias_relu: x must have at least 1 dimension, got a 0-d tensor")
    if bias.dim() != 1 or bias.shape[0] != x.shape[-1]:
        raise ValueError(
            f"bias_relu: bias must have shape ({x.shape[-1]},) to match x's last dim, got {tuple(bias.shape)}"
        )
    if out is not None:
        if out.shape != x.shape:
            raise ValueError(f"bias_relu: out has shape {tuple(out.shape)}, expected {tuple(x.shape)}")
        check_dtype("bias_relu", "out", out, x)
        check_device("bias_relu", "out", out, x)


def _check_written(x: torch.Tensor, bias: torch.Tensor, out: torch.Tensor) -> None:
    """Addresses (inside the ops, where they exist also under torch.compile): no element of ``out`` may share
    memory with another, nor with bias; with x only if out *is* x (in place: each element is read, then
    written, by the same program)."""
    check_output("bias_relu", "out" if out is not x else "x", out, {"x": x, "bias": bias}, in_place=("x",))


def _forward(x: torch.Tensor, bias: torch.Tensor, out: torch.Tensor) -> None:
    """Launch the forward into ``out``: a new tensor, a buffer, or ``x`` itself (in place). Checked before."""
    inplace = out.data_ptr() == x.data_ptr()  # the same view: check_output made sure
    x2 = as_rows(x, "x", need_view=inplace)
    o2 = as_rows(out, "out", need_view=True)
    M, N = x2.shape
    if M == 0 or N == 0:
        return
    # Column offsets are int32 in the kernel: a copy of an input, an error for what is written in place.
    check_int32_offsets("bias_relu", "x" if inplace else "out", o2)
    x2 = o2 if inplace else int32_offsets(x2)
    bias = int32_offsets(bias)
    # In place is safe with any tiling: each element is read, then written, by the same program.
    block_m, block_n = pointwise_tile(M, N, sm_count(x.device))
    args = (x2, bias, o2, M, N, x2.stride(0), x2.stride(1), bias.stride(0), o2.stride(0), o2.stride(1))
    grid = (cdiv(M, block_m) * cdiv(N, block_n),)
    _launch_fwd(grid, args, (("BLOCK_M", block_m), ("BLOCK_N", block_n)), 4, 3)


def _backward(grad: torch.Tensor, out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """grad_x = grad·[out > 0] (shape of out, contiguous), grad_bias = Σ_rows grad_x ([N])."""
    grad = grad.to(out.dtype)
    g2, o2 = int32_offsets(as_rows(grad, "grad")), int32_offsets(as_rows(out, "out"))
    M, N = o2.shape
    grad_x = torch.empty(o2.shape, device=out.device, dtype=out.dtype)
    if M == 0 or N == 0:
        return grad_x.view(out.shape), torch.zeros(N, device=out.device, dtype=out.dtype)
    G, rows_per_group = row_groups(M)
    partial = torch.empty((G, N), device=out.device, dtype=torch.float32)
    args = (g2, o2, grad_x, partial, M, N, rows_per_group, g2.stride(0), g2.stride(1),
            o2.stride(0), o2.stride(1), grad_x.stride(0), grad_x.stride(1))  # fmt: skip
    _launch_bwd((M, N, out.dtype), lambda meta: (cdiv(N, meta["BLOCK_N"]), G), args)
    return grad_x.view(out.shape), reduce_partials(partial, out.dtype)


# ---- the ops (kernels.library): fused_kernels::bias_relu, its backward, and the two writing variants -----
def _fake_out(x, bias):
    return torch.empty(x.shape, device=x.device, dtype=x.dtype)


@custom_op("bias_relu", "(Tensor x, Tensor bias) -> Tensor", fake=_fake_out)
def _bias_relu_op(x, bias):
    out = torch.empty(x.shape, device=x.device, dtype=x.dtype)
    _forward(x, bias, out)
    return out


def _fake_backward(grad, out):
    return torch.empty(out.shape, device=out.device, dtype=out.dtype), out.new_empty(out.shape[-1])


_backward_op = custom_op(
    "bias_relu_backward", "(Tensor grad, Tensor out) -> (Tensor, Tensor)", fake=_fake_backward
)(_backward)


def _setup_context(ctx, inputs, output):
    ctx.save_for_backward(output)  # the output carries the ReLU mask (see the module docstring)


def _autograd_backward(ctx, grad):
    (out,) = ctx.saved_tensors
    grad_x, grad_bias = _backward_op(grad, out)
    return grad_x, (grad_bias if ctx.needs_input_grad[1] else None)


_bias_relu_op.register_autograd(_autograd_backward, setup_context=_setup_context)


@custom_op("bias_relu_", "(Tensor(a!) x, Tensor bias) -> ()", mutates_args=("x",))
def _bias_relu_inplace_op(x, bias):
    _check_written(x, bias, x)
    _forward(x, bias, x)


@custom_op("bias_relu_out", "(Tensor x, Tensor bias, Tensor(a!) out) -> ()", mutates_args=("out",))
def _bias_relu_out_op(x, bias, out):
    _check_written(x, bias, out)
    _forward(x, bias, out)


class _BiasReLUInPlace(torch.autograd.Function):
    """In place with autograd (``inplace=True`` on an input that requires grad): an op that mutates cannot
    carry an autograd formula, so this Function marks x dirty around the in-place op."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        _bias_relu_inplace_op(x, bias)
        ctx.mark_dirty(x)
        ctx.save_for_backward(x)
        return x

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (out,) = ctx.saved_tensors
        grad_x, grad_bias = _backward_op(grad, out)
        return grad_x, (grad_bias if ctx.needs_input_grad[1] else None)


def bias_relu(
    x: torch.Tensor, bias: torch.Tensor, out: torch.Tensor | None = None, inplace: bool = False
) -> torch.Tensor:
    """``relu(x + bias)`` over the last dim of ``x``, one fused Triton kernel (differentiable).

    ``out=``: write into this buffer (no autograd, as with torch's ``out=`` ops). ``inplace=True``: write into
    ``x`` and return it. The op ``fused_kernels::bias_relu`` (``bias_relu_`` in place, ``bias_relu_out``).
    """
    if out is not None and inplace:
        raise ValueError("bias_relu: pass either out= or inplace=True, not both")
    _check_tensors(x, bias, out)
    grad = torch.is_grad_enabled() and (x.requires_grad or bias.requires_grad)
    if grad and out is not None:
        raise RuntimeError("bias_relu: out= does not support autograd (inputs require grad)")
    _check(x, bias, x if inplace else out)
    if inplace:
        if grad:
            return _BiasReLUInPlace.apply(x, bias)
        _bias_relu_inplace_op(x, bias)
        return x
    if out is not None:
        _bias_relu_out_op(x, bias, out)
        return out
    return _bias_relu_op(x, bias)
