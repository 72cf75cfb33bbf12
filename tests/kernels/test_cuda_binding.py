"""kernels.cuda (the CUDA C++ extension) against kernels.reference: bias_relu and add_mul_relu. GPU only.

The first test to run builds the extension (about a minute, then cached by torch). Inputs are fresh random
tensors; outputs are poisoned through the caching allocator (see ``poison``); shapes cover 1x1, odd sizes,
rows that are no multiple of anything, more elements than one grid covers (the grid-stride loop), inputs
offset by one element (which defeats the 16-byte path), and bad inputs that must raise clear errors.
"""

from __future__ import annotations

import pytest
import torch

import kernels.cuda as kernels_cuda

pytestmark = pytest.mark.gpu

# (dtype, atol, rtol) for add_mul_relu against the reference evaluated in fp32 and rounded once (the
# kernel's contract). bias_relu is compared exactly: one fp32 add and one rounding, the same as eager.
DTYPES = [
    pytest.param(torch.float32, 1e-5, 1e-5, id="fp32"),  # fma(alpha, y, x + b) vs separately rounded ops
    pytest.param(torch.float16, 1e-3, 2e-3, id="fp16"),  # 1 ulp (2^-10 relative) at a rounding boundary
    pytest.param(torch.bfloat16, 1e-2, 1.6e-2, id="bf16"),  # 1 ulp, bf16 ulp = 2^-8 relative
]
SHAPES = [
    pytest.param((1, 1), id="1x1"),
    pytest.param((3, 5), id="3x5"),
    pytest.param((1000, 4097), id="1000x4097"),  # cols odd: scalar path, many grid-stride steps
    pytest.param((65, 1024), id="65x1024"),  # 16-byte path, rows a multiple of nothing
    pytest.param((4097, 8), id="4097x8"),  # one pack per row (fp16/bf16)
    pytest.param((8192, 4096), id="8192x4096"),  # ~31 grid-stride steps (fp32, H100), 124 scalar
    pytest.param((2, 3, 64), id="3d"),  # leading dims flattened into rows
    pytest.param((0, 16), id="empty"),
]
ALPHA = 0.7


@pytest.fixture(scope="module")
def ops():
    """The built extension's ops (builds on first use); a build failure fails here, once."""
    return kernels_cuda.load()


def poison(like: torch.Tensor) -> None:
    """Free a NaN-filled block of ``like``'s size: torch's caching allocator usually gives it to the next
    allocation of that size (the op's output), so an element the kernel never writes stays NaN and fails."""
    torch.full(like.shape, float("nan"), device=like.device, dtype=like.dtype)


def randn_at(shape, dtype, offset=0):
    """Random contiguous tensor starting ``offset`` elements into its allocation (1 → not 16-byte aligned)."""
    n = 1
    for s in shape:
        n *= s
    return torch.randn(n + offset, device="cuda", dtype=dtype)[offset:].view(shape)


def _reference_add_mul_relu(x, bias, y, alpha):
    from kernels.reference import add_mul_act

    return add_mul_act(x.float(), bias.float(), y.float(), alpha, "relu").to(x.dtype)


def _check_bias_relu(x, bias):
    from kernels.reference import bias_relu

    poison(x)
    out = kernels_cuda.bias_relu(x, bias)
    assert out.is_contiguous() and out.device == x.device
    torch.testing.assert_close(out, bias_relu(x, bias), atol=0, rtol=0)


def _check_add_mul_relu(x, bias, y, alpha, atol, rtol):
    poison(x)
    out = kernels_cuda.add_mul_relu(x, bias, y, alpha)
    assert out.is_contiguous() and out.device == x.device
    torch.testing.assert_close(out, _reference_add_mul_relu(x, bias, y, alpha), atol=atol, rtol=rtol)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype, atol, rtol", DTYPES)
def test_bias_relu_matches_reference(ops, shape, dtype, atol, rtol, seed):
    _check_bias_relu(randn_at(shape, dtype), randn_at(shape[-1:], dtype))


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype, atol, rtol", DTYPES)
def test_add_mul_relu_matches_reference(ops, shape, dtype, atol, rtol, seed):
    x, bias, y = randn_at(shape, dtype), randn_at(shape[-1:], dtype), randn_at(shape, dtype)
    _check_add_mul_relu(x, bias, y, ALPHA, atol, rtol)


@pytest.mark.parametrize("misaligned", ["x", "bias", "y"])
@pytest.mark.parametrize("dtype, atol, rtol", DTYPES)
def test_misaligned_input_takes_the_scalar_path(ops, misaligned, dtype, atol, rtol, seed):
    # 64 x 256: the 16-byte path would be taken if every pointer were aligned; one is offset by 1 element.
    shape = (64, 256)
    x = randn_at(shape, dtype, offset=int(misaligned == "x"))
    bias = randn_at(shape[-1:], dtype, offset=int(misaligned == "bias"))
    y = randn_at(shape, dtype, offset=int(misaligned == "y"))
    assert {"x": x, "bias": bias, "y": y}[misaligned].data_ptr() % 16 != 0
    if misaligned != "y":
        _check_bias_relu(x, bias)
    _check_add_mul_relu(x, bias, y, ALPHA, atol, rtol)


