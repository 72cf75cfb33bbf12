"""Follow the buffers through inductor's ``call()``: what each launch and library call reads and writes.

A generated wrapper allocates buffers and hands them to kernels::

    buf33 = empty_strided_cuda((2048, 416), (416, 1), torch.float32)
    buf7 = reinterpret_tensor(buf33, (2048, 16), (416, 1), 0)  # alias: columns 0–15 of buf33
    triton_poi_fused_..._embedding_..._4.run(buf6, arg11_1, buf7, 32768, stream=stream0)
    extern_kernels.bmm(buf36, reinterpret_tensor(buf36, (2048, 16, 27), (432, 1, 16), 0), out=buf37)

:func:`parse_wrapper` reads those lines: every buffer name becomes a :class:`BufferView` of the allocation it
lives in (``buf7`` → 16 columns of ``buf33``'s 416), every launch a :class:`Launch` whose arguments are
matched to the kernel's parameters (``in_ptr*`` are read, ``out_ptr*`` written, ``in_out_ptr*`` both), every
``extern_kernels.*`` call a :class:`LibraryCall`. :func:`memory_lines` finds the ``tl.load``/``tl.store``
lines of one parameter in a kernel's source, so a claim about a buffer can point at the line that shows it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from lecture_code.compile.generated_code import Kernel

__all__ = ["BufferView", "LibraryCall", "Launch", "Wrapper", "memory_lines", "parse_wrapper"]


@dataclass(frozen=True)
class BufferView:
    """A name in ``call()`` and where its elements live: ``base`` allocation, shape, strides, offset."""

    name: str
    base: str
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    offset: int = 0

    @property
    def row_width(self) -> int:
        """Elements per row (first dimension) of this view: 432 for ``[B, 27, 16]``."""
        return math.prod(self.shape[1:]) if len(self.shape) > 1 else 1

    def describe(self) -> str:
        """``buf36 [2048, 27, 16]``."""
        dims = ", ".join(str(s) for s in self.shape)
        return f"{self.name} [{dims}]"


@dataclass(frozen=True)
class Launch:
    """One generated-kernel launch: the kernel and, per pointer parameter, the buffer it got."""

    kernel: Kernel
    args: dict[str, str]  # pointer parameter (in_ptr0 …) -> buffer name in call()
    line: str

    @property
    def reads(self) -> list[str]:
        return [p for p in self.args if p.startswith(("in_ptr", "in_out_ptr"))]

    @property
    def writes(self) -> list[str]:
        return [p for p in self.args if p.startswith(("out_ptr", "in_out_ptr"))]


@dataclass(frozen=True)
class LibraryCall:
    """``extern_kernels.<name>(...)``: the op and the buffers it reads (``out=`` is what it writes)."""

    name: str
    inputs: tuple[str, ...]
    out: str | None
    line: str


@dataclass
class Wrapper:
    """One parsed wrapper module: its buffer views, kernel launches and library calls, in order."""

    views: dict[str, BufferView] = field(default_factory=dict)
    launches: list[Launch] = field(default_factory=list)
    library_calls: list[LibraryCall] = field(default_factory=list)

    def view(self, name: str) -> BufferView | None:
        return self.views.get(name)

    def base_of(self, name: str) -> str:
        view = self.views.get(name)
        return view.base if view else name

    def columns(self, name: str) -> range:
        """Which columns of its base allocation's rows the view ``name`` covers (``range(16, 432)``)."""
        view, base = self.views[name], self.views[self.base_of(name)]
        start = view.offset % base.row_width if base.row_width else 0
        return range(start, start + view.row_width)


