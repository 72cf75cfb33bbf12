"""add_mul_act (Triton) against kernels.reference.add_mul_act: output, grad_x, grad_bias, grad_y."""

from __future__ import annotations

import pytest
import torch

from kernels import reference, runtime
from kernels.library import ops
from kernels.pointwise.add_mul_act import ACTIVATIONS, add_mul_act

# (dtype, atol, rtol). The kernel's contract is "compute in fp32, round once to the input dtype", so the
# reference is evaluated in fp32 on the same inputs and rounded once (eager fp16 rounds z three times).
DTYPES = [
    pytest.param(torch.float32, 2e-5, 1e-5, id="fp32"),  # tl.exp sigmoid/tanh vs torch's; 1 - t² cancels
    pytest.param(torch.float16, 1e-3, 2e-3, id="fp16"),  # 1 ulp (2^-10 relative) where the roundings differ
    pytest.param(torch.bfloat16, 1e-2, 1.6e-2, id="bf16", marks=pytest.mark.gpu),  # 1-2 ulp, bf16 ulp = 2^-8
]
SHAPES = [
    pytest.param((64, 256), id="nice"),
    pytest.param((150, 40), id="odd"),  # masked tails, several row groups in the backward
]
ALPHA = 0.7


def _reference_fp32(x, bias, y, alpha, activation):
    return reference.add_mul_act(x.float(), bias.float(), y.float(), alpha, activation).to(x.dtype)


def _relu_kink(x, bias, y, alpha):
    """Where ``z = x + bias + alpha·y`` is within a few fp32 ulps (of the terms' size) of 0.

    There the sign of z depends on rounding: the GPU kernel contracts ``+ alpha·y`` into one FMA (alpha·y not
    rounded), the reference rounds alpha·y first. E.g. alpha = 0.7 (fp32 0.69999999) and y = -5 give
    alpha·y = -3.49999994, which rounds to -3.5: with x + bias = 3.5 the reference sees z = 0, the FMA
    z = +6e-8, and relu'(z) is 0 on one side and 1 on the other (in bf16, ~3 in 100,000 elements).
    """
    xf, bf, ay = x.float(), bias.float(), alpha * y.float()
    z = xf + bf + ay  # the fp32 reference's z
    return z.abs() <= 4 * torch.finfo(torch.float32).eps * (xf.abs() + bf.abs() + ay.abs())


def _check(x, bias, y, alpha, activation, atol, rtol):
    """Output and all three gradients vs the reference, on a fresh random upstream gradient."""
    mine = [t.detach().clone().requires_grad_() for t in (x, bias, y)]
    ref = [t.detach().clone().requires_grad_() for t in (x, bias, y)]
    out = add_mul_act(*mine[:2], mine[2], alpha, activation)
    expected = _reference_fp32(*ref[:2], ref[2], alpha, activation)
    torch.testing.assert_close(out, expected, atol=atol, rtol=rtol)
    grad = torch.randn_like(expected)
    if activation == "relu":  # the only activation whose derivative jumps: 1 ulp of z can flip relu'(z)
        kink = _relu_kink(x, bias, y, alpha)
        assert kink.sum() <= max(2, kink.numel() // 1000), "the excluded set must stay a handful of elements"
        # Both relu'(z) = 0 and 1 are right there, so a zero upstream gradient removes exactly those elements
        # from grad_x, grad_y and grad_bias alike; every other element is compared at full tolerance.
        grad = grad.masked_fill(kink, 0.0)
    got = torch.autograd.grad(out, mine, grad)
    want = torch.autograd.grad(expected, ref, grad)
    for name, g, w in zip(("grad_x", "grad_bias", "grad_y"), got, want, strict=True):
        assert g.shape == w.shape and g.dtype == w.dtype, name
        torch.testing.assert_close(g, w, atol=atol, rtol=rtol, msg=lambda m, name=name: f"{name}: {m}")


def _inputs(shape, dtype, scale=1.0):
    device = runtime.default_device()
    x = scale * torch.randn(shape, device=device, dtype=dtype)
    bias = torch.randn(shape[-1], device=device, dtype=dtype)
    y = torch.randn(shape, device=device, dtype=dtype)
    return x, bias, y


@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype, atol, rtol", DTYPES)
def test_forward_and_grads_match_reference(activation, shape, dtype, atol, rtol, seed, poison_empty):
    _check(*_inputs(shape, dtype), ALPHA, activation, atol, rtol)


@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("shape", [pytest.param((1, 1), id="1x1"), pytest.param((2, 5, 33), id="3d")])
def test_tiny_and_nd_shapes(activation, shape, seed, poison_empty):
    _check(*_inputs(shape, torch.float32), ALPHA, activation, 2e-5, 1e-5)


@pytest.mark.parametrize("alpha", [-1.5, 0.0, 2])
def test_other_alphas(alpha, seed, poison_empty):
    _check(*_inputs((37, 300), torch.float32), alpha, "sigmoid", 2e-5, 1e-5)


@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_non_contiguous_inputs(activation, seed, poison_empty):
    device = runtime.default_device()
    x = torch.randn(130, 70, device=device).t()  # column stride 70
    y = torch.randn(80, 150, device=device)[5:75, 3:133]  # row stride 150, offset start
    bias = torch.randn(260, device=device)[::2]  # stride 2
    assert not (x.is_contiguous() or y.is_contiguous() or bias.is_contiguous())
    _check(x, bias, y, ALPHA, activation, 2e-5, 1e-5)


@pytest.mark.filterwarnings("ignore:overflow encountered in exp")  # numpy, under the interpreter: exp → inf
@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_saturation_gives_no_nan(activation, seed):
    x, bias, y = _inputs((16, 64), torch.float32, scale=60.0)  # |z| up to ~200: exp overflows to inf
    _check(x, bias, y, ALPHA, activation, 2e-5, 1e-5)


def test_broadcast_upstream_gradient(seed):
    # A gradient with row stride 0 (what a broadcast in the next op gives back) goes in through its strides.
    x, bias, y = _inputs((37, 300), torch.float32)
    mine = [t.clone().requires_grad_() for t in (x, bias, y)]
    ref = [t.clone().requires_grad_() for t in (x, bias, y)]
    grad = torch.randn(300, device=x.device).expand(37, 300)
    got = torch.autograd.grad(add_mul_act(*mine, ALPHA, "gelu_tanh"), mine, grad)
    want = torch.autograd.grad(reference.add_mul_act(*ref, ALPHA, "gelu_tanh"), ref, grad)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, atol=2e-5, rtol=1e-5)


