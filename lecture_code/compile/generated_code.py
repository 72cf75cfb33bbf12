"""The kernels in inductor's generated code: parse them out of the wrapper modules, list, find and show them.

Kernel names say what was fused: ``triton_<kind>_fused_<ops>_<n>`` where ``kind`` is ``poi`` (pointwise),
``red`` (reduction), ``per`` (persistent reduction) or ``tem`` (template, e.g. a matmul with an
epilogue), and ``<ops>`` are the sorted ATen ops the kernel covers (``relu_threshold_backward``). The
wrapper also writes ``# Original ATen: [aten.relu, aten.threshold_backward]`` above every launch;
:attr:`Kernel.aten_ops` reads it. C++ kernels (inductor's CPU backend) are ``cpp_fused_<ops>_<n>``.

The wrapper modules come from :func:`lecture_code.compile.capture.capture_compiled_code`; every function here
takes a :class:`CompiledCode` (what a capture produced) or a plain list of :class:`Kernel`.
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

__all__ = [
    "KERNEL_KINDS",
    "CompiledCode",
    "Kernel",
    "find_kernels",
    "fused_ops",
    "graph_label",
    "library_calls",
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


# ---------------------------------------------------------------------------------------------------------
# Parsing the generated wrapper modules
# ---------------------------------------------------------------------------------------------------------
_KERNEL_DEF = re.compile(r"^(\w+) = async_compile\.(\w+)\(", re.M)
_TRIPLE = re.compile(r"'''(.*?)'''", re.S)
_RAW_TRITON = re.compile(r'R"TRITON\((.*?)\)TRITON"', re.S)  # cpp_wrapper embeds Triton sources like this
_JIT_DEF = re.compile(r"@triton\.jit\s*\ndef (\w+)\(")
_ATEN_COMMENT = re.compile(r"Original ATen: \[([^\]]*)\]")
# library calls: ``extern_kernels.addmm(...)``, and ATen fallbacks (ops inductor does not lower, e.g.
# ``buf6 = torch.ops.aten.searchsorted.Tensor(...)`` on a CPU) at the start of a wrapper statement
_LIBRARY_CALL = re.compile(
    r"extern_kernels\.(\w+)\(|^[ \t]*(?:\w+ = )?(?:torch\.ops\.)?aten\.(\w+)\.\w+\(", re.M
)
_CACHE_PATH = re.compile(r"(/[^\s'\"]*?)?/torchinductor_[^/\s'\"]+/")


def graph_label(module_text: str) -> str:
    """``forward``/``backward``/``inference`` from a wrapper module's ``# AOT ID`` line, ``""`` if none."""
    m = re.search(r"# AOT ID: \['?\d*_?(\w+?)'?\]", module_text)
    return m.group(1) if m else ""


def library_calls(module_text: str) -> list[str]:
    """Library calls in a wrapper module, in order: ``extern_kernels.*`` and ATen fallbacks (op names)."""
    return [extern or fallback for extern, fallback in _LIBRARY_CALL.findall(module_text)]


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
    """Find every kernel (Triton and C++) and every library call (``extern_kernels.*``, ATen fallbacks) in the
    wrapper modules."""
    kernels: list[Kernel] = []
    extern: list[str] = []
    for index, text in enumerate(files):
        graph = graph_label(text)
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
        extern.extend(library_calls(text))
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


def _kernels_of(code: CompiledCode | Sequence[Kernel]) -> list[Kernel]:
    """The kernels of a capture (anything with ``.kernels``) or of a sequence of kernels."""
    return list(getattr(code, "kernels", code))


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
    contains = (contains,) if isinstance(contains, str) else tuple(contains)
    source_contains = (source_contains,) if isinstance(source_contains, str) else tuple(source_contains)
    return [
        k
        for k in _kernels_of(code)
        if all(s in k.name for s in contains)
        and all(s in k.source for s in source_contains)
        and (graph is None or k.graph == graph)
        and (language is None or k.language == language)
    ]


def fused_ops(code: CompiledCode | Sequence[Kernel]) -> dict[str, tuple[str, ...]]:
    """``{kernel name: ATen ops it fuses}`` for every kernel, in launch-definition order."""
    return {k.name: k.fused_ops for k in _kernels_of(code)}


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
    if not isinstance(kernel, Kernel):  # a CompiledCode
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
