"""``OverArch``: the top MLP, interaction features ``[B, I]`` → one logit per sample ``[B]``."""

from __future__ import annotations

import torch
from torch import nn

from lecture_code.model.mlp import make_mlp

__all__ = ["OverArch"]


class OverArch(nn.Module):
    """Top MLP (TorchRec's name): ``Linear → ReLU`` between layers and **no activation after the last**.

    It returns logits. The sigmoid belongs to the loss (``BCEWithLogitsLoss``, numerically stable) or to
    ``DLRM.predict_proba`` — never here, so it cannot be applied twice.
    """

    def __init__(self, in_features: int, layer_sizes: tuple[int, ...]):
        super().__init__()
        if layer_sizes[-1] != 1:
            raise ValueError(f"the over arch ends in one logit: layer_sizes[-1] must be 1, got {layer_sizes}")
        self.model = make_mlp(in_features, tuple(layer_sizes), final_activation=False)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        """features float ``[B, I]`` (I = interaction width) → logits ``[B]``."""
        return self.model(features).squeeze(-1)
