"""LoRALinear: eager and fused against a float64 reference (output, dX, dA, dB), PEFT's init and scale,
a truly frozen base, merge/unmerge, the dropout policy, bad arguments."""

from __future__ import annotations

import math

import pytest
import torch
from lora_test_helpers import assert_close, reference_outputs
from torch import nn

from kernels import runtime
from lecture_code.lora import LoRALinear

pytestmark = pytest.mark.filterwarnings("ignore:lora_linear. general path:RuntimeWarning")  # odd K, N: v1

# (dtype, tol) against float64, relative to the largest term (tests/kernels/test_lora.py explains the form).
DTYPES = [
    pytest.param(torch.float32, 2e-5, id="fp32"),  # summation order only
    pytest.param(torch.float16, 4e-3, id="fp16"),  # a few fp16 ulps (2^-10): t, s·t and y are rounded
]
SHAPES = [  # (leading dims of x, K, N, r)
    pytest.param((24,), 32, 16, 4, id="fast-path"),  # K, N multiples of 8: v3 on the fused backend
    pytest.param((2, 5), 13, 7, 3, id="odd-3d"),  # odd K, N (v1, the general path), a 3-D input
]


def _layer(K, N, r, dtype, backend, bias=True, device=None, **kw) -> LoRALinear:
    base = nn.Linear(K, N, bias=bias).to(dtype=dtype, device=device or runtime.default_device())
    return LoRALinear(base, r, alpha=2.0 * r + 1, backend=backend, **kw)


@pytest.mark.parametrize("backend", ["eager", "fused"])
@pytest.mark.parametrize("lead, K, N, r", SHAPES)
@pytest.mark.parametrize("dtype, tol", DTYPES)
def test_forward_and_every_gradient_match_float64(backend, lead, K, N, r, dtype, tol, seed, randomize_b):
    layer = _layer(K, N, r, dtype, backend)
    randomize_b(layer)
    x = torch.randn(*lead, K, device=layer.base.weight.device, dtype=dtype, requires_grad=True)
    y = layer(x)
    assert y.dtype == dtype and y.shape == (*lead, N)
    grad = torch.randn_like(y)
    got = (y, *torch.autograd.grad(y, (x, layer.lora_a, layer.lora_b), grad))
    want = reference_outputs(layer, x, grad)
    for name, g, w in zip(("y", "dX", "dA", "dB"), got, want, strict=True):
        assert_close(g, w, tol, f"{backend} {name}")


def test_eager_and_fused_agree_without_bias(seed, randomize_b):
    layer = _layer(16, 24, 8, torch.float32, "eager", bias=False)
    randomize_b(layer)
    x = torch.randn(9, 16, device=layer.base.weight.device)
    eager = layer(x)
    fused = layer.set_backend("fused")(x)
    torch.testing.assert_close(fused, eager, atol=1e-5, rtol=1e-5)


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["eager", "fused"])
def test_bf16_on_the_gpu(backend, seed, randomize_b):
    layer = _layer(256, 512, 16, torch.bfloat16, backend, device="cuda")
    randomize_b(layer)
    x = torch.randn(3, 100, 256, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    assert layer.fused_path(300)[1] is None  # the fast path
    y = layer(x)
    assert y.is_cuda
    grad = torch.randn_like(y)
    got = (y, *torch.autograd.grad(y, (x, layer.lora_a, layer.lora_b), grad))
    want = reference_outputs(layer, x, grad)
    for name, g, w in zip(("y", "dX", "dA", "dB"), got, want, strict=True):
        assert_close(g, w, 3e-2, f"{backend} {name}")  # a few bf16 ulps (2^-7)


def test_init_is_peft_s():
    """A: kaiming_uniform_(a=√5) drawn from the same generator state (bound 1/√K); B: zeros."""
    torch.manual_seed(123)
    layer = LoRALinear(nn.Linear(40, 6), r=5)
    torch.manual_seed(123)
    nn.Linear(40, 6)  # the base layer's own init draws first, as above
    expected = torch.empty(5, 40)
    nn.init.kaiming_uniform_(expected, a=math.sqrt(5))
    assert torch.equal(layer.lora_a.detach(), expected)
    assert layer.lora_a.abs().max() <= 1 / math.sqrt(40)
    assert torch.count_nonzero(layer.lora_b) == 0
    assert layer.lora_a.shape == (5, 40) and layer.lora_b.shape == (6, 5)  # PEFT's lora_A/lora_B layout


@pytest.mark.parametrize("use_rslora, scale", [(False, 16 / 4), (True, 16 / 2)])
def test_scale_is_alpha_over_r_or_sqrt_r(use_rslora, scale):
    layer = LoRALinear(nn.Linear(8, 8), r=4, alpha=16, use_rslora=use_rslora)
    assert layer.scale == scale
    assert LoRALinear(nn.Linear(8, 8), r=4).scale == 1.0  # alpha defaults to r


@pytest.mark.parametrize("backend", ["eager", "fused"])
def test_fresh_adapter_leaves_the_output_unchanged(backend, seed):
    base = nn.Linear(24, 16).to(runtime.default_device())
    x = torch.randn(10, 24, device=base.weight.device)
    with torch.no_grad():
        expected = base(x)
        got = LoRALinear(base, r=4, backend=backend)(x)
    if backend == "eager":
        assert torch.equal(got, expected)  # base(x) + exactly 0
    else:  # the fused kernel computes x Wᵀ itself: equal up to summation order
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("backend", ["eager", "fused"])
def test_base_is_truly_frozen(backend, seed, randomize_b):
    layer = _layer(16, 8, 2, torch.float32, backend)
    randomize_b(layer)
    assert not layer.base.weight.requires_grad and not layer.base.bias.requires_grad
    trainable = [n for n, p in layer.named_parameters() if p.requires_grad]
    assert trainable == ["lora_a", "lora_b"]
    weight, bias = layer.base.weight.clone(), layer.base.bias.clone()
    optimizer = torch.optim.SGD([p for p in layer.parameters() if p.requires_grad], lr=0.1)
    a_before = layer.lora_a.detach().clone()
    layer(torch.randn(4, 16, device=weight.device)).square().sum().backward()
    optimizer.step()
    assert layer.base.weight.grad is None and layer.base.bias.grad is None
    assert torch.equal(layer.base.weight, weight) and torch.equal(layer.base.bias, bias)
    assert not torch.equal(layer.lora_a, a_before)


def test_fused_refuses_a_base_that_was_unfrozen_again(randomize_b):
    layer = _layer(16, 8, 2, torch.float32, "fused")
    layer.base.weight.requires_grad_(True)
    with pytest.raises(RuntimeError, match="weight requires grad"):
        layer(torch.randn(3, 16, device=layer.base.weight.device))


@pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-6), (torch.float64, 1e-14)])
def test_merge_unmerge_round_trip(dtype, tol, seed, randomize_b):
    layer = LoRALinear(nn.Linear(20, 12).to(dtype), r=3, alpha=6)
    randomize_b(layer)
    x = torch.randn(7, 20, dtype=dtype)
    weight = layer.base.weight.detach().clone()
    before = layer(x).detach()
    layer.merge()
    assert layer.merged
    torch.testing.assert_close(layer.base.weight, weight + layer.scale * layer.lora_b @ layer.lora_a)
    torch.testing.assert_close(layer(x), before, atol=tol * 10, rtol=tol * 10)
    with pytest.raises(RuntimeError, match="already merged"):
        layer.merge()
    layer.unmerge()
    assert not layer.merged
    torch.testing.assert_close(layer.base.weight, weight, atol=tol, rtol=0)
    torch.testing.assert_close(layer(x), before, atol=tol * 10, rtol=tol * 10)
    with pytest.raises(RuntimeError, match="not merged"):
        layer.unmerge()


