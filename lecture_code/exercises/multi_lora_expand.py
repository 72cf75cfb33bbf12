"""Notebook 08's exercise: the multi-LoRA expand, ``y[i] += t[i] B[id(i)]ᵀ`` for each token with an adapter.

The learner writes ``fn(y, t, lora_b, adapter_ids)`` that adds, in place, each token's low-rank product to
its row of y and returns y: y [T, N], t [T, r] (the shrink's output, already scaled), lora_b [L, N, r],
adapter_ids [T] int with −1 for "no adapter" — those rows must keep their bits.
:func:`check_multi_lora_expand` runs it on odd shapes (N not a multiple of a usual block, r not a power of
two, one logit, every id −1, fp16) on the default device (a CPU runs Triton's interpreter), with every
tensor inside a guarded buffer (:mod:`.guards`), and reports per case, in the order to fix things:

- an exception, with its type and message;
- elements written past the end of y (an unmasked tail), counted from its guard;
- a changed input (t, lora_b, adapter_ids);
- what it returned, if not y itself: None, not a tensor, a wrong shape (a transposed y is called out), a new
  tensor instead of y updated in place;
- a row whose id is −1 that was written, with where, and when those rows hold exactly what the last adapter
  would give: −1 used as an index (``B[-1]`` in torch is the last adapter);
- the first wrong element of a row with an adapter (:func:`.checker.compare`: index, expected and got
  values), and when it still holds y's value from before the call: never added to.

``lora_b`` sits one adapter after the start of its buffer, and that adapter-sized region holds the guard's
sentinel: a kernel that indexes B with id −1 reads it instead of memory it does not own. The reference is
:func:`kernels.reference.multi_lora` with A = I (the shrink of an identity returns t), in float64, rounded
once to the inputs' dtype.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from kernels import reference
from lecture_code.exercises.checker import (
    Report,
    compare,
    first_index,
    memory_problems,
    returned_in_place,
    run_cases,
)
from lecture_code.exercises.guards import SENTINEL, guarded_copy

__all__ = ["CASES", "TOLERANCES", "check_multi_lora_expand", "reference_expand"]

# dtype → (atol, rtol), with why
TOLERANCES = {
    torch.float32: (1e-5, 1e-5),  # an fp32 sum of r ≤ 8 products of O(1) numbers: a few ulps
    torch.float16: (2e-3, 2e-3),  # y and the sum rounded to fp16 once: 1–2 ulps (2^-10 relative)
}


@dataclass(frozen=True)
class Case:
    name: str
    T: int
    N: int
    r: int
    L: int
    ids: tuple[int, ...] | None  # None: drawn from [−1, L), the first −1 and the last L − 1
    dtype: torch.dtype = torch.float32


CASES = (
    Case("7 tokens, N 33, r 3, 3 adapters", 7, 33, 3, 3, None),
    Case("1 token, N 1 (a logit), r 1", 1, 1, 1, 2, (1,)),
    Case("every id −1", 5, 40, 4, 2, (-1,) * 5),
    Case("one adapter, N 70, r 8", 4, 70, 8, 3, (2, 2, 2, 2)),
    Case("fp16: 9 tokens, N 65, r 5, 4 adapters", 9, 65, 5, 4, None, torch.float16),
)


def reference_expand(y, t, lora_b, adapter_ids) -> torch.Tensor:
    """``y[i] + t[i] B[id(i)]ᵀ`` (rows with −1 copied), out of place, in float64, rounded once to y's
    dtype."""
    L, r = lora_b.shape[0], lora_b.shape[2]
    eye = torch.eye(r, dtype=torch.float64, device=y.device).expand(L, r, r)
    out = reference.multi_lora(y.double(), t.double(), eye, lora_b.double(), adapter_ids, 1.0)
    return out.to(y.dtype)


def _inputs(case: Case, seed: int):
    g = torch.Generator().manual_seed(seed)
    y = torch.randn(case.T, case.N, generator=g).to(case.dtype)
    t = torch.randn(case.T, case.r, generator=g).to(case.dtype)
    b = (torch.randn(case.L, case.N, case.r, generator=g) / case.r**0.5).to(case.dtype)
    if case.ids is None:
        ids = torch.randint(-1, case.L, (case.T,), generator=g)
        ids[0], ids[-1] = -1, case.L - 1
    else:
        ids = torch.tensor(case.ids)
    return y, t, b, ids


def _minus_one_rows(got, y0, want_last, ids) -> list[str]:
    none = ids < 0
    changed = (got != y0) & none[:, None]
    if not changed.any():
        return []
    i, j = first_index(changed)
    rows = int(changed.any(dim=1).sum())
    problem = (
        f"y[{i}, {j}] changed, but token {i} has adapter id −1: its row must keep its bits "
        f"({rows} of {int(none.sum())} rows with id −1 were written)"
    )
    atol, rtol = (4 * tol for tol in TOLERANCES[got.dtype])  # a torch bmm's rounding on any device
    if torch.allclose(got[none].double(), want_last[none].double(), atol=atol, rtol=rtol):
        problem += "; they hold what the last adapter would add: was −1 used as an index? (B[-1] is B[L − 1])"
    return [problem]


def _problems(fn: Callable, case: Case, seed: int, device: torch.device) -> list[str]:
    y0, t, b, ids = _inputs(case, seed)
    want = reference_expand(y0, t, b, ids)
    ids_last = torch.where(ids < 0, case.L - 1, ids)
    want_last = reference_expand(y0, t, b, ids_last)
    gy, gt, gi = guarded_copy(y0.to(device)), guarded_copy(t.to(device)), guarded_copy(ids.to(device))
    before = torch.full((1, case.N, case.r), SENTINEL, dtype=case.dtype)  # what B[-1] reads
    gb = guarded_copy(torch.cat([before, b]).to(device))
    y = gy.tensor
    try:
        ret = fn(y, gt.tensor, gb.tensor[1:], gi.tensor)
    except Exception as err:  # noqa: BLE001 — the learner's code: report, do not stop the notebook
        return [f"raised {type(err).__name__}: {err}"]
    problems = memory_problems(
        gy, "y", "is the tail of the last column block masked (cols < N)?",
        [(gt, t), (gb, torch.cat([before, b])), (gi, ids)], "t, lora_b or adapter_ids", "add into y only",
    )  # fmt: skip
    problems += returned_in_place(
        ret, y, "y", "adding into it", "add into y in place (y[i] += …) and return y"
    )
    got = y.detach().cpu()
    problems += _minus_one_rows(got, y0, want_last, ids)
    # the rows with an adapter: −1 rows are judged above, so give them the expected values here
    judged = torch.where((ids < 0)[:, None], want, got)
    wrong = compare("y", judged, want, *TOLERANCES[case.dtype])
    if wrong:
        atol, rtol = TOLERANCES[case.dtype]
        bad = ~torch.isclose(judged.double(), want.double(), atol=atol, rtol=rtol)
        i, j = first_index(bad)
        if torch.equal(got[i, j], y0[i, j]):
            wrong[0] += f"; y[{i}, {j}] still holds its value from before the call: never added to"
    return problems + wrong


def check_multi_lora_expand(fn: Callable, device: torch.device | None = None, verbose: bool = True) -> Report:
    """Check ``fn(y, t, lora_b, adapter_ids) -> y`` against the reference on :data:`CASES`; print the
    report if verbose."""
    return run_cases("multi-LoRA expand", CASES, _problems, fn, 700, device, verbose)
