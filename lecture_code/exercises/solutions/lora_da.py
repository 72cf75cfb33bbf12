"""A solution to notebook 07's second exercise: LoRA's dA from dY, x, B and s, in torch ops.

With t = x Aᵀ and y = x Wᵀ + b + s·t Bᵀ, the gradient reaching t is s·dY B, and t = x Aᵀ gives
``dA = s·(dY B)ᵀ x`` [r, K]. The order of the products is the lesson: ``(dY B)`` first costs M·N·r
multiply-adds and leaves an [M, r] matrix, then ``(·)ᵀ x`` costs M·r·K. Starting from ``dYᵀ x`` instead
would cost M·N·K and make an [N, K] matrix as large as W itself: N·K / (r·(N + K)) times the work for the
same dA (128× at K = N = 4096, r = 16).
"""

from __future__ import annotations

import torch

__all__ = ["lora_da"]


def lora_da(dy: torch.Tensor, x: torch.Tensor, lora_b: torch.Tensor, scale: float) -> torch.Tensor:
    """``dA = s·(dY B)ᵀ x``: dy ``[..., N]``, x ``[..., K]``, lora_b ``[N, r]`` → ``[r, K]`` in x's dtype."""
    u = dy.reshape(-1, dy.shape[-1]) @ lora_b  # [M, r]: the small product first
    return scale * (u.t() @ x.reshape(-1, x.shape[-1]))
