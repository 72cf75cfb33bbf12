"""Add-multiply-activation, hand-fused: ``out = act(x + bias + alpha·y)``, forward and backward in Triton.

Shapes: ``x`` and ``y`` are ``[M, N]`` (N-D inputs are flattened to ``[prod(leading dims), N]``), ``bias`` is
``[N]`` broadcast over the rows, ``alpha`` a Python float (a constant: no gradient), ``act`` one of
``relu``, ``sigmoid``, ``gelu_tanh``, ``silu`` (a ``tl.constexpr``: one compiled kernel per activation).
Everything is computed in fp32 inside the kernel and stored in the input dtype.

Forward, with ``z = x + bias + alpha·y``::

    out = act(z)

Bytes moved (element size s): read 2·M·N·s (x, y), write M·N·s → 3·M·N·s; about 15 FLOPs per element at most
(gelu_tanh), far below the H100's FLOP/byte balance, so the ceiling is again the copy bandwidth. Eager
PyTorch runs 4 kernels (add, mul, add, act) and moves ≈ 9·M·N·s.

Backward. ``grad`` is the upstream gradient; with ``dz = grad · act'(z)``::

    grad_x    = dz
    grad_y    = alpha · dz
    grad_bias = Σ_rows dz

Derivatives (``s = sigmoid(z) = 1 / (1 + e^(-z))``)::

    relu'(z)      = [z > 0]               applied as a select, as torch does: dz = 0 if z ≤ 0 else grad
    sigmoid'(z)   = s · (1 − s)
    silu(z)       = z · s                 silu'(z) = s · (1 + z · (1 − s))
    gelu_tanh(z)  = ½ z (1 + t),  t = tanh(u),  u = c (z + a z³),  c = √(2/π),  a = 0.044715
    gelu_tanh'(z) = ½ (1 + t) + ½ z (1 − t²) · c (1 + 3 a z²)

``tanh`` is written with ``tl.exp`` (no ``libdevice`` on every Triton version):
``tanh(u) = 1 − 2 / (e^(2u) + 1)``, which saturates to ±1 without overflow trouble
(e^(2u) → ∞ gives 1, → 0 gives −1).
One exponential and one division per element: not the bottleneck. On an H100 (2026-11-22) the gelu_tanh
forward ran at 101–114% of the copy ceiling in fp32 from 1024 to 65536 rows × 4096 (timed as device time,
see ``lecture_code/bench.py``); the 61–66% of a first benchmark run was host launch overhead leaking
into the timing, not arithmetic.

Special values come out as torch's (``tests/kernels/test_special_values.py``). ReLU is ``where(z < 0, 0, z)``;
why not ``tl.maximum(z, 0)``: it turns a NaN z into 0 where torch.relu keeps NaN, hiding a diverging run.
The other formulas need no special case: NaN stays NaN; sigmoid(+inf) = 1, sigmoid(−inf) = 0;
silu(−inf) = gelu_tanh(−inf) = −inf · 0 = NaN, and the silu and gelu_tanh derivatives at ±inf are NaN
(inf · 0), all as in torch; relu, silu and gelu_tanh keep −0.0 as −0.0.

Saved for backward: the *inputs* ``x``, ``y``, ``bias`` (alive anyway, so no new memory); ``z`` and
``act'(z)`` are recomputed in the backward kernel, where the few extra FLOPs are free. For relu and sigmoid
the output alone would do (``out ≤ 0`` as the mask, ``out(1 − out)``) and save one read; we keep one rule
for all four activations. Backward bytes: read grad, x, y; write grad_x, grad_y → 5·M·N·s.

``grad_bias``: each backward program walks a strip of rows and keeps its column sums in fp32 registers,
writes one row of a ``[G, N]`` fp32 partial buffer, and the small second kernel of
:func:`kernels.launch.reduce_partials` sums the G rows. Deterministic (unlike ``tl.atomic_add``, whose float
sums depend on arrival order) and contention-free; the buffer is ≤ 256·N·4 bytes.
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
    check_tensor,
    int32_offsets,
    pointwise_tile,
    reduce_partials,
    row_groups,
    sm_count,
)
from kernels.library import custom_op
from kernels.runtime import autotune_configs

ACTIVATIONS = ("relu", "sigmoid", "gelu_tanh", "silu")


@triton.jit
def _sigmoid(z):
    return 1.0 / (1.0 + tl.exp(-z))


@triton.jit
def _tanh(u):
    return 1.0 - 2.0 / (tl.exp(2.0 * u) + 1.0)


@triton.jit
def _gelu_tanh_t(z):
    """t = tanh(c (z + a z³)), c = √(2/π), a = 0.044715 (literals: jit code reads no Python globals)."""
    return _tanh(0.7978845608028654 * (z + 0.044715 * z * z * z))


@triton.jit
def _act(z, ACTIVATION: tl.constexpr):
    """act(z) for fp32 ``z``."""
    if ACTIVATION == "relu":
        return tl.where(z < 0, 0.0, z)  # not tl.maximum(z, 0): that turns NaN into 0, torch.relu keeps NaN
    elif ACTIVATION == "sigmoid":
        return _sigmoid(z)
    elif ACTIVATION == "gelu_tanh":
        return 0.5 * z * (1.0 + _gelu_tanh_t(z))
    else:  # silu
        return z * _sigmoid(z)


@triton.jit
def _act_backward(g, z, ACTIVATION: tl.constexpr):
    """dz = g · act'(z) for fp32 ``g`` and ``z`` (formulas in the module docstring).

    relu is a select, as in torch (``threshold_backward``): 0 where z ≤ 0 even if g is NaN or inf, g where
    z is NaN. The others multiply, as torch does, so a NaN on either side gives NaN.
    """
    if ACTIVATION == "relu":
        return tl.where(z <= 0, 0.0, g)
    elif ACTIVATION == "sigmoid":
        s = _sigmoid(z)
        return g * (s * (1.0 - s))
    elif ACTIVATION == "gelu_tanh":
        t = _gelu_tanh_t(z)
        return g * (
            0.5 * (1.0 + t) + 0.5 * z * (1.0 - t * t) * 0.7978845608028654 * (1.0 + 0.134145 * z * z)
        )  # 3a = 0.134145
    else:  # silu
        s = _sigmoid(z)
        return g * (s * (1.0 + z * (1.0 - s)))


@triton.jit
def _add_mul_act_fwd_kernel(
    x_ptr, bias_ptr, y_ptr, out_ptr, M, N, alpha,
    stride_xm, stride_xn, stride_b, stride_ym, stride_yn, stride_om, stride_on,
    ACTIVATION: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    # Same tiling as bias_relu's forward: 1-D grid over (row tile, column tile), bias once per column tile.
    pid = tl.program_id(0)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    pid_m = pid // num_pid_n
    pid_n = pid % num_pid_n
    rows = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    col_mask = cols < N
    mask = (rows < M)[:, None] & col_mask[None, :]
    bias = tl.load(bias_ptr + cols * stride_b, mask=col_mask, other=0.0).to(tl.float32)
    x = tl.load(x_ptr + rows[:, None] * stride_xm + cols[None, :] * stride_xn, mask=mask, other=0.0)
    y = tl.load(y_ptr + rows[:, None] * stride_ym + cols[None, :] * stride_yn, mask=mask, other=0.0)
    z = x.to(tl.float32) + bias[None, :] + alpha * y.to(tl.float32)
    out = _act(z, ACTIVATION)
    tl.store(
        out_ptr + rows[:, None] * stride_om + cols[None, :] * stride_on,
        out.to(out_ptr.dtype.element_ty),
        mask=mask,
    )


@triton.jit
def _add_mul_act_bwd_kernel(
    grad_ptr, x_ptr, bias_ptr, y_ptr, grad_x_ptr, grad_y_ptr, partial_ptr, M, N, alpha, rows_per_group,
    stride_gm, stride_gn, stride_xm, stride_xn, stride_b, stride_ym, stride_yn,
    ACTIVATION: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    # Grid: (column tiles, row groups). grad_x and grad_y are fresh contiguous [M, N] buffers.
    pid_n = tl.program_id(0)
    pid_g = tl.program_id(1)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    col_mask = cols < N
    bias = tl.load(bias_ptr + cols * stride_b, mask=col_mask, other=0.0).to(tl.float32)
    row_start = pid_g * rows_per_group
    row_end = tl.minimum(row_start + rows_per_group, M)
    col_sum = tl.zeros([BLOCK_N], dtype=tl.float32)
    for m0 in range(row_start, row_end, BLOCK_M):
        rows = (m0 + tl.arange(0, BLOCK_M)).to(tl.int64)
        mask = (rows < row_end)[:, None] & col_mask[None, :]
        g = tl.load(grad_ptr + rows[:, None] * stride_gm + cols[None, :] * stride_gn, mask=mask, other=0.0)
        x = tl.load(x_ptr + rows[:, None] * stride_xm + cols[None, :] * stride_xn, mask=mask, other=0.0)
        y = tl.load(y_ptr + rows[:, None] * stride_ym + cols[None, :] * stride_yn, mask=mask, other=0.0)
        z = x.to(tl.float32) + bias[None, :] + alpha * y.to(tl.float32)  # recomputed, not saved
        dz = tl.where(mask, _act_backward(g.to(tl.float32), z, ACTIVATION), 0.0)
        offs = rows[:, None] * N + cols[None, :]
        tl.store(grad_x_ptr + offs, dz.to(grad_x_ptr.dtype.element_ty), mask=mask)
        tl.store(grad_y_ptr + offs, (alpha * dz).to(grad_y_ptr.dtype.element_ty), mask=mask)
        col_sum += tl.sum(dz, axis=0)
    tl.store(partial_ptr + pid_g * N + cols, col_sum, mask=col_mask)  # every group writes its row


_bwd_tuned = triton.autotune(autotune_configs(REDUCE_CONFIGS), key=["M", "N", "ACTIVATION"])(
    _add_mul_act_bwd_kernel
)
_launch_fwd = CachedLauncher(_add_mul_act_fwd_kernel)  # launches cached per shape (kernels.fast_launch)
_launch_bwd = TunedLauncher(_bwd_tuned)


def _check(x: torch.Tensor, bias: torch.Tensor, y: torch.Tensor, alpha, activation: str) -> None:
    _check_activation(activation)
    if isinstance(alpha, torch.Tensor) or not isinstance(alpha, (int, float)):
        raise TypeError(f"add_mul_act: alpha must be a Python float (a constant), got {type(alpha).__name__}")
    for name, t in (("x", x), ("bias", bias), ("y", y)):
        check_tensor("add_mul_act", name, t)
    for name, t in (("x", x), ("bias", bias), ("y", y)):
        check_dtype("add_mul_act", name, t, x)
        check_device("add_mul_act", name, t, x)
        if name != "bias" and t.dim() < 1:
            raise ValueError(f"add_mul_act: {name} must have at least 1 dimension, got a 0-d tensor")
    if y.shape != x.shape:
        raise ValueError(f"add_mul_act: y has shape {tuple(y.shape)}, expected x's {tuple(x.shape)}")
    if bias.dim() != 1 or bias.shape[0] != x.shape[-1]:
        raise ValueError(
            f"add_mul_act: bias must have shape ({x.shape[-1]},) to match x's last dim, "
            f"got {tuple(bias.shape)}"
        )


def _check_activation(activation: str) -> None:
    """Also inside the ops: the kernel's constexpr branches would take any other name for one of these."""
    if activation not in ACTIVATIONS:
        raise ValueError(f"add_mul_act: activation {activation!r} is not one of {ACTIVATIONS}")


