"""bias_relu (Triton v1) against kernels.reference.bias_relu: forward, grad_x, grad_bias, out=, in place."""

from __future__ import annotations

import pytest
import torch

from kernels import reference, runtime
from kernels.pointwise.bias_relu import bias_relu

# (dtype, atol, rtol) for grad_bias. The forward and grad_x are compared bit-exactly: both sides round the
# same fp32 value (x + bias, or grad masked) once to the dtype.
DTYPES = [
    pytest.param(torch.float32, 1e-5, 1e-5, id="fp32"),  # column sums added in another order (row groups)
    pytest.param(torch.float16, 1e-3, 2e-3, id="fp16"),  # fp32 sums in another order, rounded: ≤ 1-2 ulp
    pytest.param(torch.bfloat16, 1e-2, 1.6e-2, id="bf16", marks=pytest.mark.gpu),  # same, bf16 ulp = 2^-8
]
SHAPES = [
    pytest.param((64, 256), id="nice"),
    pytest.param((150, 40), id="odd-rows"),  # several row groups in backward, masked row tails
    pytest.param((37, 300), id="odd-both"),  # tails in both dims of the 16x256 tile
    pytest.param((1, 1), id="1x1"),
    pytest.param((2, 5, 33), id="3d"),
]


def _inputs(shape, dtype):
    device = runtime.default_device()
    x = torch.randn(shape, device=device, dtype=dtype)
    bias = torch.randn(shape[-1], device=device, dtype=dtype)
    return x, bias


def _check_grads(x, bias, dtype, atol, rtol, inplace=False):
    """Outputs and both gradients vs the reference, on a fresh random upstream gradient."""
    x1, b1 = x.detach().clone().requires_grad_(), bias.detach().clone().requires_grad_()
    x2, b2 = x.detach().clone().requires_grad_(), bias.detach().clone().requires_grad_()
    # in place needs a non-leaf to overwrite; `* 1` makes one without changing values or gradients
    out = bias_relu(x1 * 1 if inplace else x1, b1, inplace=inplace)
    expected = reference.bias_relu(x2, b2)
    grad = torch.randn_like(expected)
    gx, gb = torch.autograd.grad(out, (x1, b1), grad)
    ex_gx, ex_gb = torch.autograd.grad(expected, (x2, b2), grad)
    torch.testing.assert_close(out, expected, atol=0, rtol=0)
    torch.testing.assert_close(gx, ex_gx, atol=0, rtol=0)
    torch.testing.assert_close(gb, ex_gb, atol=atol, rtol=rtol)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype, atol, rtol", DTYPES)
def test_forward_and_grads_match_reference(shape, dtype, atol, rtol, seed, poison_empty):
    x, bias = _inputs(shape, dtype)
    _check_grads(x, bias, dtype, atol, rtol)


@pytest.mark.parametrize("dtype, atol, rtol", DTYPES)
def test_inplace_forward_and_grads(dtype, atol, rtol, seed, poison_empty):
    x, bias = _inputs((37, 300), dtype)
    _check_grads(x, bias, dtype, atol, rtol, inplace=True)
    with torch.no_grad():
        y = x.clone()
        ret = bias_relu(y, bias, inplace=True)
    assert ret.data_ptr() == y.data_ptr()
    torch.testing.assert_close(y, reference.bias_relu(x, bias), atol=0, rtol=0)


@pytest.mark.parametrize(
    "make_view",
    [
        pytest.param(lambda t: t.t(), id="transposed"),  # column stride != 1
        pytest.param(lambda t: t[3:40, 5:205], id="sliced"),  # row stride > N, offset start
        pytest.param(lambda t: t[::2, ::3], id="strided"),
    ],
)
def test_non_contiguous_inputs(make_view, seed, poison_empty):
    base = torch.randn(90, 260, device=runtime.default_device())
    x = make_view(base)
    assert not x.is_contiguous()
    bias_full = torch.randn(2 * x.shape[-1], device=base.device)
    _check_grads(x, bias_full[::2], torch.float32, 1e-5, 1e-5)  # the bias is strided too


