"""``DenseArch``: the bottom MLP, dense features ``[B, N]`` → one ``D``-vector per sample ``[B, D]``."""

from __future__ import annotations

import torch
from torch import nn

from lecture_code.model.mlp import make_mlp

__all__ = ["DenseArch"]


class DenseArch(nn.Module):
    """Bottom MLP (TorchRec's name): ``Linear → ReLU`` for every layer, the last one included.

    It ends at ``D`` so the dense vector can take part in the interaction as one more "embedding".
    The ReLU after the last layer follows DLRM and TorchRec; the Kaggle preset is 13-512-256-64-16.
    """

    def __init__(self, in_features: int, layer_sizes: tuple[int, ...]):
        super().__init__()
        self.model = make_mlp(in_features, tuple(layer_sizes), final_activation=True)

    def forward(self, dense: torch.Tensor) -> torch.Tensor:
        """dense float ``[B, N]`` → ``[B, D]``."""
        return self.model(dense)
