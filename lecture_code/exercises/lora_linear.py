"""Notebook 07's first exercise: a LoRA linear with a hand-written backward (dX, dA, dB), checked.

The learner writes ``fn(x, weight, lora_a, lora_b, scale, bias=None) -> y`` (typically an
``autograd.Function`` whose backward returns dX, dA, dB by the formulas of :mod:`kernels.lora.linear`; the
start is :mod:`.skeletons.lora_linear`). :func:`check_lora_linear` runs it on a few cases in float64 — a plain
shape, odd sizes with a 3-D input and no bias, scale 0, B = 0 — against :func:`kernels.reference.lora_linear`
under autograd, and says for each case what is wrong: the output, a gradient that autograd cannot reach
(missing), or each wrong gradient by what :func:`.checker.compare` names (shape, dtype, NaN, the first wrong
element), with a hint for the usual slips: a gradient left at zero (the skeleton's TODO), dX without the
LoRA path's term s·(dY B) A, a missing or doubled scale, a flipped sign. It never raises for a wrong answer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from kernels import reference
from lecture_code.exercises.checker import Report, compare, run_cases

__all__ = ["CASES", "check_lora_linear"]

ATOL, RTOL = 1e-9, 1e-9  # float64: sums of a few dozen products of N(0, 1) numbers, a few ulps of ~10
ZEROS = " is all zeros: nothing computed yet?"


@dataclass(frozen=True)
class Case:
    name: str
    lead: tuple[int, ...]
    K: int
    N: int
    r: int
    scale: float
    bias: bool = True
    zero_b: bool = False


CASES = (
    Case("plain: M 8, K 32, N 16, r 4", (8,), 32, 16, 4, 0.5),
    Case("odd: x 2×3×13, N 7, r 3, no bias", (2, 3), 13, 7, 3, 2.0, bias=False),
    Case("scale 0", (5,), 8, 8, 2, 0.0),
    Case("B = 0 (LoRA's init)", (5,), 8, 8, 2, 1.5, zero_b=True),
)


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    return torch.allclose(a, b, atol=ATOL, rtol=RTOL)


def _hint(
    name: str, got: torch.Tensor, want: torch.Tensor, scale: float, base_dx: torch.Tensor | None = None
) -> str:
    """The usual slip behind a wrong ``got`` (``base_dx``: dY W, the base's share of dX), or ""."""
    if got.shape != want.shape or got.dtype != want.dtype:
        return ""
    g, w = got.detach().cpu(), want.detach().cpu()
    if not g.any() and w.any():
        return f"{name}{ZEROS}"
    if base_dx is not None and _close(g, base_dx.cpu()):
        return "dX is dY W alone: the LoRA path's term (s·u) A is missing"
    if scale not in (0.0, 1.0) and _close(g * scale, w):
        return f"{name}: it looks like the scale s is missing"
    if scale not in (0.0, 1.0) and _close(g, w * scale):
        return f"{name}: it looks like the scale s is applied twice"
    return f"{name}: the sign is flipped" if _close(g, -w) else ""


def _problems(fn: Callable, case: Case, seed: int, device: torch.device) -> list[str]:
    g = torch.Generator().manual_seed(seed)

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g, dtype=torch.float64).to(device)

    x, w, a, b = (
        randn(*case.lead, case.K),
        randn(case.N, case.K),
        randn(case.r, case.K),
        randn(case.N, case.r),
    )
    b = b * (0.0 if case.zero_b else 1.0)
    bias = randn(case.N) if case.bias else None
    mine = [t.clone().requires_grad_() for t in (x, a, b)]
    ref = [t.clone().requires_grad_() for t in (x, a, b)]
    want = reference.lora_linear(ref[0], w, ref[1], ref[2], case.scale, bias)
    try:
        got = fn(mine[0], w, mine[1], mine[2], case.scale, bias)
    except Exception as err:  # noqa: BLE001 — the learner's code: report, do not stop the notebook
        return [f"raised {type(err).__name__}: {err}"]
    problems = compare("y", got, want, ATOL, RTOL)
    if problems:
        hint = _hint("y", got, want, case.scale)
        return [*problems, hint] if hint else problems
    upstream = randn(*want.shape)
    expected = torch.autograd.grad(want, ref, upstream)
    try:
        grads = torch.autograd.grad(got, mine, upstream, allow_unused=True)
    except RuntimeError as err:
        return [f"the output is not differentiable: {err}"]
    for name, mine_g, want_g in zip(("dX", "dA", "dB"), grads, expected, strict=True):
        if mine_g is None:
            problems.append(f"{name} is missing (the output does not depend on it through autograd)")
            continue
        wrong = compare(name, mine_g, want_g, ATOL, RTOL)
        base_dx = upstream @ w if name == "dX" else None
        hint = _hint(name, mine_g, want_g, case.scale, base_dx) if wrong else ""
        if hint.endswith(ZEROS):  # the hint says it all: a first wrong element of 0 adds nothing
            problems.append(hint)
        else:
            problems += [*wrong, hint] if hint else wrong
    return problems


def check_lora_linear(fn: Callable, device: torch.device | None = None, verbose: bool = True) -> Report:
    """Check ``fn(x, weight, lora_a, lora_b, scale, bias)`` and its gradients against the reference on
    :data:`CASES`; print the report (one line per case)."""
    return run_cases("LoRA linear", CASES, _problems, fn, 1000, device, verbose)
