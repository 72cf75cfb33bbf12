"""Shared test setup: kernels decide the runtime mode on import; GPU-marked tests skip cleanly on CPU."""

from __future__ import annotations

import pytest
import torch

import kernels  # noqa: F401  (sets TRITON_INTERPRET=1 on CPU machines before any kernel is defined)


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU (run on the device machine)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)


@pytest.fixture
def seed():
    """A fresh seed per test run, printed so a failure can be replayed (never zeros, never ones as data)."""
    import random

    value = random.randrange(1 << 30)
    torch.manual_seed(value)
    print(f"seed={value}")
    return value
