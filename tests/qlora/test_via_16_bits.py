"""qlora_linear's default version, through a 16-bit copy (kernels.qlora.via_16_bits): output and every
gradient against float64 on the dequantized weight, the dequantize pass run in the forward and again in the
backward (and no NF4 GEMM), no 16-bit W saved for the backward, the path without the dequantize kernel,
torch.compile (bad input: test_qlora_linear.py, the checks are shared)."""

from __future__ import annotations

import pytest
import torch

import kernels.qlora.linear as qlinear
import kernels.qlora.via_16_bits as via
from tests.qlora.test_qlora_linear import DEVICE, DTYPES, ON_GPU, _case, _check_against_float64

SHAPES = [(7, 64, 48, 4), (33, 100, 70, 5), (1, 80, 33, 1), (65, 192, 40, 20), (9, 33, 40, 3)]


def _linear(x, q, a, b, scale, version=None):
    return qlinear.qlora_linear(x, q, a, b, scale, version=version)


@pytest.mark.parametrize("version", [None, "via_16_bits"], ids=["default", "named"])
@pytest.mark.parametrize("shape", SHAPES, ids=[f"{m}x{k}x{n}r{r}" for m, k, n, r in SHAPES])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).removeprefix("torch."))
def test_output_and_every_gradient(shape, dtype, version, seed, monkeypatch):
    calls, real = [], via.dequantize_nf4_kernel

    def spy(*args, **kw):
        calls.append(args[0].device.type)
        return real(*args, **kw)

    monkeypatch.setattr(via, "dequantize_nf4_kernel", spy)
    monkeypatch.setattr(qlinear, "nf4_matmul_lowrank", lambda *a, **kw: pytest.fail("the NF4 GEMM ran"))
    q, x, a, b = _case(*shape, dtype)
    y = _linear(x, q, a, b, 0.7, version)
    y.backward(dy := torch.randn_like(y))
    _check_against_float64(q, x, a, b, 0.7, y, dy)
    assert calls == [DEVICE.type] * 2, "the dequantize pass ran in the forward and again in the backward"


def test_no_16_bit_weight_is_saved_for_the_backward(seed):
    q, x, a, b = _case(16, 128, 96, 4, torch.float32)
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(tuple(t.shape)) or t, lambda t: t):
        y = _linear(x, q, a, b, 0.5)
    assert saved and q.shape not in saved, f"saved for the backward: {saved}"
    y.sum().backward()
    assert x.grad is not None and a.grad is not None and b.grad is not None


def test_without_the_dequantize_kernel_torch_dequantizes(seed, monkeypatch):
    monkeypatch.setattr(via, "unmet", lambda needs, device: "a GPU older than sm_80 (patched)")
    monkeypatch.setattr(via, "dequantize_nf4_kernel", lambda *a: pytest.fail("the dequantize kernel ran"))
    q, x, a, b = _case(9, 100, 30, 4, torch.float32)
    y = _linear(x, q, a, b, 0.5)
    y.backward(dy := torch.randn_like(y))
    _check_against_float64(q, x, a, b, 0.5, y, dy)


def test_compiles_to_one_graph(seed):
    backend = "inductor" if ON_GPU else "aot_eager"
    q, x, a, b = _case(16, 128, 32, 4, torch.float32)
    f = torch.compile(lambda x, a, b: _linear(x, q, a, b, 0.5), backend=backend, fullgraph=True)
    y = f(x, a, b)
    y.backward(dy := torch.randn_like(y))
    _check_against_float64(q, x, a, b, 0.5, y, dy)
