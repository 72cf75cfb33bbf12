"""NaN, ±inf and -0.0 through every kernel, forward and backward, against torch.

A diverging run shows up as NaN; a kernel that turns NaN into a number hides it (``tl.maximum(z, 0)`` as a
ReLU did). So every kernel gets fresh random inputs with NaN, +inf, -inf and -0.0 planted in them (and in the
upstream gradient), and its outputs and gradients must match torch's: the same NaNs (``equal_nan=True``), the
same infinities, and where torch's result is a zero, the same sign of zero. One column is built so that
``z = -0.0`` and ``z = +0.0`` exactly, which is where the sign of a ReLU's zero shows.

The reference runs on the CPU on every machine: there ``torch.relu(-0.0)`` is ``-0.0`` (torch 2.13), which is
the kernels' contract. On CUDA torch's relu is a max instruction after a NaN check, and the sign of zero it
gives is not part of that contract, so GPU runs compare against the CPU too.
"""

from __future__ import annotations

import pytest
import torch

import kernels.cuda as kernels_cuda
from kernels import reference, runtime
from kernels.mlp.fused_mlp import FINAL_ACTIVATIONS, fused_mlp
from kernels.pointwise.add_mul_act import ACTIVATIONS, add_mul_act
from kernels.pointwise.bias_relu import bias_relu

# numpy, running the kernels under the interpreter, warns where it computes inf - inf, inf · 0 or exp(1000)
pytestmark = pytest.mark.filterwarnings(
    "ignore:invalid value encountered:RuntimeWarning", "ignore:overflow encountered:RuntimeWarning"
)

SPECIALS = (float("nan"), float("inf"), float("-inf"), -0.0)
SHAPE = (150, 45)  # odd columns; 150 rows = 2 row groups in the backward reductions
ALPHA = 0.5  # a power of two: alpha·y is exact, so a fused multiply-add on the GPU rounds z as torch does
# (dtype, atol, rtol) for values that are not special; the special ones must match exactly.
DTYPES = [
    pytest.param(torch.float32, 2e-5, 1e-5, id="fp32"),  # tl.exp sigmoid/tanh vs torch's; sums reordered
    pytest.param(torch.float16, 1e-3, 2e-3, id="fp16"),  # 1 ulp (2^-10 relative) where roundings differ
]


def _planted(shape, dtype, per_value: int = 3) -> torch.Tensor:
    """Fresh ``randn`` values with each of :data:`SPECIALS` at ``per_value`` random positions."""
    t = torch.randn(shape, dtype=dtype)
    flat = t.view(-1)
    where = torch.randperm(flat.numel())[: per_value * len(SPECIALS)].view(len(SPECIALS), per_value)
    for value, idx in zip(SPECIALS, where, strict=True):
        flat[idx] = value
    return t


def _signed_zero_column(x, bias, y=None) -> None:
    """In one random column make ``z = x + bias (+ ALPHA·y)`` exactly -0.0 (even rows) and +0.0 (odd rows)."""
    col = int(torch.randint(x.shape[-1], ()))
    bias[col] = -0.0
    x[0::2, col] = -0.0  # -0.0 + -0.0 (+ ALPHA·-0.0) = -0.0
    x[1::2, col] = 0.0  # +0.0 + -0.0 (+ ALPHA·-0.0) = +0.0
    if y is not None:
        y[:, col] = -0.0


def _leaves(tensors, device):
    """Fresh copies on ``device`` that require grad (the kernel's and the reference's inputs never alias)."""
    return [t.detach().clone().to(device).requires_grad_() for t in tensors]


