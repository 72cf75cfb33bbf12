"""Capture what torch.compile generates: compile a function or module, run it once, keep inductor's code.

Inductor lowers a captured graph to one Python "wrapper" module per graph (forward, backward, or inference).
The wrapper defines the kernels and a ``call(args)`` function that allocates buffers and launches them.
:func:`capture_compiled_code` collects those modules (and the result, and the gradients when asked for a
backward) into a :class:`~lecture_code.compile.generated_code.CompiledCode`, whose kernels it parses.

Capture goes through ``torch._inductor.utils.run_and_get_code`` (stable across torch 2.x; reached, like every
internal, through :mod:`lecture_code.internals`), and falls back to the ``output_code`` log artifact (what
``TORCH_LOGS=output_code`` prints) if that helper ever moves. When ``fullgraph=True`` fails,
:func:`explain_graph_breaks` records why and the capture is retried in pieces.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from lecture_code.compile.generated_code import CompiledCode, parse_output_code
from lecture_code.internals import dynamo_explain, dynamo_logger, output_code_logged, run_and_get_code
from lecture_code.triton_cpu.inductor_on_cpu import TritonOnCpuStatus, run_with_triton_on_cpu

__all__ = ["GraphBreaks", "capture_compiled_code", "explain_graph_breaks"]


# ---------------------------------------------------------------------------------------------------------
# Capturing
# ---------------------------------------------------------------------------------------------------------
def _run_and_get_code(fn: Callable[[], Any]) -> tuple[Any, list[str]]:
    """``run_and_get_code`` if this torch has it, else the ``output_code`` log artifact."""
    try:
        return run_and_get_code(fn)
    except ImportError:  # the helper moved: the public log artifact still has the code
        return _run_and_get_code_from_logs(fn)


def _run_and_get_code_from_logs(fn: Callable[[], Any]) -> tuple[Any, list[str]]:
    """What ``TORCH_LOGS=output_code`` prints, collected from the log record instead of stderr."""
    records: list[str] = []

    class _Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            msg = record.getMessage()
            start = msg.find("# AOT ID")
            if start < 0:
                start = msg.find("from ctypes import")
            if start >= 0:
                records.append(msg[start:])

    handler = _Collect(level=logging.DEBUG)
    with output_code_logged() as logger:
        logger.addHandler(handler)
        try:
            torch.compiler.reset()
            result = fn()
        finally:
            logger.removeHandler(handler)
    return result, list(dict.fromkeys(records))


def _short_path(filename: str) -> str:
    """``lecture_code/model/hashing.py`` rather than a machine-specific absolute path (notebook outputs)."""
    try:
        rel = os.path.relpath(filename)
    except ValueError:
        return os.path.basename(filename)
    return rel if not rel.startswith("..") else os.path.basename(filename)


@contextlib.contextmanager
def _dynamo_errors_only() -> Iterator[None]:
    """Silence dynamo's warnings (``Profiler record function … will be ignored`` from ``optimizer.step()``).

    :func:`explain_graph_breaks` returns the reasons that matter; notebook outputs stay free of log lines.
    """
    logger = dynamo_logger()
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


@dataclass(frozen=True)
class GraphBreaks:
    """What ``torch._dynamo.explain`` found for one call: the graphs it traced (per graph, its operations by
    name and count, most frequent first), the breaks between them and the reasons dynamo gave for them."""

    graph_ops: list[dict[str, int]]
    breaks: int
    reasons: list[str]

    @property
    def graphs(self) -> int:
        return len(self.graph_ops)

    def __str__(self) -> str:
        lines = [f"dynamo traced {self.graphs} graph(s) with {self.breaks} graph break(s)"]
        for i, ops in enumerate(self.graph_ops, 1):
            top = ", ".join(f"{name} {n}" for name, n in list(ops.items())[:5])
            lines.append(f"graph {i}: {sum(ops.values())} ops; most frequent: {top}")
        return "\n".join([*lines, *(f"graph break: {r}" for r in self.reasons)])


def _ops(graph_module: Any) -> dict[str, int]:
    calls = (n for n in graph_module.graph.nodes if n.op in ("call_function", "call_method"))
    return dict(Counter(getattr(n.target, "__name__", str(n.target)) for n in calls).most_common())


def explain_graph_breaks(fn: Callable[..., Any], *example_inputs: Any) -> GraphBreaks:
    """Run ``fn(*example_inputs)`` under ``torch._dynamo.explain``: graph and break counts, break reasons."""
    try:
        with _dynamo_errors_only():
            explanation = dynamo_explain(fn, *example_inputs)
    except Exception as exc:  # noqa: BLE001
        return GraphBreaks([], 0, [f"torch._dynamo.explain failed: {type(exc).__name__}: {exc}"])
    finally:
        torch.compiler.reset()
    reasons = []
    for br in getattr(explanation, "break_reasons", []) or []:
        reason = " ".join(str(getattr(br, "reason", br)).split())
        reason = re.split(r" (?:Developer debug context|For more details about this graph break):", reason)[0]
        stack = getattr(br, "user_stack", None) or []
        if stack:
            frame = stack[-1]
            reason += f" (at {_short_path(getattr(frame, 'filename', '?'))}:{getattr(frame, 'lineno', '?')})"
        reasons.append(reason)
    return GraphBreaks([_ops(g) for g in explanation.graphs], explanation.graph_break_count, reasons)


def _named_leaves(fn: Any, inputs: Sequence[Any]) -> dict[str, torch.Tensor]:
    leaves: dict[str, torch.Tensor] = {}
    if isinstance(fn, nn.Module):
        leaves.update({n: p for n, p in fn.named_parameters() if p.requires_grad})
    for i, x in enumerate(inputs):
        if isinstance(x, torch.Tensor) and x.requires_grad and x.is_leaf:
            leaves[f"input{i}"] = x
    return leaves


def _default_loss(output: Any) -> torch.Tensor:
    if isinstance(output, torch.Tensor):
        return output.float().sum()
    if isinstance(output, (tuple, list)):
        return sum(o.float().sum() for o in output if isinstance(o, torch.Tensor))
    raise TypeError("backward=True needs a loss_fn when the function does not return tensors")


def capture_compiled_code(
    fn_or_module: Callable[..., Any],
    *example_inputs: Any,
    backward: bool = False,
    fullgraph: bool = True,
    loss_fn: Callable[[Any], torch.Tensor] | None = None,
    no_grad: bool = True,
    triton_on_cpu: bool = False,
    **compile_kwargs: Any,
) -> CompiledCode:
    """Compile ``fn_or_module`` with ``torch.compile``, run it once on ``example_inputs``, return its code.

    Args:
        fn_or_module: a function or ``nn.Module``.
        example_inputs: the inputs of one call (their device decides the backend: cuda → Triton).
        backward: also run a backward pass so the backward graph is compiled and captured: the compiled
            function becomes ``loss_fn(fn_or_module(*inputs))`` (default loss: the sum of the outputs), then
            ``loss.backward()``. Parameter gradients are returned in ``grads`` and reset afterwards, so the
            module is left as it was.
        fullgraph: ask for one graph. If dynamo cannot, the graph-break reasons (from
            ``torch._dynamo.explain``) are recorded and the capture is retried with ``fullgraph=False``.
        no_grad: forward only: run under ``torch.no_grad()`` (the inference graph; without it, a module with
            trainable parameters gives the training forward, which also saves what the backward needs).
        triton_on_cpu: on a CPU, have inductor write Triton instead of C++
            (:mod:`lecture_code.triton_cpu`); falls back to C++ with ``fallback_reason`` if refused.
        compile_kwargs: passed on to ``torch.compile`` (``mode=``, ``dynamic=`` …).
    """
    leaves = _named_leaves(fn_or_module, example_inputs) if backward else {}
    saved_grads = {name: t.grad for name, t in leaves.items()}
    grads: dict[str, torch.Tensor] = {}

    if backward:
        loss = loss_fn or _default_loss

        def target(*inputs: Any) -> Any:
            return loss(fn_or_module(*inputs))
    else:
        target = fn_or_module

    def compile_and_run(full: bool) -> tuple[Any, list[str]]:
        compiled = torch.compile(target, fullgraph=full, **compile_kwargs)

        def once() -> Any:
            if backward:
                for t in leaves.values():
                    t.grad = None
                out = compiled(*example_inputs)
                out.backward()
                grads.update({n: t.grad.detach().clone() for n, t in leaves.items() if t.grad is not None})
                return out.detach()
            if no_grad:
                with torch.no_grad():
                    return compiled(*example_inputs)
            return compiled(*example_inputs)

        try:
            return _run_and_get_code(once)
        finally:
            for name, t in leaves.items():
                t.grad = saved_grads[name]

    notes: list[str] = []
    break_reasons: list[str] = []
    status = TritonOnCpuStatus(backend="cpp")

    on_cuda = any(isinstance(x, torch.Tensor) and x.is_cuda for x in example_inputs)

    def attempt(full: bool) -> tuple[Any, list[str]]:
        nonlocal status
        if triton_on_cpu and not on_cuda:
            (result, files), status = run_with_triton_on_cpu(lambda: compile_and_run(full))
            return result, files
        return compile_and_run(full)

    try:
        result, files = attempt(fullgraph)
        used_fullgraph = fullgraph
    except Exception as exc:
        if not fullgraph:
            raise
        break_reasons = explain_graph_breaks(target, *example_inputs).reasons
        if not break_reasons:
            raise
        notes.append(
            f"fullgraph=True failed ({type(exc).__name__}) with {len(break_reasons)} graph break(s): "
            + "; ".join(break_reasons)
            + ". Captured again with fullgraph=False: each piece is compiled separately."
        )
        result, files = attempt(False)
        used_fullgraph = False

    kernels, extern = parse_output_code(files)
    if any(k.language == "triton" for k in kernels):
        backend = "triton"
    elif kernels:
        backend = "cpp"
    else:
        backend = "triton" if on_cuda else status.backend
    if triton_on_cpu and status.reason:
        notes.append(f"Triton on the CPU was not available, showing C++ instead: {status.reason}")
    if not files:
        notes.append("inductor generated no code: was the function already compiled, or all library calls?")
    return CompiledCode(
        files=files,
        kernels=kernels,
        extern_calls=extern,
        backend=backend,
        fallback_reason=status.reason if triton_on_cpu else "",
        fullgraph=used_fullgraph,
        graph_break_reasons=break_reasons,
        notes=notes,
        result=result,
        grads=grads,
    )
