"""Bias + ReLU v0: the kernel exactly as torch.compile's inductor wrote it, sizes baked in.

This is the *anti-pattern* version (compiler output pasted in as if it were the hand-written kernel),
kept so the lecture can show why ``kernels/pointwise/bias_relu.py`` (v1) exists. It is never retyped: every
call to :func:`capture_bias_relu_v0` compiles the reference ``relu(x + bias)``
(:func:`kernels.reference.bias_relu`) at one shape, captures inductor's Triton (real Triton on a CPU too, via
``triton_on_cpu=True``), and returns the fused kernel with the constants it hard-codes. For ``x`` of shape
``[96, 130]`` inductor writes::

    xnumel = 12480            # 96 · 130: the element count, a literal that shadows the xnumel argument
    x0 = (xindex % 130)       # the bias column: the row length, a literal

torch.compile itself is not wrong: its *guards* notice a new shape and compile a new kernel. The generated
text is correct only for the shape it was made for, so pasting it into a repo as "our kernel" is wrong.
:meth:`V0.run` shows this by launching the captured kernel as a plain ``@triton.jit`` function (no
recompilation, no guards) on any ``x``, with a grid computed from ``x.numel()`` as a hand-written launcher
would. The kernel ignores that size for its own literal, so at another shape:

- the bias is read with the wrong period (``xindex % 130`` while the rows are longer or shorter);
- inductor drops the mask when the baked size is a multiple of the largest block it may launch the kernel
  with ("Masks are superfluous if numel is a multiple of BLOCK", ``torch/_inductor/codegen/triton.py``;
  ``TRITON_MAX_BLOCK["X"]`` is 4096 in torch 2.13): ``xmask = tl.full([XBLOCK], True, tl.int1)``, as at
  65536 × 4096. Then *every* program stores a full block, and the last one reads and writes past the end of
  ``x`` and ``out`` when ``x.numel()`` is not a multiple of the block. Otherwise the mask is
  ``xindex < xnumel`` with the *baked* count: a larger ``x`` keeps a tail that is never written; a smaller one
  is read and written past its end, up to the end of the last block launched or the baked count, whichever
  comes first.

Out-of-bounds accesses are undefined behaviour: on a GPU they may hit another tensor or nothing visible, and
in the interpreter they read host memory. So :meth:`V0.run` never lets them leave an allocation it owns:
``x``, ``bias`` and ``out`` are copied into buffers with a *guard* region after their end, filled with
sentinels (``x``: :data:`X_GUARD`, ``bias``: :data:`BIAS_GUARD`, ``out``: NaN), the kernel runs on the
inner views, and :class:`V0Launch` reports what it touched: outputs computed from a guard (reads past the
end of ``x`` or ``bias``), guard elements of ``out`` overwritten (writes past its end), outputs never written.

``kernels/`` never imports ``lecture_code``, which is why v0 lives here and not beside v1.
"""

from __future__ import annotations

import linecache
import re
import types
import weakref
from dataclasses import dataclass, field

import torch

from kernels.reference import bias_relu
from kernels.runtime import interpreting
from lecture_code.compile import capture_compiled_code
from lecture_code.compile.generated_code import Kernel
from lecture_code.internals import INDUCTOR_KERNEL_HEADER

__all__ = ["BIAS_GUARD", "V0", "V0Launch", "X_GUARD", "baked_constants", "capture_bias_relu_v0"]

# `xnumel = 12480`, `ynumel = ...`, `r0_numel = ...`: an element count assigned a literal inside the kernel.
_NUMEL = re.compile(r"^\s*(\w*numel) = (\d+)\s*$", re.M)
# `x0 = (xindex % 130)` or `x1 = xindex // 130`: an index split by a literal row length.
_INDEX = re.compile(r"^\s*(\w+) = \(?(\w+) (%|//) (\d+)\)?\s*$", re.M)

