"""Read what torch.compile generates: capture inductor's output code and list the fused kernels in it.

Inductor lowers a captured graph to one Python "wrapper" module per graph (forward, backward, or inference).
The wrapper defines the kernels and a ``call(args)`` function that allocates buffers and launches them:

- on a GPU (or on a CPU inside :func:`lecture_code.triton_on_cpu.inductor_triton_on_cpu`) each kernel is a
  ``@triton.jit`` function in a string handed to ``async_compile.triton('triton_poi_fused_relu_0', '''…''')``;
- on a CPU it is C++ handed to ``async_compile.cpp_pybinding([...], r'''…''')`` (``cpp_fused_relu_0``);
- matrix multiplies usually stay library calls: ``extern_kernels.addmm(...)`` / ``extern_kernels.bmm(...)``.

Kernel names say what was fused: ``triton_<kind>_fused_<ops>_<n>`` where ``kind`` is ``poi`` (pointwise),
``red`` (reduction), ``per`` (persistent reduction) or ``tem`` (template, e.g. a matmul with an
epilogue), and ``<ops>`` are the sorted ATen ops the kernel covers (``relu_threshold_backward``). The
wrapper also writes ``# Original ATen: [aten.relu, aten.threshold_backward]`` above every launch;
:attr:`Kernel.aten_ops` reads it.

Capture goes through ``torch._inductor.utils.run_and_get_code`` (stable across torch 2.x), and falls back to
the ``output_code`` log artifact (what ``TORCH_LOGS=output_code`` prints) if that helper ever moves.

Example::

    code = capture_compiled_code(model, dense, sparse)               # forward, inference graph
    code = capture_compiled_code(model, dense, sparse, backward=True,  # forward + backward graphs
                                 loss_fn=lambda logits: F.binary_cross_entropy_with_logits(logits, y))
    print(code.summary())
    show_kernel(find_kernels(code, contains=("relu",))[0])
"""

from __future__ import annotations

import functools
import logging
import os
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from lecture_code.triton_on_cpu import TritonOnCpuStatus, run_with_triton_on_cpu

__all__ = [
    "CompiledCode",
    "Kernel",
    "capture_compiled_code",
    "explain_graph_breaks",
    "find_kernels",
    "fused_ops",
    "parse_kernel_name",
    "parse_output_code",
    "show_kernel",
]

KERNEL_KINDS = {
    "poi": "pointwise",
    "red": "reduction",
    "per": "persistent reduction",
    "tem": "template",
    "for": "foreach",
    "spl": "split scan",
    "sca": "scan",
}


@dataclass
class Kernel:
    """One generated kernel.

    Attributes:
        name: ``triton_poi_fused_relu_0`` or ``cpp_fused_relu_0``.
        language: ``"triton"`` or ``"cpp"``.
        source: the kernel's full source (for Triton: the heuristics decorator, ``@triton.jit`` and the def).
        graph: ``"forward"``, ``"backward"``, ``"inference"`` or ``""`` (from the wrapper's ``# AOT ID``).
        heuristic: Triton launch heuristic (``"pointwise"``, ``"reduction"``, ``"template"`` …) or ``""``.
        aten_ops: ATen ops the kernel covers, from the wrapper's ``Original ATen`` comment (may be empty).
        file_index: which captured wrapper module it came from.
    """

    name: str
    language: str
    source: str
    graph: str = ""
    heuristic: str = ""
    aten_ops: tuple[str, ...] = ()
    file_index: int = 0

    @property
    def kind(self) -> str:
        """``pointwise``/``reduction``/… from the name (Triton) or the heuristic; ``"cpp"`` for C++."""
        if self.language == "cpp":
            return "cpp"
        m = re.match(r"triton_([a-z]{3})_", self.name)
        return KERNEL_KINDS.get(m.group(1), m.group(1)) if m else (self.heuristic or "triton")

    @property
    def fused_ops(self) -> tuple[str, ...]:
        """The ops this kernel fuses: the ``Original ATen`` comment if present, else parsed from the name."""
        return self.aten_ops or parse_kernel_name(self.name)

    @property
    def body(self) -> str:
        """The source without Triton's long ``@triton_heuristics…`` decorator (starts at ``@triton.jit``)."""
        start = self.source.find("@triton.jit")
        return self.source[start:] if start >= 0 else self.source

    def __str__(self) -> str:
        ops = ", ".join(self.fused_ops) or "?"
        where = f"{self.graph} " if self.graph else ""
        return f"{self.name} ({where}{self.kind}; fuses {ops}; {len(self.source.splitlines())} lines)"


