"""Notebook 07's first exercise: a LoRA linear with a hand-written backward (dX, dA, dB), checked.

The learner writes ``fn(x, weight, lora_a, lora_b, scale, bias=None) -> y`` (typically an
``autograd.Function`` whose backward returns dX, dA, dB by the formulas of :mod:`kernels.lora.linear`).
:func:`check_lora_linear` runs it on a few cases in float64 — a plain shape, odd sizes with a 3-D input and no
bias, scale 0, B = 0 — against :func:`kernels.reference.lora_linear` under autograd, and says for each case
what is wrong: the output, or which gradient, with a hint for the usual slips (a missing or doubled scale, a
gradient that is not connected). It never raises for a wrong answer: it prints and returns False. Its
printout predates :mod:`.checker`, and notebook 07's committed output checks it word for word, so it keeps
its own format.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from kernels import reference

__all__ = ["check_lora_linear"]


@dataclass(frozen=True)
class _Case:
    name: str
    lead: tuple[int, ...]
    K: int
    N: int
    r: int
    scale: float
    bias: bool = True
    zero_b: bool = False


CASES = (
    _Case("plain", (8,), 32, 16, 4, 0.5),
    _Case("odd sizes, 3-D x, no bias", (2, 3), 13, 7, 3, 2.0, bias=False),
    _Case("scale 0", (5,), 8, 8, 2, 0.0),
    _Case("B = 0 (LoRA's init)", (5,), 8, 8, 2, 1.5, zero_b=True),
)


def _hint(got: torch.Tensor, want: torch.Tensor, scale: float) -> str:
    if scale not in (0.0, 1.0) and torch.allclose(got * scale, want, atol=1e-9):
        return " (it looks like the scale s is missing)"
    if scale not in (0.0, 1.0) and torch.allclose(got, want * scale, atol=1e-9):
        return " (it looks like the scale s is applied twice)"
    if torch.allclose(got, -want, atol=1e-9):
        return " (the sign is flipped)"
    return ""


def _problems(fn: Callable, case: _Case, seed: int) -> list[str]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*case.lead, case.K, generator=g, dtype=torch.float64)
    w = torch.randn(case.N, case.K, generator=g, dtype=torch.float64)
    a = torch.randn(case.r, case.K, generator=g, dtype=torch.float64)
    b = torch.randn(case.N, case.r, generator=g, dtype=torch.float64) * (0.0 if case.zero_b else 1.0)
    bias = torch.randn(case.N, generator=g, dtype=torch.float64) if case.bias else None
    mine = [t.clone().requires_grad_() for t in (x, a, b)]
    ref = [t.clone().requires_grad_() for t in (x, a, b)]
    want = reference.lora_linear(ref[0], w, ref[1], ref[2], case.scale, bias)
    try:
        got = fn(mine[0], w, mine[1], mine[2], case.scale, bias)
    except Exception as err:  # noqa: BLE001 — the learner's code: report, do not stop the notebook
        return [f"raised {type(err).__name__}: {err}"]
    if not isinstance(got, torch.Tensor):
        return [f"returned a {type(got).__name__}, not a tensor"]
    if got.shape != want.shape:
        return [f"output shape {tuple(got.shape)}, expected {tuple(want.shape)} (x is {tuple(x.shape)})"]
    if not torch.allclose(got, want, atol=1e-9, rtol=1e-9):
        return [f"output wrong by up to {(got - want).abs().max().item():.3g}{_hint(got, want, case.scale)}"]
    upstream = torch.randn(want.shape, generator=g, dtype=torch.float64)
    expected = torch.autograd.grad(want, ref, upstream)
    try:
        grads = torch.autograd.grad(got, mine, upstream, allow_unused=True)
    except RuntimeError as err:
        return [f"the output is not differentiable: {err}"]
    problems = []
    for name, mine_g, want_g in zip(("dX", "dA", "dB"), grads, expected, strict=True):
        if mine_g is None:
            problems.append(f"{name} is missing (the output does not depend on it through autograd)")
        elif mine_g.shape != want_g.shape:
            problems.append(f"{name} has shape {tuple(mine_g.shape)}, expected {tuple(want_g.shape)}")
        elif not torch.allclose(mine_g, want_g, atol=1e-9, rtol=1e-9):
            err = (mine_g - want_g).abs().max().item()
            problems.append(f"{name} wrong by up to {err:.3g}{_hint(mine_g, want_g, case.scale)}")
    return problems


def check_lora_linear(fn: Callable) -> bool:
    """Check ``fn(x, weight, lora_a, lora_b, scale, bias)`` against the reference; print a line per case."""
    ok = True
    for i, case in enumerate(CASES):
        problems = _problems(fn, case, seed=1000 + i)
        ok &= not problems
        print(f"{case.name:<28} {'ok' if not problems else '; '.join(problems)}")
    print("all cases pass" if ok else "not yet: see the lines above")
    return ok