_INTS = r"\(([^()]*)\)"
_ALLOC = re.compile(rf"^\s*(\w+) = empty_strided_\w+\({_INTS}, {_INTS}")
_ASSERT = re.compile(rf"^\s*assert_size_stride\((\w+), {_INTS}, {_INTS}")
_REINTERPRET = re.compile(rf"reinterpret_tensor\((\w+), {_INTS}, {_INTS}, (\d+)\)")
_ALIAS = re.compile(rf"^\s*(\w+) = (reinterpret_tensor\(\w+, {_INTS}, {_INTS}, \d+\))")
_REUSE = re.compile(r"^\s*(\w+) = (\w+); del \w+\s*# reuse")
_LAUNCH = re.compile(r"^\s*(\w+)\.run\((.*)\)\s*$")
_EXTERN = re.compile(r"^\s*(?:\w+ = )?extern_kernels\.(\w+)\((.*)\)\s*$")
_PARAMS = re.compile(r"def \w+\(([^)]*)\)")


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(t) for t in text.replace(" ", "").split(",") if t)


def _split_args(text: str) -> list[str]:
    """Top-level comma-separated arguments of a call (parentheses nest)."""
    args, depth, current = [], 0, ""
    for ch in text:
        if ch == "," and depth == 0:
            args.append(current.strip())
            current = ""
            continue
        depth += ch in "([{"
        depth -= ch in ")]}"
        current += ch
    if current.strip():
        args.append(current.strip())
    return args


def _pointer_params(kernel: Kernel) -> list[str]:
    m = _PARAMS.search(kernel.body)
    params = [p.split(":")[0].strip() for p in m.group(1).split(",")] if m else []
    return params


def parse_wrapper(module_text: str, kernels: Iterable[Kernel]) -> Wrapper:
    """Buffers, launches and library calls of one wrapper module (``CompiledCode.files[i]``)."""
    by_name = {k.name: k for k in kernels}
    wrapper = Wrapper()
    views = wrapper.views

    def reinterpret(name: str, expr: str) -> BufferView | None:
        m = _REINTERPRET.search(expr)
        if not m:
            return None
        source, shape, stride, offset = m.group(1), _ints(m.group(2)), _ints(m.group(3)), int(m.group(4))
        return BufferView(name, wrapper.base_of(source), shape, stride, offset)

    def argument(expr: str, anonymous: str) -> str:
        """The buffer name an argument refers to (an inline ``reinterpret_tensor`` gets a view of its own)."""
        if re.fullmatch(r"\w+", expr):
            return expr
        view = reinterpret(anonymous, expr)
        if view is None:
            return expr
        views[anonymous] = view
        return anonymous

    for number, line in enumerate(module_text.splitlines()):
        if m := _ALLOC.match(line) or _ASSERT.match(line):
            name = m.group(1)
            views[name] = BufferView(name, name, _ints(m.group(2)), _ints(m.group(3)))
        elif m := _ALIAS.match(line):
            if view := reinterpret(m.group(1), m.group(2)):
                views[m.group(1)] = view
        elif m := _REUSE.match(line):
            if old := views.get(m.group(2)):
                views[m.group(1)] = BufferView(m.group(1), old.base, old.shape, old.stride, old.offset)
        elif (m := _LAUNCH.match(line)) and m.group(1) in by_name:
            kernel = by_name[m.group(1)]
            positional = [a for a in _split_args(m.group(2)) if not re.match(r"\w+=", a)]
            args = {}
            for i, (param, expr) in enumerate(zip(_pointer_params(kernel), positional, strict=False)):
                if "ptr" in param:
                    args[param] = argument(expr, f"<arg {i} of line {number + 1}>")
            wrapper.launches.append(Launch(kernel, args, line.strip()))
        elif m := _EXTERN.match(line):
            parts = _split_args(m.group(2))
            out = next((a.split("=", 1)[1] for a in parts if a.startswith("out=")), None)
            inputs = tuple(
                argument(a, f"<arg {i} of line {number + 1}>")
                for i, a in enumerate(parts)
                if not re.match(r"\w+=", a)
            )
            wrapper.library_calls.append(LibraryCall(m.group(1), inputs, out, line.strip()))
    return wrapper


def memory_lines(kernel: Kernel, param: str) -> list[str]:
    """The ``tl.load``/``tl.store`` lines of ``kernel`` that address ``param`` (``in_ptr2``), stripped."""
    rx = re.compile(rf"\btl\.(load|store)\(\s*{re.escape(param)}\b")
    return [line.strip() for line in kernel.body.splitlines() if rx.search(line)]
