"""What every exercise checker shares: compare one answer with the reference and say precisely what is wrong.

:func:`compare` looks at one tensor the learner produced against the reference's, in the order a learner
would fix things: not a tensor → wrong shape (saying when it is the expected shape transposed) → wrong
dtype → a NaN where the reference has a number (its first index) → the first element outside the tolerance,
with its index, the expected and the got value and how many elements are wrong. A :class:`Report` gathers
one line per case; it never raises for a wrong answer, so a notebook cell that checks a wrong attempt still
runs to the end. The exercise modules (``bias_gelu``, ``lora_da``, …) build their cases on this.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

__all__ = ["Report", "compare", "first_index"]


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
    """One line per case: ``ok`` or what is wrong. Truthy when every case passes."""

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
        lines = [f"{name:<{width}}  {'; '.join(problems) or 'ok'}" for name, problems in self.cases]
        lines.append(
            f"{self.exercise}: all {len(self.cases)} cases pass" if self.ok else "not yet: see above"
        )
        return "\n".join(lines)
