"""Notebook 04's exercise: bias + GELU (tanh form) in one Triton kernel, with the row's tail masked.

The learner writes ``fn(x, bias, out)`` that fills ``out`` with ``gelu_tanh(x + bias)`` (``bias`` ``[N]``
broadcast over the rows of a contiguous ``x`` ``[..., N]``). :func:`check_bias_gelu` runs it on odd shapes,
none a multiple of a usual block, on the default device (a CPU runs Triton's interpreter), with every
tensor inside a guarded buffer (:mod:`.guards`) and ``out`` poisoned with NaN, and reports per case:

- elements written past the end of ``out`` (an unmasked tail), counted from its guard;
- a NaN where the reference has a number, with its index (never written, or computed as NaN);
- the first element outside the tolerance, with its index, expected and got values, and, where ``out``
  equals ``x + bias``, that the GELU is missing (the skeleton's state);
- an exception, with its type and message.

The reference is ``kernels.reference.ACTIVATIONS["gelu_tanh"]`` evaluated in fp32 and rounded once to the
input dtype (the contract of the lecture's kernels: compute in fp32, round once).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from kernels import reference
from lecture_code.exercises.checker import Report, compare, memory_problems, run_cases
from lecture_code.exercises.guards import guarded_copy, guarded_output

__all__ = ["CASES", "TOLERANCES", "check_bias_gelu"]

# dtype → (atol, rtol), with why
TOLERANCES = {
    torch.float32: (2e-5, 1e-5),  # tl.sigmoid's exp against torch's tanh: a few fp32 ulps
    torch.float16: (1e-3, 2e-3),  # 1 fp16 ulp (2^-10 relative) where the two roundings land differently
}


@dataclass(frozen=True)
class Case:
    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype = torch.float32


CASES = (
    Case("1 × 1 (one element, a tail of 1)", (1, 1)),
    Case("5 × 33 (32 columns + a tail of 1)", (5, 33)),
    Case("2 × 3 × 130 (3-D x)", (2, 3, 130)),
    Case("7 × 257, fp16", (7, 257), torch.float16),
)


def _problems(fn: Callable, case: Case, seed: int, device: torch.device) -> list[str]:
    g = torch.Generator().manual_seed(seed)
    x = (2 * torch.randn(case.shape, generator=g)).to(case.dtype)
    bias = torch.randn(case.shape[-1], generator=g).to(case.dtype)
    want = reference.ACTIVATIONS["gelu_tanh"](x.float() + bias.float()).to(case.dtype)
    gx, gb = guarded_copy(x.to(device)), guarded_copy(bias.to(device))
    out = guarded_output(case.shape, case.dtype, device)
    try:
        fn(gx.tensor, gb.tensor, out.tensor)
    except Exception as err:  # noqa: BLE001 — the learner's code: report, do not stop the notebook
        return [f"raised {type(err).__name__}: {err}"]
    problems = memory_problems(
        out, "out", "is the tail of the last block masked?", [(gx, x), (gb, bias)], "x or bias",
        "store into out only",
    )  # fmt: skip
    atol, rtol = TOLERANCES[case.dtype]
    nan_hint = " (out starts as NaN: never written, or computed as NaN)"
    wrong = compare("out", out.tensor, want.to(device), atol, rtol, nan_hint)
    z = (x.float() + bias.float()).to(case.dtype)
    if wrong and torch.allclose(out.tensor.cpu().float(), z.float(), atol=atol, rtol=rtol):
        wrong[0] += "; out equals x + bias: the GELU is missing"
    return problems + wrong


def check_bias_gelu(fn: Callable, device: torch.device | None = None, verbose: bool = True) -> Report:
    """Check ``fn(x, bias, out)`` against the reference on :data:`CASES`; print the report if verbose."""
    return run_cases("bias + GELU", CASES, _problems, fn, 400, device, verbose)
