"""LoRALinear against PEFT's LoRA (forward, dX, dA, dB, scale, init range, merge).

peft is in requirements.txt (the GPU image has peft 0.21): a missing peft fails here, never skips.

Like for like: ``get_peft_model`` by default (``autocast_adapter_dtype=True``) stores the adapter of a
bf16/fp16 layer in fp32 and computes the branch in fp32; LoRALinear keeps A and B in the layer's dtype (the
fused kernels take one dtype). The comparison turns PEFT's upcast off, so both compute in the same dtype.
"""

from __future__ import annotations

import copy
import math

import peft
import pytest
import torch
from lora_test_helpers import assert_close
from torch import nn

from kernels import runtime
from lecture_code.lora import apply_lora, lora_modules, merge_lora

pytestmark = pytest.mark.filterwarnings("ignore:lora_linear. general path:RuntimeWarning")

DTYPES = [
    pytest.param(torch.float32, 1e-5, id="fp32"),
    pytest.param(torch.bfloat16, 3e-2, id="bf16", marks=pytest.mark.gpu),  # a few bf16 ulps (2^-7)
]


def _pair(dtype, r=8, alpha=16, use_rslora=False):
    """Two stacked linears adapted by PEFT and by apply_lora, PEFT's (randomised) A and B copied into ours.

    No activation between them: a ReLU would turn rounding differences at h ≈ 0 into flipped gradients."""
    device = runtime.default_device()
    torch.manual_seed(0)
    base = nn.Sequential(nn.Linear(64, 128), nn.Linear(128, 40)).to(device=device, dtype=dtype)
    config = peft.LoraConfig(
        r=r, lora_alpha=alpha, target_modules=["0", "1"], lora_dropout=0.0, use_rslora=use_rslora
    )
    theirs = peft.get_peft_model(copy.deepcopy(base), config, autocast_adapter_dtype=False)
    ours = apply_lora(copy.deepcopy(base), ["0", "1"], r=r, alpha=alpha, use_rslora=use_rslora)
    for name, mine in lora_modules(ours).items():
        layer = theirs.base_model.model.get_submodule(name)
        assert layer.scaling["default"] == mine.scale
        bound = 1 / math.sqrt(mine.in_features)  # both initialise A as kaiming_uniform_(a=√5), B = 0
        assert layer.lora_A["default"].weight.abs().max() <= bound and mine.lora_a.abs().max() <= bound
        assert torch.count_nonzero(layer.lora_B["default"].weight) == 0
        with torch.no_grad():
            layer.lora_B["default"].weight.normal_(0, 0.1)
            mine.lora_a.copy_(layer.lora_A["default"].weight)
            mine.lora_b.copy_(layer.lora_B["default"].weight)
    return theirs, ours


def _grads(model, x):
    x = x.clone().requires_grad_()
    y = model(x)
    y.backward(torch.linspace(-1, 1, y.numel(), device=y.device, dtype=y.dtype).view_as(y))
    named = {n: p.grad for n, p in model.named_parameters() if p.requires_grad}
    return y.detach(), x.grad, named


@pytest.mark.parametrize("backend", ["eager", "fused"])
@pytest.mark.parametrize("dtype, tol", DTYPES)
@pytest.mark.parametrize("use_rslora", [False, True])
def test_forward_and_gradients_match_peft(backend, dtype, tol, use_rslora):
    theirs, ours = _pair(dtype, use_rslora=use_rslora)
    for m in lora_modules(ours).values():
        m.set_backend(backend)
    x = torch.randn(3, 50, 64, device=runtime.default_device(), dtype=dtype)
    y_t, dx_t, g_t = _grads(theirs, x)
    y_o, dx_o, g_o = _grads(ours, x)
    assert_close(y_o, y_t, tol, f"{backend} y")  # relative to the largest element (lora_test_helpers)
    assert_close(dx_o, dx_t, tol, f"{backend} dX")
    for name in lora_modules(ours):
        for ours_part, theirs_part in (("lora_a", "lora_A"), ("lora_b", "lora_B")):
            got = g_o[f"{name}.{ours_part}"]
            want = g_t[f"base_model.model.{name}.{theirs_part}.default.weight"]
            assert_close(got, want, tol, f"{backend} {name}.{ours_part}")
    assert sorted(g_t) == sorted(
        f"base_model.model.{n}.lora_{ab}.default.weight" for n in lora_modules(ours) for ab in "AB"
    )


def test_merge_matches_peft_merge_and_unload():
    theirs, ours = _pair(torch.float32)
    merged_theirs = theirs.merge_and_unload()
    merge_lora(ours)
    for name, mine in lora_modules(ours).items():
        torch.testing.assert_close(mine.base.weight, merged_theirs.get_submodule(name).weight)
