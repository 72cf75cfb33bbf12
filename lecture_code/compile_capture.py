"""Capture what torch.compile generates: compile a function or module, run it once, keep inductor's code.

Inductor lowers a captured graph to one Python "wrapper" module per graph (forward, backward, or inference).
The wrapper defines the kernels and a ``call(args)`` function that allocates buffers and launches them.
:func:`capture_compiled_code` collects those modules (and the result, and the gradients when asked for a
backward) into a :class:`CompiledCode`, whose kernels :mod:`lecture_code.compile_kernels` has parsed.

Capture goes through ``torch._inductor.utils.run_and_get_code`` (stable across torch 2.x), and falls back to
the ``output_code`` log artifact (what ``TORCH_LOGS=output_code`` prints) if that helper ever moves. When
``fullgraph=True`` fails, :func:`explain_graph_breaks` records why and the capture is retried in pieces.
"""

from __future__ import annotations

import logging
import os
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from lecture_code.compile_kernels import Kernel, find_kernels, graph_label, parse_output_code
from lecture_code.triton_on_cpu import TritonOnCpuStatus, run_with_triton_on_cpu

__all__ = ["CompiledCode", "capture_compiled_code", "explain_graph_breaks"]


@dataclass
class CompiledCode:
    """Everything one capture produced.

    Attributes:
        files: the generated wrapper modules (Python source), in compile order.
        kernels: every kernel defined in them.
        extern_calls: library calls the wrappers make instead of generated kernels (``addmm``, ``bmm`` …),
            including ATen fallbacks inductor did not lower (``searchsorted`` on a CPU).
        backend: ``"triton"`` or ``"cpp"``: what inductor emitted.
        fallback_reason: why Triton-on-CPU was asked for but C++ came out ("" otherwise).
        fullgraph: whether one graph captured the whole function (False after a graph-break retry).
        graph_break_reasons: dynamo's reasons when ``fullgraph=True`` failed.
        notes: human-readable messages about fallbacks, for the learner.
        result: what the compiled call returned (the output; the loss when ``backward=True``).
        grads: parameter (and input) gradients from the compiled backward, by name.
    """

    files: list[str]
    kernels: list[Kernel]
    extern_calls: list[str] = field(default_factory=list)
    backend: str = "cpp"
    fallback_reason: str = ""
    fullgraph: bool = True
    graph_break_reasons: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    result: Any = None
    grads: dict[str, torch.Tensor] = field(default_factory=dict)

    @property
    def graphs(self) -> list[str]:
        """Graph labels in capture order (``forward``, ``backward``, ``inference``)."""
        return [graph_label(f) for f in self.files]

    def find(self, contains: Sequence[str] | str = (), **kwargs: Any) -> list[Kernel]:
        """Shortcut for :func:`find_kernels` on this capture."""
        return find_kernels(self, contains, **kwargs)

    def kernel(self, name: str) -> Kernel:
        """The kernel called ``name`` (exact), or a ``KeyError`` listing the names there are."""
        for k in self.kernels:
            if k.name == name:
                return k
        raise KeyError(f"no kernel {name!r}; kernels: {[k.name for k in self.kernels]}")

    def summary(self) -> str:
        """A table: one line per kernel (graph, name, kind, fused ops), then the library calls and notes."""
        lines = [
            f"backend: {self.backend}"
            + (f" (fell back: {self.fallback_reason})" if self.fallback_reason else "")
        ]
        lines.append(f"{'graph':<10} {'kernel':<60} {'kind':<20} fused ATen ops")
        for k in self.kernels:
            name = k.name if len(k.name) <= 60 else k.name[:57] + "..."
            lines.append(f"{k.graph or '-':<10} {name:<60} {k.kind:<20} {', '.join(k.fused_ops)}")
        if self.extern_calls:
            counts = Counter(self.extern_calls)
            lines.append("library calls: " + ", ".join(f"{n} ×{c}" for n, c in counts.items()))
        lines.extend(f"note: {n}" for n in self.notes)
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()


# ---------------------------------------------------------------------------------------------------------
# Capturing
# ---------------------------------------------------------------------------------------------------------
def _run_and_get_code(fn: Callable[[], Any]) -> tuple[Any, list[str]]:
    """``run_and_get_code`` if this torch has it, else the ``output_code`` log artifact."""
    try:
        from torch._inductor.utils import run_and_get_code
    except ImportError:
        return _run_and_get_code_from_logs(fn)
    return run_and_get_code(fn)


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
    logger = logging.getLogger("torch._inductor")
    logger.addHandler(handler)
    torch._logging.set_logs(output_code=True)
    try:
        torch._dynamo.reset()
        result = fn()
    finally:
        torch._logging.set_logs()
        logger.removeHandler(handler)
    return result, list(dict.fromkeys(records))


def _short_path(filename: str) -> str:
    """``lecture_code/model/hashing.py`` rather than a machine-specific absolute path (notebook outputs)."""
    try:
        rel = os.path.relpath(filename)
    except ValueError:
        return os.path.basename(filename)
    return rel if not rel.startswith("..") else os.path.basename(filename)


def explain_graph_breaks(fn: Callable[..., Any], *example_inputs: Any) -> list[str]:
    """Dynamo's reasons for every graph break in ``fn(*example_inputs)`` (``torch._dynamo.explain``)."""
    try:
        explanation = torch._dynamo.explain(fn)(*example_inputs)
    except Exception as exc:  # noqa: BLE001
        return [f"torch._dynamo.explain failed: {type(exc).__name__}: {exc}"]
    finally:
        torch._dynamo.reset()
    reasons = []
    for br in getattr(explanation, "break_reasons", []) or []:
        reason = " ".join(str(getattr(br, "reason", br)).split())
        reason = re.split(r" (?:Developer debug context|For more details about this graph break):", reason)[0]
        stack = getattr(br, "user_stack", None) or []
        if stack:
            frame = stack[-1]
            reason += f" (at {_short_path(getattr(frame, 'filename', '?'))}:{getattr(frame, 'lineno', '?')})"
        reasons.append(reason)
    return reasons


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
            (:mod:`lecture_code.triton_on_cpu`); falls back to C++ with ``fallback_reason`` if refused.
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
        break_reasons = explain_graph_breaks(target, *example_inputs)
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
