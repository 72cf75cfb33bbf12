"""The original lecture's LoRA pattern, re-created: its adapter is not registered when .to() copies, its
base is not frozen; LoRALinear's adapter is registered and its base is frozen."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from lecture_code.lora.original_pattern import compare_after_steps, default_target, mistaken_lora_mlp


def test_when_to_copies_the_adapter_is_unregistered_and_the_base_trains():
    original, right = compare_after_steps(torch.float64, steps=2)
    assert (original.rank, original.scale) == (right.rank, right.scale) == (5, 0.5)  # like for like
    assert not original.adapter_registered and not original.base_frozen
    assert original.base_changed and not original.a_changed and not original.b_changed
    assert right.adapter_registered and right.base_frozen
    assert not right.base_changed and right.a_changed and right.b_changed
    assert right.optimizer_numel == 5 * (16 + 8) + 5 * (8 + 4)  # A and B of both layers, nothing else
    assert original.optimizer_numel == (16 * 8 + 8) + (8 * 4 + 4)  # the base layers, nothing else


def test_when_to_does_not_copy_mistake_one_hides_but_the_base_still_trains():
    original, _ = compare_after_steps("cpu", steps=2)
    assert original.adapter_registered and original.a_changed
    assert not original.base_frozen and original.base_changed


def test_the_pattern_itself():
    model = mistaken_lora_mlp(torch.float64)
    layer = model[0]
    assert type(layer.lora.A) is torch.Tensor and not isinstance(layer.lora.A, nn.Parameter)
    assert layer.lora.A.grad_fn is not None  # a copy computed from the orphaned float32 parameter
    assert layer.linear.requires_grad is False and layer.linear.weight.requires_grad  # a plain attribute


@pytest.mark.gpu
def test_on_the_gpu_the_target_is_cuda_as_in_the_original():
    assert default_target() == "cuda"
    original, right = compare_after_steps()
    assert not original.adapter_registered and right.adapter_registered
