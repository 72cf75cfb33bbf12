"""Fixtures for the LoRA module tests (helpers live in ``lora_test_helpers.py``)."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture
def randomize_b():
    """Give an adapter a nonzero B (LoRA starts at B = 0, where dA = 0 and the branch adds nothing)."""

    def apply(layer) -> None:
        with torch.no_grad():
            layer.lora_b.copy_(torch.randn_like(layer.lora_b) / layer.r**0.5)

    return apply