# The generated text calls inductor's helpers (``triton_helpers.maximum``). On a GPU the file imports them
# from inductor, as the generated module itself does. Under the interpreter they are defined afresh here, in
# the file the kernel runs from, so they are jitted in the same mode as the kernel (inductor's own module may
# have been jitted for the GPU path and cannot be called there).
_GPU_HEADER = INDUCTOR_KERNEL_HEADER + "\n\n"
_INTERPRETER_HEADER = """import triton
import triton.language as tl


@triton.jit
def _maximum(a, b):  # as inductor's: NaN wins (tl.maximum would turn relu(NaN) into 0)
    return tl.where((a > b) | (a != a), a, b)


@triton.jit
def _minimum(a, b):
    return tl.where((a < b) | (a != a), a, b)


class triton_helpers:
    maximum = _maximum
    minimum = _minimum


"""


def baked_constants(source: str) -> dict[str, str]:
    """The literals a generated kernel hard-codes: ``{"xnumel": "12480", "x0": "xindex % 130"}``."""
    found = {name: value for name, value in _NUMEL.findall(source)}
    found.update({name: f"{var} {op} {num}" for name, var, op, num in _INDEX.findall(source)})
    return found


@dataclass
class V0:
    """One capture of inductor's fused bias + ReLU kernel.

    Attributes:
        shape: the ``x`` shape it was compiled for (``[rows, cols]``).
        kernel: the captured :class:`~lecture_code.compile.Kernel` (``kernel.source`` is the text).
        constants: what :func:`baked_constants` found in it.
        result: what the compiled function returned at ``shape`` (on the captured inputs).
        expected: the reference on the same inputs.
    """

    shape: tuple[int, int]
    kernel: Kernel
    constants: dict[str, str]
    result: torch.Tensor
    expected: torch.Tensor
    _jit: object = field(default=None, repr=False)

    @property
    def source(self) -> str:
        """The kernel from ``@triton.jit`` on (the long heuristics decorator left out)."""
        return self.kernel.body

    @property
    def xnumel(self) -> int:
        """The element count baked into the kernel."""
        return int(self.constants["xnumel"])

    def _load(self):
        # triton.jit reads its function's source through inspect, which finds it in linecache: the captured
        # text is registered there under a name of its own (no file, so nothing is left behind on disk when a
        # notebook kernel is killed) and dropped from linecache with this object.
        if self._jit is None:
            source = (_INTERPRETER_HEADER if interpreting() else _GPU_HEADER) + self.source
            filename = f"<bias_relu_v0 {id(self):x}>"
            linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
            weakref.finalize(self, linecache.cache.pop, filename, None)
            module = types.ModuleType("bias_relu_v0_kernel")
            module.__file__ = filename
            exec(compile(source, filename, "exec"), module.__dict__)
            self._jit = getattr(module, self.kernel.name)
        return self._jit

    @property
    def mask_line(self) -> str:
        """The kernel's ``xmask = ...`` line: ``xindex < xnumel`` (masked) or ``tl.full(..., True, ...)``."""
        lines = (line.strip() for line in self.source.splitlines())
        return next((line for line in lines if line.startswith("xmask")), "")

    @property
    def period(self) -> int | None:
        """The row length baked into the bias index (``xindex % 130`` → 130), if there is one."""
        found = [int(v.split("%")[1]) for v in self.constants.values() if "%" in v]
        return found[0] if found else None

    def run(self, x: torch.Tensor, bias: torch.Tensor, block: int = 1024) -> V0Launch:
        """Launch the captured kernel text on ``x`` of *any* shape, as if it were a hand-written kernel.

        The grid is ``ceil(x.numel() / block)`` programs and the ``xnumel`` argument is ``x.numel()``, but the
        kernel overwrites it with its literal. Every buffer has a guard region of at least ``block`` elements
        (``bias``: at least the baked period) after its end, so no access the kernel can make leaves memory
        allocated here; see the module docstring.
        """
        if x.dtype != torch.float32 or bias.dtype != torch.float32:
            raise TypeError(f"v0 was captured for float32; got x {x.dtype}, bias {bias.dtype}")
        n, cols = x.numel(), bias.numel()
        guard_bias = max(block, self.period or 0)
        x_buf = torch.full((n + block,), X_GUARD, device=x.device)
        x_buf[:n] = x.reshape(-1)
        bias_buf = torch.full((cols + guard_bias,), BIAS_GUARD, device=x.device)
        bias_buf[:cols] = bias
        out_buf = torch.full((n + block,), float("nan"), device=x.device)
        programs = (n + block - 1) // block
        self._load()[(programs,)](x_buf[:n], bias_buf[:cols], out_buf[:n], n, XBLOCK=block)
        # An output computed from a guard is at least half the sentinel: data here is N(0, 1)-sized.
        from_bias = out_buf > BIAS_GUARD / 2
        from_x = (out_buf - torch.where(from_bias, BIAS_GUARD, 0.0)) > X_GUARD / 2
        out = out_buf[:n].view(x.shape)
        return V0Launch(
            out=out,
            numel=n,
            programs=programs,
            block=block,
            wrong=int((~torch.isclose(out, bias_relu(x, bias))).sum()),
            unwritten=int(out.isnan().sum()),
            written_past_out=int((~out_buf[n:].isnan()).sum()),
            read_past_x=int(from_x.sum()),
            read_past_bias=int(from_bias.sum()),
        )


