"""Notebook 05's exercise: exact SGD on the rows a batch touched, ``W[ids[i]] -= lr · grad[i]`` for every i.

The learner writes ``fn(weight, ids, grad, lr)`` that updates, in place, the rows of one packed embedding
table that a batch looked up, and returns weight: weight [R, D], ids [n] int64 (rows may repeat: a hot item
looked up twice), grad [n, D] (the gradient of each lookup), lr a float. Exact SGD gives a row looked up k
times the sum of its k gradients — what the table-batched embedding's backward does (section 3 of the
notebook) and what ``nn.Embedding`` + ``torch.optim.SGD`` do. :func:`check_sgd_rows` runs it on small cases
(repeated ids, one row hit by every lookup, an empty batch, fp16) with every tensor inside a guarded buffer
(:mod:`.guards`), and reports per case, in the order to fix things:

- an exception, with its type and message;
- elements written past the end of weight, counted from its guard;
- a changed input (ids, grad);
- what it returned, if not weight itself: None, not a tensor, a new tensor instead of weight updated in place;
- a row no lookup touched that changed;
- a repeated row that got one of its updates instead of their sum: indexed assignment
  (``weight[ids] -= …``) writes each row once, with one of its lookups' values;
- otherwise the first wrong element (:func:`.checker.compare`), with a hint when every update has the wrong
  sign.

The reference is ``weight - lr · index_add(grad)`` in float64, rounded once to weight's dtype.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from lecture_code.exercises.checker import (
    Report,
    compare,
    first_index,
    memory_problems,
    returned_in_place,
    run_cases,
)
from lecture_code.exercises.guards import guarded_copy

__all__ = ["CASES", "TOLERANCES", "check_sgd_rows", "reference_sgd_rows"]

# dtype → (atol, rtol), with why
TOLERANCES = {
    torch.float32: (1e-6, 1e-6),  # a sum of ≤ 5 fp32 gradients per row and one multiply: a few ulps
    torch.float16: (2e-3, 2e-3),  # weight rounded to fp16 once (2^-10 relative), a sum in fp16 maybe
}


@dataclass(frozen=True)
class Case:
    name: str
    rows: int
    dim: int
    ids: tuple[int, ...]
    dtype: torch.dtype = torch.float32


CASES = (
    Case("10 rows, D 3, rows 2 and 7 repeated", 10, 3, (2, 7, 0, 7, 2, 9, 7)),
    Case("one row hit by all 5 lookups", 4, 5, (1, 1, 1, 1, 1)),
    Case("no repeats, D 16, first and last rows", 50, 16, (0, 49, 13, 21)),
    Case("an empty batch", 6, 4, ()),
    Case("fp16: 12 rows, D 8, repeats", 12, 8, (3, 11, 3, 0, 11, 3), torch.float16),
)
LR = 0.5


def reference_sgd_rows(weight, ids, grad, lr) -> torch.Tensor:
    """``weight`` after exact SGD on its touched rows, out of place, in float64, rounded once."""
    summed = torch.zeros(weight.shape, dtype=torch.float64).index_add_(0, ids.cpu(), grad.double().cpu())
    return (weight.double().cpu() - lr * summed).to(weight.dtype)


def _inputs(case: Case, seed: int):
    g = torch.Generator().manual_seed(seed)
    weight = torch.randn(case.rows, case.dim, generator=g).to(case.dtype)
    ids = torch.tensor(case.ids, dtype=torch.int64)
    grad = torch.randn(len(case.ids), case.dim, generator=g).to(case.dtype)
    return weight, ids, grad


def _single_update_rows(got, w0, ids, grad, atol, rtol) -> list[int]:
    # the repeated rows whose every element holds one lookup's update instead of the sum: indexed assignment
    # writes each element once, in no promised order (threads may even pick different lookups per element)
    found = []
    for row in (torch.bincount(ids, minlength=w0.shape[0]) > 1).nonzero()[:, 0].tolist():
        updates = w0[row].double() - LR * grad[ids == row].double()  # [k, D], one candidate per lookup
        if torch.isclose(got[row].double()[None, :], updates, atol=atol, rtol=rtol).any(0).all():
            found.append(row)
    return found


def _problems(fn: Callable, case: Case, seed: int, device: torch.device) -> list[str]:
    w0, ids, grad = _inputs(case, seed)
    want = reference_sgd_rows(w0, ids, grad, LR)
    gw, gi, gg = guarded_copy(w0.to(device)), guarded_copy(ids.to(device)), guarded_copy(grad.to(device))
    weight = gw.tensor
    try:
        ret = fn(weight, gi.tensor, gg.tensor, LR)
    except Exception as err:  # noqa: BLE001 — the learner's code: report, do not stop the notebook
        return [f"raised {type(err).__name__}: {err}"]
    problems = memory_problems(
        gw, "weight", "are the row indices in range?", [(gi, ids), (gg, grad)], "ids or grad",
        "update weight only",
    )  # fmt: skip
    problems += returned_in_place(
        ret, weight, "weight", "updating it", "update weight in place and return it"
    )
    got = weight.detach().cpu()
    untouched = torch.ones(case.rows, dtype=torch.bool)
    untouched[ids] = False
    changed = (got != w0) & untouched[:, None]
    if changed.any():
        i, j = first_index(changed)
        problems.append(
            f"weight[{i}, {j}] changed, but no lookup touched row {i}: update the looked-up rows only"
        )
        return problems
    atol, rtol = TOLERANCES[case.dtype]
    single = _single_update_rows(got, w0, ids, grad, atol, rtol)
    if single:
        row = single[0]
        problems.append(
            f"row {row} is looked up {int((ids == row).sum())} times but got one update, not their sum: "
            "indexed assignment (weight[ids] -= …) writes each row once; accumulate (index_add_)"
        )
        return problems
    wrong = compare("weight", got, want, atol, rtol)
    if wrong and len(case.ids) and torch.equal(got, w0):
        wrong[0] += "; weight is unchanged: no lookup's update was applied"
    elif wrong and torch.allclose(got.double(), (2 * w0.double() - want.double()), atol=atol, rtol=rtol):
        wrong[0] += "; every update has the wrong sign: SGD subtracts lr · grad"
    return problems + wrong


def check_sgd_rows(fn: Callable, device: torch.device | None = None, verbose: bool = True) -> Report:
    """Check ``fn(weight, ids, grad, lr) -> weight`` against the reference on :data:`CASES`; print the
    report if verbose."""
    return run_cases("exact SGD on the touched rows", CASES, _problems, fn, 500, device, verbose)
