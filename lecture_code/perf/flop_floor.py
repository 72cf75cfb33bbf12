"""The arithmetic floor of one DLRM training step: its FLOPs, and a measured GEMM rate to divide them by.

A step's FLOPs are those of its linear layers (``2·B·in·out`` each) and of the dot interaction (``2·B·D`` per
pair of the ``F + 1`` vectors), forward once and backward twice (dX and dW: ``3×`` the forward). The rate is
measured, not quoted: ``torch.mm`` at the step's largest linear layer (B rows), timed with
:func:`lecture_code.bench.median_ms`, once at torch's default ``"highest"`` precision (fp32 FMA, no tensor
cores: the rows of the waterfall without ``TF32``) and once at ``"high"`` (TF32 tensor cores: its ``TF32``
rows). FLOPs over a rate is a floor for the step's arithmetic: the step's smaller GEMMs run below the rate
of its largest, so the real arithmetic time is longer. On a CPU the rates are the CPU's, and only show that
the code runs.
"""

from __future__ import annotations

import torch
from torch import nn

from lecture_code import bench
from lecture_code.environment import matmul_precision

__all__ = ["gemm_tflops", "largest_linear", "step_flops"]


def step_flops(model: nn.Module, batch: int, num_sparse: int, dim: int) -> dict[str, float]:
    """FLOPs of one forward's linear layers and interaction, and of the whole step (3× the forward)."""
    linear = sum(
        2 * batch * m.in_features * m.out_features for m in model.modules() if isinstance(m, nn.Linear)
    )
    pairs = (num_sparse + 1) * num_sparse // 2  # the dot interaction: pairwise dots of the F + 1 vectors
    interaction = 2 * batch * pairs * dim
    return {"linear": linear, "interaction": interaction, "step": 3 * (linear + interaction)}


def largest_linear(model: nn.Module) -> tuple[int, int]:
    """``(in_features, out_features)`` of the model's linear layer with the most weights."""
    m = max((m for m in model.modules() if isinstance(m, nn.Linear)), key=lambda m: m.weight.numel())
    return m.in_features, m.out_features


def gemm_tflops(rows: int, k: int, n: int, device: torch.device, precision: str = "highest") -> float:
    """Measured TFLOP/s of ``torch.mm`` of fp32 ``[rows, k] × [k, n]`` under ``precision``
    (:func:`~lecture_code.environment.matmul_precision`: ``"highest"`` fp32 FMA, ``"high"`` TF32)."""
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(rows, k, generator=gen).to(device)
    b = torch.randn(k, n, generator=gen).to(device)
    with matmul_precision(precision):  # eager reads the setting at every call, the timed ones included
        ms = bench.median_ms(lambda: torch.mm(a, b), device)
    return 2 * rows * k * n / ms / 1e9
