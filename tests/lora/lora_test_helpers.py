"""Test helpers for the LoRA module tests: a float64 reference and a tolerance check."""

from __future__ import annotations

import torch

from kernels import reference


def assert_close(got: torch.Tensor, want: torch.Tensor, tol: float, name: str) -> None:
    """|got − want| ≤ tol · (max|want| + |want|) elementwise, in float64: an error is measured against the
    largest term, so sums that cancel to ≈ 0 do not demand an impossible relative accuracy."""
    assert got.shape == want.shape, f"{name}: shape {tuple(got.shape)} != {tuple(want.shape)}"
    assert torch.isfinite(got).all(), f"{name}: non-finite values"
    want = want.double()
    err = (got.double() - want).abs()
    bound = tol * (want.abs().max() + want.abs())
    assert (err <= bound).all(), f"{name}: max error {err.max().item():.3g} (bound {bound.min().item():.3g})"


def reference_outputs(layer, x: torch.Tensor, grad: torch.Tensor):
    """``(y, dX, dA, dB)`` of ``layer``'s math in float64 (``kernels.reference.lora_linear``)."""
    ref = [t.detach().double().requires_grad_() for t in (x, layer.lora_a, layer.lora_b)]
    bias = None if layer.base.bias is None else layer.base.bias.double()
    y = reference.lora_linear(ref[0], layer.base.weight.double(), ref[1], ref[2], layer.scale, bias)
    return (y, *torch.autograd.grad(y, ref, grad.double()))
