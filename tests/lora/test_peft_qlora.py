"""PEFT with a 4-bit base (lecture_code.lora.peft_qlora): a PEFT model whose LoRA Linear bases are in NF4
and run the fused QLoRA kernel, against the same PEFT model on its own path over the dequantized weights —
outputs and every gradient; adapters PEFT's forward keeps, listed once; disabled adapters; the adapter state
dict; merge refused; no 16-bit base weight left."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
from peft import get_peft_model_state_dict

from kernels.qlora.nf4 import dequantize_nf4
from lecture_code.lora import peft_qlora
from lecture_code.lora.nf4_linear import NF4Linear
from lecture_code.lora.peft_qlora import FusedQLoraLinear, use_qlora_kernels
from tests.lora.test_peft_kernels import DTYPES, Q, V, _assert_same, _inputs, _model


@pytest.fixture
def kernel_calls(monkeypatch):
    """(device, shape of x) per call of the fused QLoRA op, so a test sees that the kernel ran."""
    calls, real = [], peft_qlora.qlora_linear

    def counted(x, *args, **kw):
        calls.append((x.device.type, tuple(x.shape)))
        return real(x, *args, **kw)

    monkeypatch.setattr(peft_qlora, "qlora_linear", counted)
    return calls


def _pair(dtype=torch.float32, **kw):
    """(ours: use_qlora_kernels applied; the reference: the same PEFT model with each adapted base weight
    replaced by its NF4 round trip, on PEFT's own forward)."""
    ours = _model(dtype, **kw)
    ref = copy.deepcopy(ours)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        report = use_qlora_kernels(ours)
    for name in report.fused:
        base = ref.get_submodule(name).get_base_layer()
        with torch.no_grad():
            base.weight.copy_(dequantize_nf4(ours.get_submodule(name).get_base_layer().weight_nf4, dtype))
    return ours, ref, report


@pytest.mark.parametrize("dtype, tol", DTYPES)
def test_outputs_and_every_gradient_equal_peft_on_the_dequantized_weights(dtype, tol, seed, kernel_calls):
    ours, ref, report = _pair(dtype)
    assert report.fused == [Q, V] and not report.kept
    assert type(ours.get_submodule(Q)) is FusedQLoraLinear
    assert type(ours.get_submodule(Q).get_base_layer()) is NF4Linear
    x, ids, grad = _inputs(dtype)
    _assert_same(ours, ref, tol, x, ids, grad)
    assert kernel_calls == [(x.device.type, (2, 5, 32)), (x.device.type, (2, 5, 48))]  # q and v, once each


def test_no_16_bit_base_weight_is_left_and_the_adapter_state_dict_is_unchanged(seed):
    model = _model()
    before = {k: v.clone() for k, v in get_peft_model_state_dict(model).items()}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing to warn about here
        use_qlora_kernels(model)
    after = get_peft_model_state_dict(model)
    assert after.keys() == before.keys() and all(torch.equal(after[k], before[k]) for k in before)
    names = [n for n, _ in model.named_parameters()]
    assert not any(n.startswith((f"{Q}.base_layer.weight", f"{V}.base_layer.weight")) for n in names)
    assert f"{Q}.base_layer.packed" in dict(model.named_buffers())
    assert [n for n, p in model.named_parameters() if p.requires_grad] == [
        n for n in names if "lora_" in n
    ]  # the adapters alone train (the NF4 base's bias is frozen)


def test_dropout_stays_on_peft_over_the_nf4_base_and_is_listed_once(seed, kernel_calls):
    ours = _model(lora_dropout=0.1)
    ref = copy.deepcopy(ours)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report = use_qlora_kernels(ours)
    assert len([w for w in caught if "stay on PEFT's path" in str(w.message)]) == 1
    assert report.fused == [Q, V]  # quantized all the same: the memory is QLoRA's point
    assert report.kept == {
        f"{Q}[default]": "lora_dropout = 0.1 > 0",
        f"{V}[default]": "lora_dropout = 0.1 > 0",
    }
    for name in report.fused:
        with torch.no_grad():
            base = ref.get_submodule(name).get_base_layer()
            base.weight.copy_(
                dequantize_nf4(ours.get_submodule(name).get_base_layer().weight_nf4, torch.float32)
            )
    ours.eval(), ref.eval()  # dropout off: the same function, on PEFT's path
    _assert_same(ours, ref, 1e-5, *_inputs())
    assert kernel_calls == []


def test_disabled_adapters_give_the_nf4_base_alone(seed, kernel_calls):
    ours, ref, _ = _pair()
    x, ids, _grad = _inputs()
    with ours.disable_adapter(), ref.disable_adapter(), torch.no_grad():
        torch.testing.assert_close(ours(x, ids), ref(x, ids), rtol=1e-5, atol=1e-5)
    assert kernel_calls == []


def test_merge_is_refused_with_the_reason(seed):
    ours, _, _ = _pair()
    with pytest.raises(NotImplementedError, match="stored in NF4 and cannot take the adapter's update"):
        ours.merge_and_unload()


def test_use_fused_kernels_after_leaves_the_nf4_layers_alone(seed):
    from lecture_code.lora import use_fused_kernels

    ours, ref, _ = _pair()
    report = use_fused_kernels(ours)
    assert report.fused == [] and report.kept == {}
    assert type(ours.get_submodule(Q)) is FusedQLoraLinear
