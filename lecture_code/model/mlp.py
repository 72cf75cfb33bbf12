"""The MLP both DLRM towers are made of: ``Linear → ReLU`` stacks with DLRM's initialisation.

DLRM's ``create_mlp`` (facebookresearch/dlrm) initialises each ``Linear(n_in, n_out)`` with
``W ~ Normal(0, sqrt(2 / (n_in + n_out)))`` (Glorot/Xavier normal) and ``b ~ Normal(0, sqrt(1 / n_out))``.
"""

from __future__ import annotations

import math

from torch import nn

__all__ = ["dlrm_init_linear", "make_mlp"]


def dlrm_init_linear(layer: nn.Linear) -> None:
    """Initialise one linear layer in place as DLRM does (Glorot-normal weight, normal bias)."""
    n_out, n_in = layer.weight.shape
    nn.init.normal_(layer.weight, mean=0.0, std=math.sqrt(2.0 / (n_in + n_out)))
    if layer.bias is not None:
        nn.init.normal_(layer.bias, mean=0.0, std=math.sqrt(1.0 / n_out))


def make_mlp(in_features: int, layer_sizes: tuple[int, ...], final_activation: bool) -> nn.Sequential:
    """``Linear(in, s0) → ReLU → Linear(s0, s1) → ReLU → … → Linear(·, s_last)`` [→ ReLU if asked].

    ``layer_sizes`` lists each layer's output size (TorchRec's convention). The bottom MLP ends with a
    ReLU (as in DLRM and TorchRec's ``DenseArch``); the top MLP does not: it must output raw logits.
    """
    layers: list[nn.Module] = []
    sizes = (in_features, *layer_sizes)
    for i, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:], strict=True)):
        linear = nn.Linear(n_in, n_out)
        dlrm_init_linear(linear)
        layers.append(linear)
        if final_activation or i < len(layer_sizes) - 1:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)
