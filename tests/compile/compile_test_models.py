"""Helpers shared by the compile-inspection tests (imported by name; pytest puts this folder on the path)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def bce_loss(labels: torch.Tensor):
    """The training loss of DLRM as a function of the logits."""
    return lambda logits: F.binary_cross_entropy_with_logits(logits, labels)


def eager_grads(model: nn.Module, loss: torch.Tensor) -> dict[str, torch.Tensor]:
    """Gradients of ``loss`` w.r.t. the model's parameters, computed eagerly, leaving ``.grad`` untouched."""
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    grads = torch.autograd.grad(loss, [p for _, p in named], allow_unused=True)
    return {n: g for (n, _), g in zip(named, grads, strict=True) if g is not None}
