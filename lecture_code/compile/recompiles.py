"""Guards and recompiles: count how often dynamo compiles a function over a series of calls, and why.

Dynamo traces a graph under assumptions about its inputs (each tensor's sizes, dtype, device, whether it
needs a gradient …) and *guards* the graph with checks of them. A later call that fails a guard is compiled
again. For sizes, the first change turns on *automatic dynamic shapes*: dynamo recompiles with that size as a
symbol (``s0``) instead of a constant, so a third size reuses the graph. Such a graph takes its symbolic sizes
as extra ``SymInt`` inputs, next to the tensors.

:func:`count_compiles` compiles a function with a backend that only counts (it returns the traced graph's own
``forward``: no inductor, so each compile costs a trace, not code generation), runs it on each call's
arguments and returns a :class:`Recompiles`: per compile, which call triggered it and the symbolic sizes its
graph takes, and the guard failures from dynamo's own ``recompiles`` log (``TORCH_LOGS=recompiles``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from lecture_code.internals import recompiles_logged

__all__ = ["Compile", "Recompiles", "count_compiles", "guard_failures"]


@dataclass(frozen=True)
class Compile:
    """One graph dynamo handed to the backend: the call (0-based) that triggered it, and the sizes the graph
    takes as symbolic inputs (empty: every size is a constant baked into the graph)."""

    call: int
    symbolic_sizes: tuple[str, ...]

    @property
    def dynamic(self) -> bool:
        return bool(self.symbolic_sizes)


@dataclass(frozen=True)
class Recompiles:
    """What :func:`count_compiles` saw: the compiles, how many calls ran, and dynamo's guard failures."""

    compiles: list[Compile]
    calls: int
    guard_failures: list[str]

    def __str__(self) -> str:
        lines = [f"{self.calls} calls, {len(self.compiles)} compile(s)"]
        for i, c in enumerate(self.compiles, 1):
            sizes = f"symbolic sizes {', '.join(c.symbolic_sizes)}" if c.dynamic else "static sizes"
            lines.append(f"compile {i}: triggered by call {c.call}, {sizes}")
        return "\n".join(lines)


def guard_failures(messages: Sequence[str]) -> list[str]:
    """The ``- 0/0: …`` lines under ``triggered by the following guard failure(s):`` of each recompile
    message (the ``Recompiling function …`` line before them names a file path: left out)."""
    lines: list[str] = []
    for message in messages:
        rows = [row.strip() for row in message.splitlines()]
        start = next((i for i, row in enumerate(rows) if row.startswith("triggered by")), None)
        if start is not None:
            lines.extend(row for row in rows[start + 1 :] if row.startswith("- "))
    return lines


def count_compiles(
    fn: Callable[..., Any], calls: Sequence[Sequence[Any]], **compile_kwargs: Any
) -> Recompiles:
    """Compile ``fn`` with a counting backend and call it once per entry of ``calls`` (each a tuple of
    arguments); dynamo's state is reset before and after, so earlier compiles of ``fn`` do not count.

    Args:
        fn: a function or bound method (``model.predict_proba``).
        calls: the arguments of each call, in order.
        compile_kwargs: passed on to ``torch.compile`` (``dynamic=False`` …), except ``backend``.
    """
    compiles: list[Compile] = []
    current = 0

    def counting_backend(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
        symbols = tuple(str(x) for x in example_inputs if isinstance(x, torch.SymInt))
        compiles.append(Compile(call=current, symbolic_sizes=symbols))
        return gm.forward

    torch.compiler.reset()
    try:
        compiled = torch.compile(fn, backend=counting_backend, **compile_kwargs)
        with recompiles_logged() as messages:
            for current, args in enumerate(calls):  # noqa: B007  (read by the backend)
                compiled(*args)
    finally:
        torch.compiler.reset()
    return Recompiles(compiles, len(calls), guard_failures(messages))
