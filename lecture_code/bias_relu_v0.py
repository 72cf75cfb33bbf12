"""Bias + ReLU v0: the kernel exactly as torch.compile's inductor wrote it, sizes baked in.

This is the *anti-pattern* version (shared/STYLE.md: "compiler output pasted in as the hand-written kernel"),
kept so the lecture can show why ``kernels/bias_relu.py`` (v1) exists. It is never retyped: every call to
:func:`capture_bias_relu_v0` compiles the reference ``relu(x + bias)`` (:func:`kernels.reference.bias_relu`)
at one shape, captures inductor's Triton (real Triton on a CPU too, via ``triton_on_cpu=True``), and returns
the fused kernel with the constants it hard-codes. For ``x`` of shape ``[96, 130]`` inductor writes::

    xnumel = 12480            # 96 · 130: the element count, a literal that shadows the xnumel argument
    x0 = (xindex % 130)       # the bias column: the row length, a literal

torch.compile itself is not wrong: its *guards* notice a new shape and compile a new kernel. The generated
text is correct only for the shape it was made for, so pasting it into a repo as "our kernel" is wrong.
:meth:`V0.run` shows this by launching the captured kernel as a plain ``@triton.jit`` function (no
recompilation, no guards) on any ``x``: at the captured shape it matches the reference; at another shape it
reads bias with the wrong period and leaves every element past ``xnumel`` unwritten (still NaN, as the
output is poisoned first), or, for a smaller ``x``, reads and writes out of bounds, so :meth:`V0.run`
refuses inputs with fewer elements than ``xnumel``.

``kernels/`` never imports ``lecture_code``, which is why v0 lives here and not beside v1.
"""

from __future__ import annotations

import importlib.util
import os
import re
import tempfile
from dataclasses import dataclass, field

import torch

from kernels.reference import bias_relu
from kernels.runtime import interpreting
from lecture_code.compile_kernels import Kernel
from lecture_code.inspect_compile import capture_compiled_code

__all__ = ["V0", "baked_constants", "capture_bias_relu_v0"]

# `xnumel = 12480`, `ynumel = ...`, `r0_numel = ...`: an element count assigned a literal inside the kernel.
_NUMEL = re.compile(r"^\s*(\w*numel) = (\d+)\s*$", re.M)
# `x0 = (xindex % 130)` or `x1 = xindex // 130`: an index split by a literal row length.
_INDEX = re.compile(r"^\s*(\w+) = \(?(\w+) (%|//) (\d+)\)?\s*$", re.M)

# The generated text calls inductor's helpers (``triton_helpers.maximum``). On a GPU the file imports them
# from inductor, as the generated module itself does. Under the interpreter they are defined afresh here, in
# the file the kernel runs from, so they are jitted in the same mode as the kernel (inductor's own module may
# have been jitted for the GPU path and cannot be called there).
_GPU_HEADER = """import triton
import triton.language as tl
from torch._inductor.runtime import triton_helpers


"""
_INTERPRETER_HEADER = """import triton
import triton.language as tl


@triton.jit
def _maximum(a, b):
    return tl.maximum(a, b)


@triton.jit
def _minimum(a, b):
    return tl.minimum(a, b)


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
        kernel: the captured :class:`~lecture_code.compile_kernels.Kernel` (``kernel.source`` is the text).
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
        # triton.jit reads its function's source from a file, so the captured text goes into one.
        if self._jit is None:
            path = os.path.join(tempfile.mkdtemp(prefix="bias_relu_v0_"), "v0_kernel.py")
            with open(path, "w") as f:
                f.write((_INTERPRETER_HEADER if interpreting() else _GPU_HEADER) + self.source)
            spec = importlib.util.spec_from_file_location("bias_relu_v0_kernel", path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            self._jit = getattr(module, self.kernel.name)
        return self._jit

    def run(self, x: torch.Tensor, bias: torch.Tensor, block: int = 1024) -> torch.Tensor:
        """Launch the captured kernel text on ``x`` of *any* shape, as if it were a hand-written kernel.

        The ``xnumel`` argument passed is ``x.numel()``, but the kernel overwrites it with its literal. The
        output starts as NaN, so elements the kernel never writes show up.
        """
        if x.numel() < self.xnumel:
            raise ValueError(
                f"x has {x.numel()} elements but the kernel hard-codes xnumel = {self.xnumel}: it would read "
                "and write past the end of x (out-of-bounds memory access), so it is not launched"
            )
        x, bias = x.contiguous(), bias.contiguous()
        out = torch.full_like(x, float("nan"))
        n = x.numel()
        self._load()[((n + block - 1) // block,)](x, bias, out, n, XBLOCK=block)
        return out


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
    torch._dynamo.reset()  # a fresh compile, so this exact shape is the one specialised on
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
