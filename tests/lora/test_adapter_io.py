"""Adapter files: only A, B and their config; loading into a fresh base model gives the adapted model back."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from lecture_code.lora import (
    adapter_state_dict,
    apply_lora,
    load_adapter,
    lora_modules,
    merge_lora,
    save_adapter,
)


def _base(seed: int) -> nn.Sequential:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(12, 20), nn.ReLU(), nn.Linear(20, 6))


def _adapted(seed: int) -> nn.Sequential:
    model = apply_lora(_base(seed), ["0", "2"], r=3, alpha=5)
    for m in lora_modules(model).values():
        with torch.no_grad():
            m.lora_a.normal_()
            m.lora_b.normal_()
    return model


def test_state_dict_holds_only_the_adapters(seed):
    tensors = adapter_state_dict(_adapted(seed))
    assert sorted(tensors) == ["0.lora_a", "0.lora_b", "2.lora_a", "2.lora_b"]
    assert tensors["0.lora_a"].shape == (3, 12) and tensors["2.lora_b"].shape == (6, 3)


def test_round_trip_into_a_fresh_base(tmp_path, seed):
    model = _adapted(seed)
    path = save_adapter(model, tmp_path / "adapter.pt")
    saved = torch.load(path, weights_only=True)
    assert set(saved) == {"format", "modules", "tensors"}
    assert saved["modules"]["0"] == {
        "r": 3, "alpha": 5.0, "dropout": 0.0, "use_rslora": False, "in_features": 12, "out_features": 20
    }  # fmt: skip
    fresh = load_adapter(_base(seed), path)  # same base weights (same seed), no adapters yet
    x = torch.randn(4, 12)
    torch.testing.assert_close(fresh(x), model(x), rtol=0, atol=0)
    assert [n for n, p in fresh.named_parameters() if p.requires_grad] == [
        "0.lora_a", "0.lora_b", "2.lora_a", "2.lora_b"
    ]  # fmt: skip
    other = load_adapter(_base(seed + 1), saved)  # another base: the adapter is the same, the output is not
    assert torch.equal(other[0].lora_a, model[0].lora_a)
    assert not torch.allclose(other(x), model(x))


def test_loading_into_existing_adapters_copies_the_tensors(tmp_path, seed):
    path = save_adapter(_adapted(seed), tmp_path / "a.pt")
    target = apply_lora(_base(seed), ["0", "2"], r=3, alpha=5, backend="fused")
    load_adapter(target, path)
    assert target[0].backend == "fused" and torch.equal(target[2].lora_b, _adapted(seed)[2].lora_b)


def test_mismatches_are_named(tmp_path, seed):
    path = save_adapter(_adapted(seed), tmp_path / "a.pt")
    wider = nn.Sequential(nn.Linear(12, 21), nn.ReLU(), nn.Linear(21, 6))
    with pytest.raises(ValueError, match=r"'0' must be a linear layer with weight \[out, in\] = \[20, 12\]"):
        load_adapter(wider, path)
    with pytest.raises(ValueError, match="no module '2'"):
        load_adapter(nn.Sequential(nn.Linear(12, 20)), path)
    with pytest.raises(ValueError, match="'0' has r=4.*saved adapter has r=3"):
        load_adapter(apply_lora(_base(seed), ["0"], r=4), path)
    with pytest.raises(ValueError, match="not a format-1 adapter file"):
        load_adapter(_base(seed), {"tensors": {}})


def test_a_merged_model_has_no_separate_adapter(seed):
    with pytest.raises(RuntimeError, match="'0' is merged; unmerge before saving"):
        adapter_state_dict(merge_lora(_adapted(seed)))
    with pytest.raises(ValueError, match="no LoRALinear layers"):
        adapter_state_dict(_base(seed))
