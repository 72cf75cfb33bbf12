"""The QLoRA linear's NF4 GEMM versions (kernels.qlora.linear, version "pairs" or "elements"): output and
every gradient against float64 on the dequantized weight, odd shapes, the path without the NF4 GEMM,
torch.compile, bad input. Its default version, through a 16-bit copy: tests/qlora/test_via_16_bits.py."""

from __future__ import annotations

import pytest
import torch

import kernels
import kernels.qlora.linear as qlinear
from kernels import reference
from kernels.qlora.nf4 import dequantize_nf4, quantize_nf4
from kernels.qlora.nf4_gemm import Config

DEVICE = kernels.default_device()
ON_GPU = DEVICE.type == "cuda"
# (M, K, N, r): K not a multiple of 64 (blocks cut rows of W), N and M odd, r from 1 to past 16, more row
# blocks than a group of the tile order holds (300 rows), K odd (a byte's two values in two rows)
SHAPES = [
    (7, 64, 48, 4),
    (33, 100, 70, 5),
    (1, 80, 33, 1),
    (65, 192, 40, 20),
    (300, 64, 72, 2),
    (9, 33, 40, 3),
]
# each shape with each GEMM version that can take it: "pairs" needs an even K
CASES = [(s, v) for s in SHAPES for v in ("elements", "pairs") if not (v == "pairs" and s[1] % 2)]
DTYPES = [torch.float32, torch.bfloat16] + ([torch.float16] if ON_GPU else [])
TOL = {
    torch.float32: 2e-5,
    torch.float16: 4e-3,
    torch.bfloat16: 2e-2,
}  # of the largest bound (_float64_grads)


def _case(M, K, N, r, dtype, lead=()):
    q = quantize_nf4(torch.randn(N, K, device=DEVICE).to(dtype))
    x = torch.randn(*lead, M, K, device=DEVICE).to(dtype).requires_grad_()
    a = (torch.randn(r, K, device=DEVICE) / K**0.5).to(dtype).requires_grad_()
    b = torch.randn(N, r, device=DEVICE).to(dtype).requires_grad_()
    return q, x, a, b


def _float64_grads(q, x, a, b, scale, dy, absolute=False):
    """y, dX, dA, dB in float64 on the dequantized weight; ``absolute``: of |x|, |W|, |A|, |B| and |dy|, the
    scale a sum's rounding error is bounded by (a result can cancel to far less than its terms)."""
    f = torch.abs if absolute else (lambda t: t)
    x64, a64, b64 = (f(t.detach().double()).requires_grad_() for t in (x, a, b))
    want = reference.lora_linear(x64, f(dequantize_nf4(q, torch.float64)), a64, b64, scale)
    want.backward(f(dy.double()))
    return want.detach(), x64.grad, a64.grad, b64.grad


def _check_against_float64(q, x, a, b, scale, y, dy):
    dtype = x.dtype
    refs = _float64_grads(q, x, a, b, scale, dy)
    bounds = _float64_grads(q, x, a, b, scale, dy, absolute=True)
    for name, got, ref, bound in zip(
        ("y", "dx", "da", "db"), (y, x.grad, a.grad, b.grad), refs, bounds, strict=True
    ):
        assert got is not None and got.dtype == dtype, name
        atol = TOL[dtype] * float(bound.abs().max())
        torch.testing.assert_close(got.double(), ref, rtol=0, atol=atol, msg=name)


@pytest.mark.parametrize("shape, version", CASES, ids=[f"{m}x{k}x{n}r{r}-{v}" for (m, k, n, r), v in CASES])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_output_and_every_gradient(shape, version, dtype, seed, monkeypatch):
    calls = []
    launch = qlinear.nf4_matmul_lowrank

    def spy(*args, **kw):
        calls.append((args[0].device.type, kw["version"]))
        return launch(*args, **kw)

    monkeypatch.setattr(qlinear, "nf4_matmul_lowrank", spy)
    q, x, a, b = _case(*shape, dtype)
    y = qlinear.qlora_linear(x, q, a, b, 0.7, version=version)
    dy = torch.randn_like(y)
    y.backward(dy)
    _check_against_float64(q, x, a, b, 0.7, y, dy)
    assert calls == [(DEVICE.type, version)] * 2, "the NF4 GEMM ran the forward and dX"  # on CUDA if there


@pytest.mark.parametrize("version", qlinear.VERSIONS)
def test_leading_dims_and_no_gradient_for_x(version, seed):
    q, x, a, b = _case(5, 96, 24, 3, torch.float32, lead=(2,))
    x.requires_grad_(False)
    y = qlinear.qlora_linear(x, q, a, b, 2.0, version=version)
    assert y.shape == (2, 5, 24)
    y.backward(dy := torch.randn_like(y))
    assert x.grad is None
    a64, b64 = a.detach().double().requires_grad_(), b.detach().double().requires_grad_()
    want = reference.lora_linear(x.double(), dequantize_nf4(q, torch.float64), a64, b64, 2.0)
    want.backward(dy.double())
    torch.testing.assert_close(
        y.double(), want.detach(), rtol=0, atol=2e-5 * float(want.detach().abs().max())
    )
    torch.testing.assert_close(a.grad.double(), a64.grad, rtol=0, atol=2e-5 * float(a64.grad.abs().max()))
    torch.testing.assert_close(b.grad.double(), b64.grad, rtol=0, atol=2e-5 * float(b64.grad.abs().max()))