def _forward(x: torch.Tensor, bias: torch.Tensor, y: torch.Tensor, alpha: float, activation: str):
    _check_activation(activation)
    out = torch.empty(x.shape, device=x.device, dtype=x.dtype)
    x2, y2, o2 = as_rows(x, "x"), as_rows(y, "y"), as_rows(out, "out")
    M, N = x2.shape
    if M == 0 or N == 0:
        return out
    # Column offsets are int32 in the kernel: an input too large for them along a row is copied.
    x2, y2, bias = int32_offsets(x2), int32_offsets(y2), int32_offsets(bias)
    block_m, block_n = pointwise_tile(M, N, sm_count(x.device))  # a rule, not autotuning: see bias_relu
    args = (x2, bias, y2, o2, M, N, float(alpha), x2.stride(0), x2.stride(1), bias.stride(0),
            y2.stride(0), y2.stride(1), o2.stride(0), o2.stride(1))  # fmt: skip
    constexprs = (("ACTIVATION", activation), ("BLOCK_M", block_m), ("BLOCK_N", block_n))
    _launch_fwd((cdiv(M, block_m) * cdiv(N, block_n),), args, constexprs, 4, 3)
    return out


def _backward(grad, x, bias, y, alpha: float, activation: str):
    """(grad_x, grad_bias, grad_y) from one fused pass plus the small partial-sum reduction."""
    _check_activation(activation)
    grad = grad.to(x.dtype)
    g2, x2, y2 = (int32_offsets(as_rows(t, name)) for t, name in ((grad, "grad"), (x, "x"), (y, "y")))
    bias = int32_offsets(bias)
    M, N = x2.shape
    grad_x = torch.empty((M, N), device=x.device, dtype=x.dtype)
    grad_y = torch.empty((M, N), device=x.device, dtype=x.dtype)
    if M == 0 or N == 0:
        return grad_x.view(x.shape), bias.new_zeros(bias.shape), grad_y.view(x.shape)
    G, rows_per_group = row_groups(M)
    partial = torch.empty((G, N), device=x.device, dtype=torch.float32)
    args = (g2, x2, bias, y2, grad_x, grad_y, partial, M, N, float(alpha), rows_per_group, g2.stride(0),
            g2.stride(1), x2.stride(0), x2.stride(1), bias.stride(0), y2.stride(0), y2.stride(1))  # fmt: skip
    grid_of = lambda meta: (cdiv(N, meta["BLOCK_N"]), G)  # noqa: E731
    _launch_bwd((M, N, activation, x.dtype), grid_of, args, (("ACTIVATION", activation),))
    return grad_x.view(x.shape), reduce_partials(partial, bias.dtype), grad_y.view(x.shape)


