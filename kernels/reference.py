"""Pure-torch references: the one definition of "correct" used by tests, benchmarks and notebooks."""

from __future__ import annotations

import torch


def vector_add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """out = x + y (same shape, same dtype)."""
    return x + y
