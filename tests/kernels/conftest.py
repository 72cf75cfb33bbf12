"""Fixtures shared by the kernel tests."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture
def poison_empty(monkeypatch):
    """torch.empty / empty_like return NaN-filled tensors during the test, so unwritten elements fail."""
    real_empty, real_empty_like = torch.empty, torch.empty_like

    def nan(t):
        return t.fill_(float("nan")) if t.is_floating_point() else t

    monkeypatch.setattr(torch, "empty", lambda *a, **k: nan(real_empty(*a, **k)))
    monkeypatch.setattr(torch, "empty_like", lambda *a, **k: nan(real_empty_like(*a, **k)))