X_GUARD = 1.0e4  # the guard after x: an output near it was computed from a read past the end of x
BIAS_GUARD = 1.0e6  # the guard after bias: likewise for bias (far from X_GUARD, so the two are told apart)


@dataclass
class V0Launch:
    """What one guarded launch of v0 did (counts in elements).

    Attributes:
        out: the output, ``x``'s shape (NaN where the kernel never stored).
        numel, programs, block: ``x.numel()`` and the launch grid.
        wrong: outputs that differ from the reference (never-written ones included).
        unwritten: outputs still NaN.
        written_past_out: guard elements after ``out`` that the kernel overwrote.
        read_past_x, read_past_bias: outputs (inside or past ``out``) computed from a guard element.
    """

    out: torch.Tensor
    numel: int
    programs: int
    block: int
    wrong: int
    unwritten: int
    written_past_out: int
    read_past_x: int
    read_past_bias: int

    @property
    def out_of_bounds(self) -> bool:
        return bool(self.written_past_out or self.read_past_x or self.read_past_bias)

    def describe(self) -> str:
        """One line of what happened, built from the counts."""
        line = f"x {tuple(self.out.shape)}: {self.wrong:,} of {self.numel:,} outputs wrong, "
        line += f"{self.unwritten:,} never written; "
        if not self.out_of_bounds:
            return line + "nothing read or written past the end of x, bias or out"
        return line + (
            f"past the end: read x for {self.read_past_x:,} outputs and bias for {self.read_past_bias:,}, "
            f"wrote {self.written_past_out:,} elements of out ({self.programs:,} programs x {self.block} = "
            f"{self.programs * self.block:,} elements launched)"
        )


def capture_bias_relu_v0(rows: int, cols: int, device: torch.device | str | None = None, seed: int = 0) -> V0:
    """Compile ``relu(x + bias)`` for ``x [rows, cols]``; return inductor's fused kernel (see module doc).

    ``device`` defaults to CUDA when present, else the CPU (where inductor is asked for Triton, not C++).
    """
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(device)
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, cols, generator=gen).to(device)
    bias = torch.randn(cols, generator=gen).to(device)
    torch.compiler.reset()  # a fresh compile, so this exact shape is the one specialised on
    code = capture_compiled_code(bias_relu, x, bias, triton_on_cpu=device.type == "cpu")
    fused = code.find(("relu",), language="triton")
    if not fused:
        raise RuntimeError(f"no fused Triton relu kernel was captured:\n{code.summary()}")
    kernel = fused[0]
    return V0(
        shape=(rows, cols),
        kernel=kernel,
        constants=baked_constants(kernel.source),
        result=code.result,
        expected=bias_relu(x, bias),
    )