def test_broadcast_upstream_gradient(seed):
    # A gradient with row stride 0 (what a broadcast in the next op gives back) goes in through its strides.
    x, bias = _inputs((37, 300), torch.float32)
    x1, b1 = x.clone().requires_grad_(), bias.clone().requires_grad_()
    x2, b2 = x.clone().requires_grad_(), bias.clone().requires_grad_()
    grad = torch.randn(300, device=x.device).expand(37, 300)
    got = torch.autograd.grad(bias_relu(x1, b1), (x1, b1), grad)
    want = torch.autograd.grad(reference.bias_relu(x2, b2), (x2, b2), grad)
    torch.testing.assert_close(got[0], want[0], atol=0, rtol=0)
    torch.testing.assert_close(got[1], want[1], atol=1e-5, rtol=1e-5)


def test_non_contiguous_inplace_writes_only_the_view(seed):
    base = torch.randn(50, 300, device=runtime.default_device())
    before = base.clone()
    view = base[:, 7:207]
    bias = torch.randn(200, device=base.device)
    bias_relu(view, bias, inplace=True)
    torch.testing.assert_close(view, reference.bias_relu(before[:, 7:207], bias), atol=0, rtol=0)
    torch.testing.assert_close(base[:, :7], before[:, :7], atol=0, rtol=0)
    torch.testing.assert_close(base[:, 207:], before[:, 207:], atol=0, rtol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
def test_out_buffer_poisoned_with_nan(dtype, seed):
    x, bias = _inputs((37, 300), dtype)
    big = torch.full((40, 320), float("nan"), device=x.device, dtype=dtype)
    out = big[1:38, 10:310]  # a strided out=; what is outside it must stay NaN (nothing written there)
    ret = bias_relu(x, bias, out=out)
    assert ret.data_ptr() == out.data_ptr()
    torch.testing.assert_close(out, reference.bias_relu(x, bias), atol=0, rtol=0)
    assert big[0].isnan().all() and big[38:].isnan().all()
    assert big[:, :10].isnan().all() and big[:, 310:].isnan().all()


def test_empty_input():
    x = torch.randn(0, 8, device=runtime.default_device())
    assert bias_relu(x, torch.randn(8, device=x.device)).shape == (0, 8)


def test_rejects_bad_input():
    with torch.device(runtime.default_device()):  # CPU tensors under the interpreter, CUDA on a GPU
        x = torch.randn(4, 8)
        with pytest.raises(ValueError, match="bias must have shape"):
            bias_relu(x, torch.randn(7))
        with pytest.raises(ValueError, match="bias must have shape"):
            bias_relu(x, torch.randn(1, 8))
        with pytest.raises(TypeError, match="bias has dtype torch.float16 but x has torch.float32"):
            bias_relu(x, torch.randn(8, dtype=torch.float16))
        with pytest.raises(TypeError, match="x has dtype torch.float64, not supported"):
            bias_relu(x.double(), torch.randn(8).double())
        with pytest.raises(TypeError, match="x has dtype torch.int32, not supported"):
            bias_relu(x.int(), torch.randn(8).int())
        with pytest.raises(ValueError, match="out has shape"):
            bias_relu(x, torch.randn(8), out=torch.empty(4, 9))
        with pytest.raises(ValueError, match="not both"):
            bias_relu(x, torch.randn(8), out=torch.empty(4, 8), inplace=True)
        with pytest.raises(RuntimeError, match="out= does not support autograd"):
            bias_relu(x.requires_grad_(), torch.randn(8), out=torch.empty(4, 8))
        with pytest.raises(ValueError, match="bias is on meta but x is on"):
            bias_relu(torch.randn(4, 8), torch.randn(8, device="meta"))
        with pytest.raises(ValueError, match="cannot be flattened"):
            bias_relu(torch.randn(3, 4, 8).transpose(0, 1), torch.randn(8), inplace=True)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_large_shape_and_inplace_on_gpu(dtype, seed):
    # A large odd shape, in place and out of place: many programs, masked tails in both dimensions.
    x = torch.randn(4099, 3001, device="cuda", dtype=dtype)
    bias = torch.randn(3001, device="cuda", dtype=dtype)
    expected = reference.bias_relu(x, bias)
    y = x.clone()
    bias_relu(y, bias, inplace=True)
    torch.testing.assert_close(y, expected, atol=0, rtol=0)
    torch.testing.assert_close(bias_relu(x, bias), expected, atol=0, rtol=0)
