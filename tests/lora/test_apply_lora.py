"""apply_lora: PEFT-style target_modules (exact, suffix, glob), only nn.Linear wrapped, clear errors, the
rest of the model frozen; parameter counts; model-wide backend switch and merge."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from kernels import runtime
from lecture_code.lora import (
    LoRALinear,
    apply_lora,
    linear_names,
    lora_modules,
    merge_lora,
    parameter_counts,
    set_backend,
    unmerge_lora,
)


class Tower(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(10, 8)
        self.bottom = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 8))
        self.top = nn.Sequential(nn.Linear(8, 4), nn.ReLU(), nn.Linear(4, 1))

    def forward(self, ids):
        return self.top(self.bottom(self.embed(ids)))


def test_targets_exactly_the_named_linears():
    model = apply_lora(Tower(), ["bottom.0", "top.2"], r=2)
    assert list(lora_modules(model)) == ["bottom.0", "top.2"]
    assert isinstance(model.bottom[2], nn.Linear) and isinstance(model.top[0], nn.Linear)


def test_glob_and_suffix_targets():
    assert list(lora_modules(apply_lora(Tower(), ["bottom.*"], r=2))) == ["bottom.0", "bottom.2"]
    assert list(lora_modules(apply_lora(Tower(), ["2"], r=2))) == ["bottom.2", "top.2"]  # PEFT's suffix rule
    assert list(lora_modules(apply_lora(Tower(), "*", r=2))) == ["bottom.0", "bottom.2", "top.0", "top.2"]


def test_a_target_that_matches_no_linear_is_an_error_naming_the_linears():
    with pytest.raises(ValueError, match=r"'dense_arch\.\*' matches no nn.Linear of Tower.*'bottom\.0'"):
        apply_lora(Tower(), ["bottom.0", "dense_arch.*"], r=2)
    with pytest.raises(ValueError, match="'embed' matches no nn.Linear"):  # an Embedding is not wrapped
        apply_lora(Tower(), ["embed"], r=2)


def test_an_already_adapted_layer_is_not_wrapped_twice():
    model = apply_lora(Tower(), ["bottom.0"], r=2)
    assert "bottom.0.base" not in linear_names(model)
    with pytest.raises(ValueError, match=r"already have an adapter"):
        apply_lora(model, ["bottom.0"], r=2)
    apply_lora(model, ["top.*"], r=3)  # adding adapters elsewhere keeps the first ones trainable
    assert all(m.lora_a.requires_grad for m in lora_modules(model).values())


def test_everything_but_the_adapters_is_frozen():
    model = apply_lora(Tower(), ["bottom.*", "top.*"], r=2)
    trainable = sorted(n for n, p in model.named_parameters() if p.requires_grad)
    assert trainable == sorted(f"{m}.lora_{ab}" for m in lora_modules(model) for ab in "ab")
    total = sum(p.numel() for p in Tower().parameters())
    adapters = 2 * (8 + 16) + 2 * (16 + 8) + 2 * (8 + 4) + 2 * (4 + 1)
    assert parameter_counts(model) == (adapters, total + adapters)
    assert "trainable 130 of" in str(parameter_counts(model))
    kept = apply_lora(Tower(), ["top.0"], r=2, freeze_base=False)
    assert kept.embed.weight.requires_grad and not kept.top[0].base.weight.requires_grad


@pytest.mark.filterwarnings("ignore:lora_linear. general path:RuntimeWarning")  # top.2 is 4 -> 1: v1
def test_set_backend_and_merge_act_on_every_adapter(seed):
    dev = runtime.default_device()  # the fused backend runs where the kernels run
    model = apply_lora(Tower().to(dev), ["bottom.*", "top.*"], r=2)
    for m in lora_modules(model).values():
        with torch.no_grad():
            m.lora_b.normal_()
    ids = torch.randint(0, 10, (6,), device=dev)
    before = model(ids)
    assert {m.backend for m in lora_modules(set_backend(model, "fused")).values()} == {"fused"}
    torch.testing.assert_close(model(ids), before, atol=1e-5, rtol=1e-5)
    merge_lora(model)
    assert all(m.merged for m in lora_modules(model).values())
    torch.testing.assert_close(model(ids), before, atol=1e-5, rtol=1e-5)
    unmerge_lora(model)
    torch.testing.assert_close(model(ids), before, atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="no LoRALinear layers"):
        merge_lora(Tower())


def test_arguments_are_passed_to_every_layer():
    model = apply_lora(Tower(), ["top.*"], r=4, alpha=2, dropout=0.25, use_rslora=True)
    for m in lora_modules(model).values():
        assert isinstance(m, LoRALinear)
        assert (m.r, m.alpha, m.dropout_p, m.scale) == (4, 2.0, 0.25, 1.0)
    with pytest.raises(ValueError, match="needs dropout=0"):
        apply_lora(Tower(), ["top.*"], r=4, dropout=0.1, backend="fused")
    with pytest.raises(ValueError, match="target_modules is empty"):
        apply_lora(Tower(), [], r=2)
