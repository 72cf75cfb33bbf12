"""Your turn: a LoRA linear whose backward you write (notebook 07's first exercise).

``LoRALinearFunction`` is a ``torch.autograd.Function``: its forward is written (it saves x and the
bottleneck t = x Aᵀ); its backward has ``u = dY B`` and the base's share of dX, and the rest is left to you
(the TODO lines; until then dA and dB are zeros). The formulas are section 1's: dX = dY W + (s·u) A,
dA = (s·u)ᵀ x, dB = s·dYᵀ t. Do not call autograd in the backward. Check it with
``check_lora_linear(lora_linear.lora_linear)``.
"""

from __future__ import annotations

import torch

__all__ = ["LoRALinearFunction", "lora_linear"]


class LoRALinearFunction(torch.autograd.Function):
    """``y = x Wᵀ + s·(x Aᵀ) Bᵀ (+ bias)`` on rows x ``[M, K]``; W and the bias are frozen (no gradient)."""

    @staticmethod
    def forward(ctx, x, weight, lora_a, lora_b, scale, bias):
        t = x @ lora_a.T  # [M, r]: the bottleneck, saved for dB
        ctx.save_for_backward(x, weight, lora_a, lora_b, t)
        ctx.scale = scale
        y = x @ weight.T + scale * (t @ lora_b.T)
        return y if bias is None else y + bias

    @staticmethod
    def backward(ctx, dy):
        x, weight, lora_a, lora_b, t = ctx.saved_tensors
        u = dy @ lora_b  # [M, r]: the gradient reaching t is s·u
        dx = dy @ weight  # TODO: add the LoRA path's term (s·u) A
        da = u.new_zeros(lora_a.shape)  # TODO: dA = (s·u)ᵀ x [r, K]
        db = u.new_zeros(lora_b.shape)  # TODO: dB = s·dYᵀ t [N, r]
        return dx, None, da, db, None, None  # one per forward input: W, scale and bias get none


def lora_linear(x, weight, lora_a, lora_b, scale, bias=None):
    """The layer on any leading dimensions: flattened to rows for the Function, then reshaped back."""
    rows = x.reshape(-1, x.shape[-1])
    y = LoRALinearFunction.apply(rows, weight, lora_a, lora_b, scale, bias)
    return y.reshape(*x.shape[:-1], weight.shape[0])
