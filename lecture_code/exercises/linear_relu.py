"""The GEMM notebook's exercise: a linear layer with its bias and ReLU in the GEMM's epilogue,
``out = relu(x Wᵀ + b)``.

The learner completes ``fn(x, weight, bias, out)`` (the skeleton is :mod:`.skeletons.linear_relu`): x
``[M, K]``, weight ``[N, K]`` (``nn.Linear``'s layout, so the GEMM's B operand is Wᵀ), bias ``[N]``, out
``[M, N]`` filled in place. :func:`check_linear_relu` runs it on odd shapes (no side a multiple of a usual
block, one with a single output column, one in fp16) on the default device (a CPU runs Triton's
interpreter), with every tensor inside a guarded buffer (:mod:`.guards`) and out poisoned with NaN, and
reports per case, in the order to fix things:

- an exception, with its type and message;
- elements written past the end of out (an unmasked store), a changed input;
- a NaN (never written) or the first wrong element (:func:`.checker.compare`), and then what the answer equals
  instead, if it is one of the usual incomplete epilogues: ``x Wᵀ`` (bias and ReLU missing), ``relu(x Wᵀ)``
  (the bias missing), ``x Wᵀ + b`` (the ReLU missing), ``relu(x Wᵀ) + b`` (the bias added after the ReLU).

The reference: ``relu(x Wᵀ + b)`` in float64, rounded once to the inputs' dtype.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from lecture_code.exercises.checker import Report, compare, memory_problems, run_cases
from lecture_code.exercises.guards import guarded_copy, guarded_output

__all__ = ["CASES", "TOLERANCES", "check_linear_relu", "reference_linear_relu"]

# dtype → (atol, rtol), with why
TOLERANCES = {
    torch.float32: (1e-5, 1e-5),  # fp32 sums of ≤ 40 products of O(1) numbers (W scaled by 1/√K): a few ulps
    torch.float16: (1e-3, 2e-3),  # an fp32 accumulator rounded once to fp16: ≤ 1 ulp (2^-10 relative)
}


@dataclass(frozen=True)
class Case:
    name: str
    M: int
    K: int
    N: int
    dtype: torch.dtype = torch.float32


CASES = (
    Case("x 5 × 7, N 9 (one tile, tails everywhere)", 5, 7, 9),
    Case("x 37 × 40, N 45 (tiles of 32: K and N tails)", 37, 40, 45),
    Case("x 33 × 16, N 1 (one output column)", 33, 16, 1),
    Case("fp16: x 20 × 24, N 50", 20, 24, 50, torch.float16),
)


def reference_linear_relu(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """``relu(x Wᵀ + b)`` in float64, rounded once to x's dtype."""
    return torch.relu(torch.nn.functional.linear(x.double(), weight.double(), bias.double())).to(x.dtype)


def _incomplete(x, weight, bias) -> dict[str, torch.Tensor]:
    z = x.double() @ weight.double().t()
    b = bias.double()
    return {
        "x Wᵀ: the bias and the ReLU are missing": z,
        "relu(x Wᵀ): the bias is missing": torch.relu(z),
        "x Wᵀ + b: the ReLU is missing": z + b,
        "relu(x Wᵀ) + b: the bias is added after the ReLU": torch.relu(z) + b,
    }


def _hint(got: torch.Tensor, x, weight, bias, atol: float, rtol: float) -> str:
    g = got.detach().cpu().double()
    if g.isnan().any():
        return ""
    for what, value in _incomplete(x, weight, bias).items():
        if torch.allclose(g, value.to(got.dtype).double(), atol=atol, rtol=rtol):
            return f"out equals {what}"
    return ""


def _problems(fn: Callable, case: Case, seed: int, device: torch.device) -> list[str]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(case.M, case.K, generator=g).to(case.dtype)
    weight = (torch.randn(case.N, case.K, generator=g) / case.K**0.5).to(case.dtype)
    bias = torch.randn(case.N, generator=g).to(case.dtype)
    want = reference_linear_relu(x, weight, bias)
    gx, gw, gb = guarded_copy(x.to(device)), guarded_copy(weight.to(device)), guarded_copy(bias.to(device))
    out = guarded_output((case.M, case.N), case.dtype, device)
    try:
        fn(gx.tensor, gw.tensor, gb.tensor, out.tensor)
    except Exception as err:  # noqa: BLE001 — the learner's code: report, do not stop the notebook
        return [f"raised {type(err).__name__}: {err}"]
    problems = memory_problems(
        out, "out", "is the store masked (rows < M and cols < N)?", [(gx, x), (gw, weight), (gb, bias)],
        "x, weight or bias", "store into out only",
    )  # fmt: skip
    atol, rtol = TOLERANCES[case.dtype]
    nan_hint = " (out starts as NaN: never written, or computed as NaN)"
    wrong = compare("out", out.tensor, want.to(device), atol, rtol, nan_hint)
    hint = _hint(out.tensor, x, weight, bias, atol, rtol) if wrong else ""
    return problems + wrong + ([hint] if hint else [])


def check_linear_relu(fn: Callable, device: torch.device | None = None, verbose: bool = True) -> Report:
    """Check ``fn(x, weight, bias, out)`` against ``relu(x Wᵀ + b)`` on :data:`CASES`; print the report."""
    return run_cases("linear + ReLU", CASES, _problems, fn, 800, device, verbose)