@pytest.mark.parametrize("alpha", [-1.5, 0.0, 2])
def test_other_alphas(ops, alpha, seed):
    shape = (37, 300)
    x, bias, y = (randn_at(s, torch.float32) for s in (shape, shape[-1:], shape))
    _check_add_mul_relu(x, bias, y, alpha, 1e-5, 1e-5)


def test_nan_propagates_like_torch_relu(ops):
    x = torch.randn(4, 8, device="cuda")
    x[1, 3] = float("nan")
    out = kernels_cuda.bias_relu(x, torch.randn(8, device="cuda"))
    assert out[1, 3].isnan() and out.isnan().sum() == 1


def test_launches_on_the_current_stream(ops, seed):
    # On a side stream: sleep, then write x. A kernel launched on another stream would not wait for the
    # write and would read the NaN poison left in x's block.
    shape = (256, 1024)
    bias = torch.randn(shape[-1], device="cuda")
    src = torch.randn(shape, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        poison(src)
        x = torch.empty_like(src)
        torch.cuda._sleep(50_000_000)  # ~30 ms of GPU time on this stream
        x.copy_(src)
        out = kernels_cuda.bias_relu(x, bias)
    side.synchronize()
    from kernels.reference import bias_relu

    torch.testing.assert_close(out, bias_relu(src, bias), atol=0, rtol=0)


def test_meta_tensors_give_shape_and_dtype(ops):
    x = torch.empty(5, 7, device="meta", dtype=torch.bfloat16)
    out = ops.add_mul_relu(x, torch.empty(7, device="meta", dtype=torch.bfloat16), x, 0.5)
    assert out.shape == (5, 7) and out.dtype == torch.bfloat16 and out.device.type == "meta"


def _cuda(*shape, dtype=torch.float32):
    return torch.randn(*shape, device="cuda", dtype=dtype)


def _int32(*shape):
    return torch.randint(-5, 5, shape, device="cuda", dtype=torch.int32)


_br = lambda x, bias: kernels_cuda.bias_relu(x, bias)
_amr = lambda x, bias, y: kernels_cuda.add_mul_relu(x, bias, y, 1.0)
F64, F16, BF16 = torch.float64, torch.float16, torch.bfloat16

BAD_INPUTS = [
    pytest.param(
        lambda: _br(torch.randn(4, 8), torch.randn(8)), ValueError, "must be a CUDA tensor", id="cpu"
    ),
    pytest.param(lambda: _br(_cuda(4, 8), torch.randn(8)), ValueError, "bias is on cpu", id="bias-on-cpu"),
    pytest.param(
        lambda: _br(_cuda(4, 8, dtype=F64), _cuda(8, dtype=F64)), TypeError, "not supported", id="f64"
    ),
    pytest.param(lambda: _br(_int32(4, 8), _int32(8)), TypeError, "not supported", id="int32"),
    pytest.param(lambda: _br(_cuda(4, 8), _cuda(8, dtype=F16)), TypeError, "bias has dtype", id="bias-dtype"),
    pytest.param(
        lambda: _br(_cuda(4, 8), _cuda(7)), ValueError, r"bias must have shape \[8\]", id="bias-len"
    ),
    pytest.param(
        lambda: _br(_cuda(4, 8), _cuda(1, 8)), ValueError, r"bias must have shape \[8\]", id="bias-2d"
    ),
    pytest.param(
        lambda: _br(_cuda(8, 4).t(), _cuda(8)), ValueError, "x must be contiguous", id="x-transposed"
    ),
    pytest.param(lambda: _br(_cuda(16)[::2], _cuda(8)), ValueError, "x must be contiguous", id="x-strided"),
    pytest.param(
        lambda: _br(_cuda(4, 8), _cuda(16)[::2]), ValueError, "bias must be contiguous", id="bias-strided"
    ),
    pytest.param(lambda: _br(_cuda(()), _cuda(1)), ValueError, "at least 1 dimension", id="0d"),
    pytest.param(
        lambda: _amr(_cuda(4, 8), _cuda(8), _cuda(4, 9)), ValueError, "y must have x's shape", id="y-shape"
    ),
    pytest.param(
        lambda: _amr(_cuda(4, 8), _cuda(8), _cuda(4, 8, dtype=BF16)), TypeError, "y has dtype", id="y-dtype"
    ),
    pytest.param(
        lambda: _amr(_cuda(4, 8), _cuda(8), _cuda(8, 4).t()), ValueError, "y must be contiguous", id="y-t"
    ),
]


@pytest.mark.parametrize("call, error, message", BAD_INPUTS)
def test_bad_inputs_raise_clear_errors(ops, call, error, message):
    with pytest.raises(error, match=message):
        call()