def _assert_matches(got, want, name, atol, rtol, check_zero_sign=True, exact_zeros=None):
    """``got`` (any device) equals the CPU reference ``want``: NaN where it is NaN, the same infinities, the
    other values within tolerance, and (``check_zero_sign``) the sign of every zero of ``want``, or only of
    those where ``exact_zeros`` is set: a 16-bit result that is zero only because a tiny fp32 value
    underflowed takes that value's sign, which a different but equally accurate formula may flip."""
    got = got.detach().cpu()
    torch.testing.assert_close(got, want, atol=atol, rtol=rtol, equal_nan=True, msg=lambda m: f"{name}: {m}")
    if check_zero_sign:
        zeros = (want == 0) if exact_zeros is None else (want == 0) & exact_zeros
        wrong = torch.signbit(got[zeros]) != torch.signbit(want[zeros])
        assert not wrong.any(), f"{name}: {int(wrong.sum())} of {int(zeros.sum())} zeros have the wrong sign"


def _assert_has_specials(expected, negative_zero: bool):
    """The planted values reached the reference's output, so the comparison covers them."""
    assert expected.isnan().any(), "no NaN in the reference output: the planting is broken"
    if negative_zero:
        assert ((expected == 0) & torch.signbit(expected)).any(), "no -0.0 in the reference output"


@pytest.mark.parametrize("dtype, atol, rtol", DTYPES)
def test_bias_relu(dtype, atol, rtol, seed, poison_empty):
    x, bias = _planted(SHAPE, dtype), _planted(SHAPE[-1:], dtype, per_value=1)
    _signed_zero_column(x, bias)
    grad = _planted(SHAPE, dtype)
    ref = _leaves((x, bias), "cpu")
    expected = reference.bias_relu(*ref)
    want = torch.autograd.grad(expected, ref, grad)
    _assert_has_specials(expected, negative_zero=True)

    mine = _leaves((x, bias), runtime.default_device())
    out = bias_relu(*mine)
    got = torch.autograd.grad(out, mine, grad.to(out.device))
    _assert_matches(out, expected, "out", 0, 0)  # one fp32 add, one rounding: exact
    _assert_matches(got[0], want[0], "grad_x", 0, 0)
    _assert_matches(got[1], want[1], "grad_bias", atol, rtol, check_zero_sign=False)  # sums: order differs


@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("dtype, atol, rtol", DTYPES)
def test_add_mul_act(activation, dtype, atol, rtol, seed, poison_empty):
    x, y, bias = _planted(SHAPE, dtype), _planted(SHAPE, dtype), _planted(SHAPE[-1:], dtype, per_value=1)
    _signed_zero_column(x, bias, y)
    grad = _planted(SHAPE, dtype)
    ref = _leaves((x, bias, y), "cpu")
    # The kernel's contract: compute in fp32, round once to the dtype (see test_add_mul_act.py).
    expected = reference.add_mul_act(*(t.float() for t in ref), ALPHA, activation).to(dtype)
    want = torch.autograd.grad(expected, ref, grad)
    _assert_has_specials(expected, negative_zero=activation != "sigmoid")  # sigmoid(±0) = 0.5
    ref32 = _leaves([t.float() for t in (x, bias, y)], "cpu")  # the same values before the one rounding
    expected32 = reference.add_mul_act(*ref32, ALPHA, activation)
    slope = torch.autograd.grad(expected32, ref32[0], torch.ones_like(expected32), retain_graph=True)[0]
    grad_x32, _, grad_y32 = torch.autograd.grad(expected32, ref32, grad.float())
    # A gradient zero is grad · act'(z) with grad = ±0: its sign is the sign of act'(z), settled only where
    # |act'(z)| exceeds the tolerance (or is relu's exact 0). As act'(z) underflows for large |z|, equally
    # accurate formulas give -tiny, 0 or +tiny there, and the zero's sign with them.
    settled = (slope.abs() > atol) | ((slope == 0) & (activation == "relu"))
    exact = {"out": expected32 == 0, "grad_x": (grad_x32 == 0) & settled, "grad_y": (grad_y32 == 0) & settled}

    mine = _leaves((x, bias, y), runtime.default_device())
    out = add_mul_act(*mine, ALPHA, activation)
    got = torch.autograd.grad(out, mine, grad.to(out.device))
    _assert_matches(out, expected, "out", atol, rtol, exact_zeros=exact["out"])
    for name, g, w in zip(("grad_x", "grad_bias", "grad_y"), got, want, strict=True):
        _assert_matches(g, w, name, atol, rtol, check_zero_sign=name in exact, exact_zeros=exact.get(name))