def test_without_the_nf4_gemm_the_same_formulas_run_in_torch(seed, monkeypatch):
    """Where the GPU lacks what the NF4 GEMM needs, the op dequantizes W and runs torch's matmuls."""
    monkeypatch.setattr(qlinear, "unmet", lambda needs, device: "a GPU older than sm_80 (patched)")
    monkeypatch.setattr(qlinear, "nf4_matmul_lowrank", lambda *a: pytest.fail("the NF4 GEMM ran"))
    q, x, a, b = _case(9, 100, 30, 4, torch.float32)
    y = qlinear.qlora_linear(x, q, a, b, 0.5, version="pairs")
    y.backward(dy := torch.randn_like(y))
    _check_against_float64(q, x, a, b, 0.5, y, dy)


def test_compiles_to_one_graph(seed):
    backend = "inductor" if ON_GPU else "aot_eager"  # on a CPU the op runs in the interpreter, eagerly
    q, x, a, b = _case(16, 128, 32, 4, torch.float32)
    f = torch.compile(
        lambda x, a, b: qlinear.qlora_linear(x, q, a, b, 0.5, version="pairs"),
        backend=backend,
        fullgraph=True,
    )
    y = f(x, a, b)
    y.backward(dy := torch.randn_like(y))
    _check_against_float64(q, x, a, b, 0.5, y, dy)


def test_bad_input_says_which_argument():
    q, x, a, b = _case(4, 64, 16, 2, torch.float32)
    with pytest.raises(TypeError, match="weight must be an NF4Weight"):
        qlinear.qlora_linear(x, dequantize_nf4(q), a, b, 0.5)
    with pytest.raises(ValueError, match=r"x must be \[\.\.\., K\] with K = weight.shape\[1\] = 64"):
        qlinear.qlora_linear(x[:, :32], q, a, b, 0.5)
    with pytest.raises(ValueError, match="lora_a must be"):
        qlinear.qlora_linear(x, q, a[:, :32], b, 0.5)
    with pytest.raises(ValueError, match=r"lora_b must be \[N, r\] = \(16, 2\)"):
        qlinear.qlora_linear(x, q, a, b[:, :1], 0.5)
    with pytest.raises(TypeError, match="lora_a"):
        qlinear.qlora_linear(x, q, a.double(), b, 0.5)
    with pytest.raises(TypeError, match="scale must be a Python number"):
        qlinear.qlora_linear(x, q, a, b, torch.tensor(0.5))
    with pytest.raises(
        ValueError, match=r"qlora_linear: version='fast' is not one of \('via_16_bits', 'pairs', 'elements'\)"
    ):
        qlinear.qlora_linear(x, q, a, b, 0.5, version="fast")
    q_odd = quantize_nf4(torch.randn(16, 33, device=DEVICE))
    x_odd, a_odd = torch.randn(4, 33, device=DEVICE), torch.randn(2, 33, device=DEVICE)
    with pytest.raises(ValueError, match="version='pairs' needs an even K .*; K = 33"):
        qlinear.qlora_linear(x_odd, q_odd, a_odd, b, 0.5, version="pairs")


@pytest.mark.parametrize("version", ["pairs", "elements"])
@pytest.mark.parametrize("transposed", [True, False], ids=["forward", "dx"])
def test_the_gemm_writes_every_element_of_a_poisoned_output(transposed, version, seed):
    """Tiles past a group of the tile order, edges on every side: each element written, none left NaN."""
    n, k, M, r = 72, 100, 300, 3
    q = quantize_nf4(torch.randn(n, k, device=DEVICE))
    inner, cols = (k, n) if transposed else (n, k)
    a, t = torch.randn(M, inner, device=DEVICE), torch.randn(M, r, device=DEVICE)
    rr = torch.randn(r, cols, device=DEVICE)
    out = torch.full((M, cols), float("nan"), device=DEVICE)
    got = qlinear.nf4_matmul_lowrank(a, q.packed, q.absmax(), q.shape, 64, transposed, t, rr, out, version)
    w = dequantize_nf4(q, torch.float64)
    want = a.double() @ (w.t() if transposed else w) + t.double() @ rr.double()
    assert got is out and not bool(out.isnan().any())
    torch.testing.assert_close(out.double(), want, rtol=0, atol=2e-5 * float(want.abs().max()))


CONFIGS = [
    Config(32, 32, 32, 4, 1),  # 64 % 32 == 0: one absmax per row of a tile where K is a multiple of 64
    Config(16, 64, 128, 4, 1),  # 128 deep and wide: two blocks in a row of a tile, an absmax per byte
    Config(16, 16, 16, 4, 1),  # tl.dot's smallest tile
]


@pytest.mark.parametrize("config", CONFIGS, ids=["row-scale", "wide", "smallest"])
@pytest.mark.parametrize("k", [128, 100])
@pytest.mark.parametrize("transposed", [True, False], ids=["forward", "dx"])
def test_each_config_of_the_pairs_version_equals_the_reference(config, k, transposed, seed):
    """Every launch shape the benchmark may pick: the same products as the dequantized weight's, bf16."""
    n, M, r = 72, 40, 3
    q = quantize_nf4(torch.randn(n, k, device=DEVICE))
    inner, cols = (k, n) if transposed else (n, k)
    a = torch.randn(M, inner, device=DEVICE).bfloat16()
    t, rr = torch.randn(M, r, device=DEVICE).bfloat16(), torch.randn(r, cols, device=DEVICE).bfloat16()
    out = torch.full((M, cols), float("nan"), device=DEVICE, dtype=torch.bfloat16)
    qlinear.nf4_matmul_lowrank(a, q.packed, q.absmax(), q.shape, 64, transposed, t, rr, out, "pairs", config)
    w = dequantize_nf4(q, torch.bfloat16).double()
    want = a.double() @ (w.t() if transposed else w) + t.double() @ rr.double()
    torch.testing.assert_close(out.double(), want, rtol=0, atol=TOL[torch.bfloat16] * float(want.abs().max()))