# ---- the op (kernels.library): fused_kernels::add_mul_act and its backward --------------------------------
def _fake_forward(x, bias, y, alpha, activation):
    return torch.empty(x.shape, device=x.device, dtype=x.dtype)


def _fake_backward(grad, x, bias, y, alpha, activation):
    return (torch.empty(x.shape, device=x.device, dtype=x.dtype), bias.new_empty(bias.shape),
            torch.empty(x.shape, device=x.device, dtype=x.dtype))  # fmt: skip


_forward_op = custom_op(
    "add_mul_act",
    "(Tensor x, Tensor bias, Tensor y, float alpha, str activation) -> Tensor",
    fake=_fake_forward,
)(_forward)
_backward_op = custom_op(
    "add_mul_act_backward",
    "(Tensor grad, Tensor x, Tensor bias, Tensor y, float alpha, str activation) -> (Tensor, Tensor, Tensor)",
    fake=_fake_backward,
)(_backward)


def _setup_context(ctx, inputs, output):
    x, bias, y, alpha, activation = inputs
    ctx.save_for_backward(x, bias, y)  # inputs only: z and act'(z) are recomputed
    ctx.alpha, ctx.activation = alpha, activation


def _autograd_backward(ctx, grad):
    x, bias, y = ctx.saved_tensors
    grad_x, grad_bias, grad_y = _backward_op(grad, x, bias, y, ctx.alpha, ctx.activation)
    need_x, need_bias, need_y = ctx.needs_input_grad[:3]
    return (
        (grad_x if need_x else None),
        (grad_bias if need_bias else None),
        (grad_y if need_y else None),
        None,
        None,
    )


_forward_op.register_autograd(_autograd_backward, setup_context=_setup_context)


def add_mul_act(
    x: torch.Tensor, bias: torch.Tensor, y: torch.Tensor, alpha: float = 1.0, activation: str = "relu"
) -> torch.Tensor:
    """``act(x + bias + alpha·y)`` in one fused Triton kernel; differentiable in x, bias and y. The op
    ``fused_kernels::add_mul_act``."""
    _check(x, bias, y, alpha, activation)
    return _forward_op(x, bias, y, float(alpha), activation)
