"""Pure-torch references: the one definition of "correct" used by tests, benchmarks and notebooks."""

from __future__ import annotations

import torch


def vector_add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """out = x + y (same shape, same dtype)."""
    return x + y


def bias_relu(x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """relu(x + bias), ``bias`` ``[N]`` broadcast over the rows of ``x`` ``[..., N]``; eager PyTorch."""
    return torch.relu(x + bias)


ACTIVATIONS = {
    "relu": torch.relu,
    "sigmoid": torch.sigmoid,
    "gelu_tanh": lambda z: torch.nn.functional.gelu(z, approximate="tanh"),
    "silu": torch.nn.functional.silu,
}


def add_mul_act(
    x: torch.Tensor, bias: torch.Tensor, y: torch.Tensor, alpha: float, activation: str
) -> torch.Tensor:
    """act(x + bias + alpha·y), ``act`` one of :data:`ACTIVATIONS`; eager PyTorch in the input dtype."""
    return ACTIVATIONS[activation](x + bias + alpha * y)


def fused_mlp(
    x: torch.Tensor,
    w1: torch.Tensor,
    b1: torch.Tensor,
    w2: torch.Tensor,
    b2: torch.Tensor,
    final_activation: str = "sigmoid",
) -> torch.Tensor:
    """act(relu(x W1ᵀ + b1) W2ᵀ + b2): x ``[..., K]``, W1 ``[H, K]``, W2 ``[N, H]`` → ``[..., N]``.

    ``final_activation`` is ``"sigmoid"``, ``"relu"`` or ``"none"``. The hidden activations are materialised
    in the input dtype, as two ``nn.Linear`` layers would do.
    """
    h = torch.relu(torch.nn.functional.linear(x, w1, b1))
    z = torch.nn.functional.linear(h, w2, b2)
    if final_activation == "none":
        return z
    return ACTIVATIONS[final_activation](z)
