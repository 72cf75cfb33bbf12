"""Your turn: LoRA's dA alone, ``dA = s·(dY B)ᵀ x`` [r, K] (notebook 07's second exercise).

The leading dimensions are flattened for you (dA sums over every token). Replace the TODO line: compute
``u = dY B`` [M, r] first (the small product), then ``s·uᵀ x``; starting from ``dYᵀ x`` would make an
[N, K] matrix as large as W. Check it with ``check_lora_da(lora_da.lora_da)``.
"""

from __future__ import annotations

import torch

__all__ = ["lora_da"]


def lora_da(dy: torch.Tensor, x: torch.Tensor, lora_b: torch.Tensor, scale: float) -> torch.Tensor:
    """``dA = s·(dY B)ᵀ x``: dy ``[..., N]``, x ``[..., K]``, lora_b ``[N, r]`` → ``[r, K]`` in x's dtype."""
    dy2 = dy.reshape(-1, dy.shape[-1])  # [M, N]: every token a row
    x2 = x.reshape(-1, x.shape[-1])  # [M, K]
    assert dy2.shape[0] == x2.shape[0], "dy and x must hold the same tokens"
    # TODO: u = dY B [M, r], then dA = s·uᵀ x [r, K] (in place of the zeros below)
    return torch.zeros(lora_b.shape[1], x2.shape[1], dtype=x2.dtype, device=x2.device)
