"""The QLoRA linear through a 16-bit copy (kernels.qlora.via_16_bits): output and every gradient against
float64 on the dequantized weight, the dequantize pass run in the forward and again in the backward, no 16-bit
W saved for the backward, the path without the dequantize kernel, torch.compile, bad input."""

from __future__ import annotations

import pytest
import torch

import kernels.qlora.via_16_bits as via
from kernels.qlora.nf4 import dequantize_nf4
from tests.qlora.test_qlora_linear import DEVICE, DTYPES, ON_GPU, _case, _check_against_float64

SHAPES = [(7, 64, 48, 4), (33, 100, 70, 5), (1, 80, 33, 1), (65, 192, 40, 20), (9, 33, 40, 3)]


@pytest.mark.parametrize("shape", SHAPES, ids=[f"{m}x{k}x{n}r{r}" for m, k, n, r in SHAPES])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).removeprefix("torch."))
def test_output_and_every_gradient(shape, dtype, seed, monkeypatch):
    calls, real = [], via.dequantize_nf4_kernel

    def spy(*args, **kw):
        calls.append(args[0].device.type)
        return real(*args, **kw)

    monkeypatch.setattr(via, "dequantize_nf4_kernel", spy)
    q, x, a, b = _case(*shape, dtype)
    y = via.qlora_linear_via_16_bits(x, q, a, b, 0.7)
    y.backward(dy := torch.randn_like(y))
    _check_against_float64(q, x, a, b, 0.7, y, dy)
    assert calls == [DEVICE.type] * 2, "the dequantize pass ran in the forward and again in the backward"


def test_no_16_bit_weight_is_saved_for_the_backward(seed):
    q, x, a, b = _case(16, 128, 96, 4, torch.float32)
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(tuple(t.shape)) or t, lambda t: t):
        y = via.qlora_linear_via_16_bits(x, q, a, b, 0.5)
    assert saved and q.shape not in saved, f"saved for the backward: {saved}"
    y.sum().backward()
    assert x.grad is not None and a.grad is not None and b.grad is not None


def test_without_the_dequantize_kernel_torch_dequantizes(seed, monkeypatch):
    monkeypatch.setattr(via, "unmet", lambda needs, device: "a GPU older than sm_80 (patched)")
    monkeypatch.setattr(via, "dequantize_nf4_kernel", lambda *a: pytest.fail("the dequantize kernel ran"))
    q, x, a, b = _case(9, 100, 30, 4, torch.float32)
    y = via.qlora_linear_via_16_bits(x, q, a, b, 0.5)
    y.backward(dy := torch.randn_like(y))
    _check_against_float64(q, x, a, b, 0.5, y, dy)


def test_compiles_to_one_graph(seed):
    backend = "inductor" if ON_GPU else "aot_eager"
    q, x, a, b = _case(16, 128, 32, 4, torch.float32)
    f = torch.compile(
        lambda x, a, b: via.qlora_linear_via_16_bits(x, q, a, b, 0.5), backend=backend, fullgraph=True
    )
    y = f(x, a, b)
    y.backward(dy := torch.randn_like(y))
    _check_against_float64(q, x, a, b, 0.5, y, dy)


def test_bad_input_names_this_function():
    q, x, a, b = _case(4, 64, 16, 2, torch.float32)
    with pytest.raises(TypeError, match="qlora_linear_via_16_bits: weight must be an NF4Weight"):
        via.qlora_linear_via_16_bits(x, dequantize_nf4(q), a, b, 0.5)
    with pytest.raises(ValueError, match=r"qlora_linear_via_16_bits: lora_b must be \[N, r\] = \(16, 2\)"):
        via.qlora_linear_via_16_bits(x, q, a, b[:, :1], 0.5)
