"""What every exercise checker shares: compare one answer with the reference and say precisely what is wrong.

:func:`compare` looks at one tensor the learner produced against the reference's, in the order a learner
would fix things: not a tensor → wrong shape (saying when it is the expected shape transposed) → wrong
dtype → a NaN where the reference has a number (its first index) → the first element outside the tolerance,
with its index, the expected and the got value and how many elements are wrong. A :class:`Report` gathers
one line per case; it never raises for a wrong answer, so a notebook cell that checks a wrong attempt still
runs to the end. :func:`run_cases` runs an exercise's cases into a report; :func:`returned_in_place` judges
what an in-place function returned; :func:`memory_problems` what it did to memory it should not touch.
The exercise modules (``bias_gelu``, ``lora_da``, …) build on these.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from kernels import runtime
from lecture_code.exercises.guards import Guarded

__all__ = ["Report", "compare", "first_index", "memory_problems", "returned_in_place", "run_cases"]


def first_index(mask: torch.Tensor) -> tuple[int, ...]:
    """The index (in ``mask``'s shape) of the first True element in row-major order."""
    flat = int(mask.reshape(-1).nonzero()[0, 0])
    return tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), mask.shape))


def _at(name: str, index: tuple[int, ...]) -> str:
    return f"{name}[{', '.join(str(i) for i in index)}]"


def compare(
    name: str, got: object, want: torch.Tensor, atol: float, rtol: float, nan_hint: str = ""
) -> list[str]:
    """Problems with ``got`` as an answer for ``want`` (empty: it is right). ``nan_hint`` follows a NaN."""
    if not isinstance(got, torch.Tensor):
        return [f"{name} is a {type(got).__name__}, not a tensor"]
    if got.shape != want.shape:
        transposed = got.dim() == 2 and tuple(got.shape) == tuple(want.shape)[::-1]
        hint = " — that is the expected shape transposed: a swapped transpose?" if transposed else ""
        return [f"{name} has shape {tuple(got.shape)}, expected {tuple(want.shape)}{hint}"]
    if got.dtype != want.dtype:
        return [f"{name} has dtype {got.dtype}, expected {want.dtype} (the inputs' dtype)"]
    g, w = got.detach().cpu().double(), want.detach().cpu().double()
    nan = g.isnan() & ~w.isnan()
    if nan.any():
        i = first_index(nan)
        return [f"{_at(name, i)} is NaN, expected {w[i].item():.6g}{nan_hint} ({int(nan.sum())} NaN in all)"]
    bad = ~torch.isclose(g, w, atol=atol, rtol=rtol, equal_nan=True)
    if bad.any():
        i = first_index(bad)
        return [
            f"{_at(name, i)} = {g[i].item():.6g}, expected {w[i].item():.6g} "
            f"(|error| {abs(g[i] - w[i]).item():.3g} > {atol:g} + {rtol:g}·|expected|); "
            f"{int(bad.sum()):,} of {bad.numel():,} elements wrong"
        ]
    return []


@dataclass
class Report:
    """One line per case: ``ok`` or what is wrong; a case whose line would run past :attr:`WIDTH` (a
    notebook's width) lists its problems under its name instead, one wrapped bullet each. Truthy when every
    case passes."""

    WIDTH = 100

    exercise: str
    cases: list[tuple[str, list[str]]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(not problems for _, problems in self.cases)

    def __bool__(self) -> bool:
        return self.ok

    def problems(self) -> list[str]:
        return [p for _, problems in self.cases for p in problems]

    def __str__(self) -> str:
        width = max(len(name) for name, _ in self.cases)
        lines = []
        for name, problems in self.cases:
            line = f"{name:<{width}}  {'; '.join(problems) or 'ok'}"
            if len(line) <= self.WIDTH:
                lines.append(line)
                continue
            lines.append(name)
            for problem in problems:
                lines += textwrap.wrap(problem, self.WIDTH, initial_indent="  - ", subsequent_indent="    ")
        lines.append(
            f"{self.exercise}: all {len(self.cases)} cases pass" if self.ok else "not yet: see above"
        )
        return "\n".join(lines)


def returned_in_place(ret: object, target: torch.Tensor, name: str, done: str, fix: str) -> list[str]:
    """Problems with what an in-place function returned instead of ``target`` itself (empty: it is right).

    ``name`` is what to return ("y"), ``done`` what the function should have done to it ("adding into it"),
    ``fix`` the advice for a new tensor ("add into y in place and return y")."""
    if ret is None:
        return [f"returned None: return {name} (after {done} in place)"]
    if isinstance(ret, torch.Tensor) and ret.shape != target.shape:
        return [
            p.replace("returned value has", "returned a tensor of")
            for p in compare("returned value", ret, target, 0, 0)
        ]
    if not isinstance(ret, torch.Tensor):
        return [f"returned a {type(ret).__name__}, not a tensor: return {name}"]
    if ret.data_ptr() != target.data_ptr():
        return [f"returned a new tensor: {fix}"]
    return []


def run_cases(
    exercise: str,
    cases: Sequence,
    problems: Callable[[Callable, object, int, torch.device], list[str]],
    fn: Callable,
    first_seed: int,
    device: torch.device | None,
    verbose: bool,
) -> Report:
    """``problems(fn, case, seed, device)`` for every case (seeds ``first_seed``, ``first_seed + 1``, …; the
    device by default :func:`kernels.runtime.default_device`), as a :class:`Report` named ``exercise``,
    printed if ``verbose``."""
    device = device or runtime.default_device()
    report = Report(exercise)
    for k, case in enumerate(cases):
        report.cases.append((case.name, problems(fn, case, first_seed + k, device)))
    if verbose:
        print(report)
    return report


def memory_problems(
    written: Guarded,
    name: str,
    past_hint: str,
    inputs: Sequence[tuple[Guarded, torch.Tensor]],
    input_names: str,
    store_hint: str,
) -> list[str]:
    """Writes past the end of ``written`` (the tensor the learner's code writes, called ``name``), and any
    guarded input that no longer equals its original: one problem line each, with the hint to fix it."""
    problems = []
    past = written.written_past_end()
    if past:
        problems.append(f"wrote {past} element(s) past the end of {name}: {past_hint}")
    if not all(torch.equal(g.tensor.cpu(), original) for g, original in inputs):
        problems.append(f"changed an input ({input_names}): {store_hint}")
    return problems