@pytest.mark.parametrize("final", FINAL_ACTIVATIONS)
@pytest.mark.parametrize("planted_in", ["x", "b1", "b1-nan"])
def test_fused_mlp(final, planted_in, seed, poison_empty):
    # x: each special value in a row of its own. A NaN makes its row NaN. The +inf and the -inf each sit in a
    # column of x whose W1 weights switch on exactly one hidden unit (h = +inf there, 0 elsewhere), so their
    # rows come out ±inf, not NaN; and H = 20 pads to 32, whose padded units (x · 0 = NaN there) must stay 0.
    # b1: +inf, -inf and -0.0 in hidden units of their own (all outputs ±inf before the final activation; a
    # unit off; nothing). b1-nan: one NaN hidden unit makes every output NaN.
    # fp32 only: forward only, and the ReLU is the same code for every dtype.
    M, K, H, N = 37, 45, 20, 3
    x = torch.randn(M, K)
    w1, w2 = torch.randn(H, K) / K**0.5, torch.randn(N, H) / H**0.5
    b1, b2 = torch.randn(H), torch.randn(N)
    if planted_in == "x":
        nan_col, pos_col, neg_col, *zero_cols = torch.randperm(K)[:5].tolist()
        on_pos, on_neg = torch.randint(H, (2,)).tolist()
        x[0, nan_col], x[2, pos_col], x[4, neg_col], x[6, zero_cols] = SPECIALS
        w1[:, pos_col] = -w1[:, pos_col].abs()  # +inf · w1 < 0: unit off ...
        w1[on_pos, pos_col] *= -1  # ... except this one: h = +inf
        w1[:, neg_col] = w1[:, neg_col].abs()  # -inf · w1 > 0: unit off ...
        w1[on_neg, neg_col] *= -1  # ... except this one: h = +inf
    elif planted_in == "b1":
        b1[torch.randperm(H)[:3]] = torch.tensor(SPECIALS[1:])  # +inf, -inf, -0.0
    else:
        b1[int(torch.randint(H, ()))] = float("nan")
    params = (x, w1, b1, w2, b2)
    before_final = reference.fused_mlp(*params, final_activation="none")
    assert not before_final.isfinite().all(), "no NaN or inf reached the output layer: the planting is broken"
    expected = reference.fused_mlp(*params, final_activation=final)
    with torch.no_grad():
        out = fused_mlp(*(t.to(runtime.default_device()) for t in params), final_activation=final)
    # No zero-sign check: a zero out of a dot product has no sign torch defines (it depends on the order).
    _assert_matches(out, expected, "out", 1e-5, 1e-5, check_zero_sign=False)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_cuda_extension(dtype, seed):
    # The CUDA C++ kernels (kernels/cuda/pointwise.cuh), forward only: relu is `z < 0 ? 0 : z` there too.
    x, y, bias = _planted(SHAPE, dtype), _planted(SHAPE, dtype), _planted(SHAPE[-1:], dtype, per_value=1)
    _signed_zero_column(x, bias, y)
    expected_br = reference.bias_relu(x, bias)
    expected_amr = reference.add_mul_act(x.float(), bias.float(), y.float(), ALPHA, "relu").to(dtype)
    cx, cy, cb = (t.cuda() for t in (x, y, bias))
    _assert_matches(kernels_cuda.bias_relu(cx, cb), expected_br, "bias_relu", 0, 0)
    _assert_matches(kernels_cuda.add_mul_relu(cx, cb, cy, ALPHA), expected_amr, "add_mul_relu", 0, 0)