@dataclass
class CompiledCode:
    """Everything one capture produced.

    Attributes:
        files: the generated wrapper modules (Python source), in compile order.
        kernels: every kernel defined in them.
        extern_calls: library calls the wrappers make instead of generated kernels (``addmm``, ``bmm`` …).
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
        return [_graph_label(f) for f in self.files]

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
            counts: dict[str, int] = {}
            for call in self.extern_calls:
                counts[call] = counts.get(call, 0) + 1
            lines.append("library calls: " + ", ".join(f"{n} ×{c}" for n, c in counts.items()))
        lines.extend(f"note: {n}" for n in self.notes)
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()


# ---------------------------------------------------------------------------------------------------------
# Parsing the generated wrapper modules
# ---------------------------------------------------------------------------------------------------------
_KERNEL_DEF = re.compile(r"^(\w+) = async_compile\.(\w+)\(", re.M)
_TRIPLE = re.compile(r"'''(.*?)'''", re.S)
_RAW_TRITON = re.compile(r'R"TRITON\((.*?)\)TRITON"', re.S)  # cpp_wrapper embeds Triton sources like this
_JIT_DEF = re.compile(r"@triton\.jit\s*\ndef (\w+)\(")
_ATEN_COMMENT = re.compile(r"Original ATen: \[([^\]]*)\]")
_EXTERN = re.compile(r"extern_kernels\.(\w+)\(")
_CACHE_PATH = re.compile(r"(/[^\s'\"]*?)?/torchinductor_[^/\s'\"]+/")


def _graph_label(module_text: str) -> str:
    m = re.search(r"# AOT ID: \['?\d*_?(\w+?)'?\]", module_text)
    if not m:
        return ""
    label = m.group(1)
    return label if label in ("forward", "backward", "inference") else label


def _launch_aten_ops(module_text: str, names: Iterable[str]) -> dict[str, tuple[str, ...]]:
    """Map kernel name → ATen ops, from the ``Original ATen`` comments in the module."""
    names = set(names)
    ops: dict[str, tuple[str, ...]] = {}
    lines = module_text.splitlines()
    for i, line in enumerate(lines):
        m = re.match(r"\s*(\w+)(?:\.run)?\(", line)
        name = m.group(1) if m else None
        if name is None:  # a definition: "name = async_compile.triton(…" has its comment above it too
            d = re.match(r"(\w+) = async_compile\.", line)
            name = d.group(1) if d else None
        if name not in names or name in ops:
            continue
        for j in range(i - 1, max(i - 40, -1), -1):
            if not lines[j].lstrip().startswith("#"):
                break
            c = _ATEN_COMMENT.search(lines[j])
            if c:
                found = [op.strip().removeprefix("aten.") for op in c.group(1).split(",") if op.strip()]
                ops[name] = tuple(dict.fromkeys(found))
                break
    return ops


def parse_output_code(files: Sequence[str]) -> tuple[list[Kernel], list[str]]:
    """Find every kernel (Triton and C++) and every ``extern_kernels`` call in the wrapper modules."""
    kernels: list[Kernel] = []
    extern: list[str] = []
    for index, text in enumerate(files):
        graph = _graph_label(text)
        found: list[Kernel] = []
        for m in _KERNEL_DEF.finditer(text):
            name, how = m.group(1), m.group(2)
            literal = _TRIPLE.search(text, m.end())
            if literal is None:
                continue
            src = literal.group(1).strip("\n")
            if how == "triton" or "@triton.jit" in src:
                jit = _JIT_DEF.search(src)
                start = src.find("@triton_heuristics.")
                start = start if start >= 0 else (jit.start() if jit else 0)
                heur = re.match(r"@triton_heuristics\.(\w+)", src[start:])
                found.append(
                    Kernel(
                        name=jit.group(1) if jit else name,
                        language="triton",
                        source=src[start:].rstrip() + "\n",
                        graph=graph,
                        heuristic=heur.group(1) if heur else "",
                        file_index=index,
                    )
                )
            elif how.startswith("cpp"):
                found.append(
                    Kernel(
                        name=name, language="cpp", source=src.rstrip() + "\n", graph=graph, file_index=index
                    )
                )
        if not found:  # cpp_wrapper mode: Triton sources sit in C++ raw strings
            for raw in _RAW_TRITON.finditer(text):
                jit = _JIT_DEF.search(raw.group(1))
                if jit:
                    found.append(
                        Kernel(jit.group(1), "triton", raw.group(1).strip() + "\n", graph, file_index=index)
                    )
        aten = _launch_aten_ops(text, (k.name for k in found))
        for k in found:
            k.aten_ops = aten.get(k.name, ())
        kernels.extend(found)
        extern.extend(_EXTERN.findall(text))
    return kernels, extern


@functools.cache
def _aten_op_names() -> frozenset[str]:
    """Every ATen op name this torch knows (``relu``, ``threshold_backward``, ``_to_copy`` …)."""
    try:
        return frozenset(n for n in dir(torch.ops.aten) if not n.startswith("__"))
    except Exception:  # noqa: BLE001  (names then come out one segment at a time)
        return frozenset()


def parse_kernel_name(name: str) -> tuple[str, ...]:
    """``triton_poi_fused_addmm_relu_0`` → ``("addmm", "relu")``; ``cpp_fused_relu_threshold_backward_1``
    → ``("relu", "threshold_backward")``.

    Inductor joins the sorted ATen op names with ``_``, and op names contain ``_`` themselves, so the
    segments are regrouped greedily into the longest known ATen op name.
    """
    m = re.match(r"(?:triton_[a-z]+_|cpp_)?fused_(.*?)(?:_\d+)?$", name)
    if not m:
        return ()
    parts = m.group(1).split("_")
    known = _aten_op_names()
    ops: list[str] = []
    i = 0
    while i < len(parts):
        for j in range(len(parts), i, -1):
            candidate = "_".join(parts[i:j])
            if candidate in known or j == i + 1:
                if candidate:
                    ops.append(candidate)
                i = j
                break
    return tuple(ops)


def find_kernels(
    code: CompiledCode | Sequence[Kernel],
    contains: Sequence[str] | str = (),
    *,
    source_contains: Sequence[str] | str = (),
    graph: str | None = None,
    language: str | None = None,
) -> list[Kernel]:
    """Kernels whose name contains every string in ``contains`` (and whose source contains every string in
    ``source_contains``), optionally only from one ``graph`` (``"forward"``…) or ``language``.

    ``find_kernels(code, contains=("relu",))`` → every kernel that fused a ReLU.
    """
    kernels = code.kernels if isinstance(code, CompiledCode) else list(code)
    contains = (contains,) if isinstance(contains, str) else tuple(contains)
    source_contains = (source_contains,) if isinstance(source_contains, str) else tuple(source_contains)
    return [
        k
        for k in kernels
        if all(s in k.name for s in contains)
        and all(s in k.source for s in source_contains)
        and (graph is None or k.graph == graph)
        and (language is None or k.language == language)
    ]


def fused_ops(code: CompiledCode | Sequence[Kernel]) -> dict[str, tuple[str, ...]]:
    """``{kernel name: ATen ops it fuses}`` for every kernel, in launch-definition order."""
    kernels = code.kernels if isinstance(code, CompiledCode) else list(code)
    return {k.name: k.fused_ops for k in kernels}


def _clean_paths(text: str) -> str:
    """Replace machine-specific inductor cache paths (``/tmp/torchinductor_user/…``) with a placeholder."""
    return _CACHE_PATH.sub("<inductor-cache>/", text)


def show_kernel(
    kernel: Kernel | CompiledCode,
    name: str | None = None,
    *,
    decorators: bool = False,
    max_lines: int | None = None,
    file: Any = None,
) -> str:
    """Print one kernel with a header line (what it fuses, which graph) and return the printed text.

    ``show_kernel(code, "triton_poi_fused_relu_0")`` or ``show_kernel(kernel)``. The Triton heuristics
    decorator (a long dict of launch metadata) is summarised in one line unless ``decorators=True``;
    inductor cache paths are replaced by ``<inductor-cache>`` so notebook outputs carry no machine paths.
    """
    if isinstance(kernel, CompiledCode):
        if name is None:
            raise ValueError("show_kernel(code, name): name the kernel to show")
        kernel = kernel.kernel(name)
    text = kernel.source if decorators or kernel.language != "triton" else kernel.body
    lines = _clean_paths(text).rstrip("\n").splitlines()
    if max_lines is not None and len(lines) > max_lines:
        lines = lines[:max_lines] + [f"... ({len(lines) - max_lines} more lines)"]
    header = f"# {kernel}"
    if kernel.language == "triton" and not decorators and kernel.heuristic:
        hints = re.search(r"size_hints=(\{[^}]*\})", kernel.source)
        header += f"\n# launched by triton_heuristics.{kernel.heuristic}" + (
            f", size_hints={hints.group(1)}" if hints else ""
        )
    out = header + "\n" + "\n".join(lines)
    print(out, file=file)
    return out


# ---------------------------------------------------------------------------------------------------------
# Capturing
# ---------------------------------------------------------------------------------------------------------
def _run_and_get_code(fn: Callable[[], Any]) -> tuple[Any, list[str]]:
    """``run_and_get_code`` if this torch has it, else the ``output_code`` log artifact."""
    try:
        from torch._inductor.utils import run_and_get_code
    except ImportError:
        run_and_get_code = None
    if run_and_get_code is not None:
        return run_and_get_code(fn)
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