def test_dropout_applies_to_the_branch_input_only(seed, randomize_b):
    layer = LoRALinear(nn.Linear(16, 8), r=4, dropout=0.5)
    randomize_b(layer)
    x = torch.randn(32, 16)
    torch.manual_seed(seed + 1)
    y = layer(x)
    torch.manual_seed(seed + 1)
    dropped = nn.functional.dropout(x, 0.5, training=True)
    expected = layer.base(x) + layer.scale * dropped @ layer.lora_a.t() @ layer.lora_b.t()
    torch.testing.assert_close(y, expected)
    layer.eval()  # dropout off: the plain LoRA output
    expected = layer.base(x) + layer.scale * x @ layer.lora_a.t() @ layer.lora_b.t()
    torch.testing.assert_close(layer(x), expected)


def test_fused_backend_refuses_dropout():
    with pytest.raises(ValueError, match="backend='fused' needs dropout=0.*backend='eager'") as refused:
        LoRALinear(nn.Linear(8, 8), r=2, dropout=0.1, backend="fused")
    # the reason the kernels have: one x for both, no mask (not "reads x once": v3's producers read x again)
    assert "one x for both the base GEMM and the LoRA branch and draw no dropout mask" in str(refused.value)
    assert "reads x once" not in str(refused.value)
    layer = LoRALinear(nn.Linear(8, 8), r=2, dropout=0.1)
    with pytest.raises(ValueError, match="needs dropout=0"):
        layer.set_backend("fused")
    assert layer.backend == "eager"


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"base": nn.Conv1d(3, 3, 1), "r": 2}, TypeError, "wraps an nn.Linear, got Conv1d"),
        ({"r": 0}, ValueError, "r must be an int >= 1"),
        ({"r": 2.5}, ValueError, "r must be an int >= 1"),
        ({"r": 2, "alpha": float("nan")}, ValueError, "alpha must be a finite number"),
        ({"r": 2, "dropout": 1.0}, ValueError, r"dropout must be in \[0, 1\)"),
        ({"r": 2, "backend": "triton"}, ValueError, "backend='triton' is not one of"),
    ],
)
def test_bad_arguments_say_what_is_wrong(kwargs, error, match):
    kwargs = {"base": nn.Linear(4, 4), **kwargs}
    with pytest.raises(error, match=match):
        LoRALinear(**kwargs)


def test_fused_path_names_the_kernel_and_why():
    fast = LoRALinear(nn.Linear(64, 32), r=8)
    odd = LoRALinear(nn.Linear(13, 64), r=8)
    version, why = fast.fused_path(256)
    assert version in ("v2", "v3") and why is None  # the tensor-descriptor kernels (lora_linear's default)
    version, why = odd.fused_path(256)
    assert version == "v1" and "K = 13" in why
