"""QLoRALinear: a frozen NF4 base plus LoRA, fused and eager, against float64 on the dequantized weight;
state_dict round trip, dtype moves that leave the scales alone, training moves only A and B."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import kernels
from kernels.qlora.nf4 import dequantize_nf4
from lecture_code.lora import qlora_layer
from lecture_code.lora.qlora_layer import QLoRALinear

DEVICE = kernels.default_device()


def _layer(backend, bias=True, seed_b=True, version=None):
    base = nn.Linear(96, 40, bias=bias, device=DEVICE)
    layer = QLoRALinear(base, r=4, alpha=8, backend=backend, version=version)
    if seed_b:
        with torch.no_grad():
            layer.lora_b.copy_(torch.randn_like(layer.lora_b))
    return layer


BACKENDS = [("fused", None), ("fused", "pairs"), ("eager", None)]


@pytest.mark.parametrize("backend, version", BACKENDS, ids=["fused", "fused-pairs", "eager"])
@pytest.mark.parametrize("bias", [True, False])
def test_forward_and_gradients_against_float64(backend, version, bias, seed, monkeypatch):
    versions, real = [], qlora_layer.qlora_linear

    def spy(*args, version):
        versions.append(version)
        return real(*args, version=version)

    monkeypatch.setattr(qlora_layer, "qlora_linear", spy)
    layer = _layer(backend, bias, version=version)
    x = torch.randn(3, 7, 96, device=DEVICE, requires_grad=True)
    y = layer(x)
    y.backward(dy := torch.randn_like(y))
    w = dequantize_nf4(layer.weight_nf4, torch.float64)
    x64, a64, b64 = (t.detach().double().requires_grad_() for t in (x, layer.lora_a, layer.lora_b))
    want = x64 @ w.t() + 2.0 * (x64 @ a64.t()) @ b64.t()
    if bias:
        want = want + layer.bias.double()
    want.backward(dy.double())
    for got, ref in (
        (y, want),
        (x.grad, x64.grad),
        (layer.lora_a.grad, a64.grad),
        (layer.lora_b.grad, b64.grad),
    ):
        ref = ref.detach()
        torch.testing.assert_close(got.double(), ref, rtol=0, atol=2e-5 * float(ref.abs().max()))
    assert versions == ([version] if backend == "fused" else []), "the fused backend passes its version"
    assert layer.bias is None or layer.bias.grad is None
    assert [n for n, p in layer.named_parameters() if p.requires_grad] == ["lora_a", "lora_b"]


def test_state_dict_round_trip_and_a_dtype_move_keeps_the_scales(seed):
    layer = _layer("fused")
    twin = QLoRALinear(nn.Linear(96, 40, device=DEVICE), r=4, alpha=8)
    twin.load_state_dict(layer.state_dict())
    x = torch.randn(5, 96, device=DEVICE)
    torch.testing.assert_close(twin(x), layer(x), rtol=0, atol=0)
    before = dequantize_nf4(layer.weight_nf4, torch.float32)
    layer.to(torch.float16)  # the adapter and bias move to fp16; the NF4 scales stay fp32 bits
    assert layer.lora_a.dtype == torch.float16 and layer.absmax_scales.dtype == torch.int32
    assert torch.equal(dequantize_nf4(layer.weight_nf4, torch.float32), before)


def test_fresh_adapter_is_the_quantized_base_and_bits_are_counted():
    base = nn.Linear(128, 64, device=DEVICE)
    layer = QLoRALinear(base, r=8, backend="fused")
    x = torch.randn(4, 128, device=DEVICE)
    want = x @ dequantize_nf4(layer.weight_nf4).t() + base.bias
    torch.testing.assert_close(layer(x), want, rtol=1e-5, atol=1e-5)  # B = 0: the branch adds nothing
    assert layer.bits_per_parameter() == pytest.approx(
        4 + 8 / 64 + (32 + 32) / (64 * 128)
    )  # one scale, an offset


def test_bad_construction_says_why():
    with pytest.raises(TypeError, match="QLoRALinear wraps an nn.Linear"):
        QLoRALinear(nn.Conv1d(3, 3, 1), r=2)
    with pytest.raises(ValueError, match="r must be an int >= 1"):
        QLoRALinear(nn.Linear(64, 8), r=0)
    with pytest.raises(ValueError, match="backend='compile' is not one of"):
        QLoRALinear(nn.Linear(64, 8), r=2, backend="compile")
    with pytest.raises(
        ValueError, match=r"version='fast' is not one of \('via_16_bits', 'pairs', 'elements'\)"
    ):
        QLoRALinear(nn.Linear(64, 8), r=2, version="fast")
