"""Notebook 07's second exercise: the LoRA backward's dA alone, ``dA = s·(dY B)ᵀ x``.

The learner writes ``fn(dy, x, lora_b, scale) -> dA`` (torch ops or a Triton kernel). :func:`check_lora_da`
runs it on a plain shape, odd sizes with 3-D inputs, rank 1 and scale 0, and compares with the dA that
autograd computes through :func:`kernels.reference.lora_linear` (the one definition of correct), in the
inputs' dtype. Besides what :func:`.checker.compare` names (shape — a transposed dA is called out —, dtype,
NaN, the first wrong element), it says when the answer is all zeros (the skeleton's TODO), the reference
without its scale, with the scale twice, or negated.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from kernels import reference
from lecture_code.exercises.checker import Report, compare, run_cases

__all__ = ["CASES", "check_lora_da", "reference_da"]

ATOL, RTOL = 1e-4, 1e-4  # fp32 sums over M·N products of N(0, 1) numbers: a few ulps of values ~10–100


@dataclass(frozen=True)
class Case:
    name: str
    lead: tuple[int, ...]
    K: int
    N: int
    r: int
    scale: float


CASES = (
    Case("plain: M 8, K 16, N 12, r 4", (8,), 16, 12, 4, 0.5),
    Case("odd: x 2×3×13, N 7, r 3", (2, 3), 13, 7, 3, 2.0),
    Case("rank 1, M 5, K 9, N 6", (5,), 9, 6, 1, 1.5),
    Case("scale 0", (4,), 8, 8, 2, 0.0),
)


def reference_da(dy: torch.Tensor, x: torch.Tensor, lora_b: torch.Tensor, scale: float) -> torch.Tensor:
    """dA by autograd through the reference LoRA linear (W and A do not change dA: random ones are used)."""
    g = torch.Generator().manual_seed(0)
    K, r = x.shape[-1], lora_b.shape[1]
    w = torch.randn(lora_b.shape[0], K, generator=g, dtype=x.dtype).to(x.device)
    a = torch.randn(r, K, generator=g, dtype=x.dtype).to(x.device).requires_grad_()
    y = reference.lora_linear(x, w, a, lora_b, scale)
    (da,) = torch.autograd.grad(y, a, dy)
    return da


def _hint(got: torch.Tensor, want: torch.Tensor, scale: float) -> str:
    if got.shape != want.shape or got.dtype != want.dtype:
        return ""
    g, w = got.detach().double().cpu(), want.detach().double().cpu()
    if not g.any() and w.any():
        return "dA is all zeros: nothing computed yet?"
    if scale in (0.0, 1.0):
        return ""
    if torch.allclose(g * scale, w, atol=ATOL, rtol=RTOL):
        return "it looks like the scale s is missing"
    if torch.allclose(g, w * scale, atol=ATOL, rtol=RTOL):
        return "it looks like the scale s is applied twice"
    if torch.allclose(g, -w, atol=ATOL, rtol=RTOL):
        return "the sign is flipped"
    return ""


def _problems(fn: Callable, case: Case, seed: int, device: torch.device) -> list[str]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*case.lead, case.K, generator=g).to(device)
    dy = torch.randn(*case.lead, case.N, generator=g).to(device)
    lora_b = torch.randn(case.N, case.r, generator=g).to(device)
    want = reference_da(dy, x, lora_b, case.scale)
    try:
        got = fn(dy, x, lora_b, case.scale)
    except Exception as err:  # noqa: BLE001 — the learner's code: report, do not stop the notebook
        return [f"raised {type(err).__name__}: {err}"]
    problems = compare("dA", got, want, ATOL, RTOL)
    hint = _hint(got, want, case.scale) if problems else ""
    return [*problems, hint] if hint else problems


def check_lora_da(fn: Callable, device: torch.device | None = None, verbose: bool = True) -> Report:
    """Check ``fn(dy, x, lora_b, scale) -> dA`` against the reference on :data:`CASES`; print the report."""
    return run_cases("LoRA dA", CASES, _problems, fn, 600, device, verbose)