def test_only_some_inputs_need_grad(seed):
    x, bias, y = _inputs((20, 30), torch.float32)
    y.requires_grad_()
    out = add_mul_act(x, bias, y, ALPHA, "silu")
    grad = torch.randn_like(out)
    (gy,) = torch.autograd.grad(out, y, grad)
    yr = y.detach().clone().requires_grad_()
    (want,) = torch.autograd.grad(reference.add_mul_act(x, bias, yr, ALPHA, "silu"), yr, grad)
    torch.testing.assert_close(gy, want, atol=2e-5, rtol=1e-5)


def test_rejects_bad_input():
    with torch.device(runtime.default_device()):  # CPU tensors under the interpreter, CUDA on a GPU
        x, bias, y = torch.randn(4, 8), torch.randn(8), torch.randn(4, 8)
        with pytest.raises(ValueError, match="activation 'tanh' is not one of"):
            add_mul_act(x, bias, y, 1.0, "tanh")
        with pytest.raises(ValueError, match="activation 'gelu' is not one of"):  # the op itself checks too
            ops().add_mul_act(x, bias, y, 1.0, "gelu")
        with pytest.raises(TypeError, match="alpha must be a Python float"):
            add_mul_act(x, bias, y, torch.tensor(1.0), "relu")
        with pytest.raises(ValueError, match="y has shape"):
            add_mul_act(x, bias, torch.randn(4, 9), 1.0, "relu")
        with pytest.raises(ValueError, match="bias must have shape"):
            add_mul_act(x, torch.randn(9), y, 1.0, "relu")
        with pytest.raises(TypeError, match="y has dtype torch.float16 but x has torch.float32"):
            add_mul_act(x, bias, y.half(), 1.0, "relu")
        with pytest.raises(TypeError, match="x has dtype torch.float64, not supported"):
            add_mul_act(x.double(), bias.double(), y.double(), 1.0, "relu")
        with pytest.raises(TypeError, match="x has dtype torch.int32, not supported"):
            add_mul_act(x.int(), bias.int(), y.int(), 1.0, "relu")
        with pytest.raises(ValueError, match="y is on meta but x is on"):
            add_mul_act(x, bias, torch.randn(4, 8, device="meta"), 1.0, "relu")


@pytest.mark.gpu
@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_large_shape_bf16_on_gpu(activation, seed):
    x, bias, y = (t.cuda() for t in _inputs((4099, 3001), torch.bfloat16))
    _check(x, bias, y, ALPHA, activation, 1e-2, 1.6e-2)
