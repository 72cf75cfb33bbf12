"""A ``libdevice`` that Triton's interpreter can run: the math functions inductor's kernels call, over ``tl``.

Generated Triton kernels call ``libdevice.floor``, ``libdevice.pow``, ``libdevice.tanh`` … (imported from
``torch._inductor.runtime.triton_helpers``). On a GPU these are calls into NVIDIA's bitcode library, which
the interpreter cannot run. :data:`LIBDEVICE_SHIM` implements the common ones as plain Python over ``tl``
operations, which the interpreter runs like the kernel itself; :func:`libdevice_shim` puts it where the
generated kernels look for ``libdevice`` while a block runs. An unsupported function raises a clear error.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from lecture_code.internals import LIBDEVICE_HOMES  # where generated kernels import ``libdevice`` from

__all__ = ["LIBDEVICE_SHIM", "libdevice_shim"]

_LOG10_2 = math.log10(2.0)


def _tl():
    import triton.language as tl

    return tl


def _trunc(x):
    tl = _tl()
    return tl.where(x < 0, tl.math.ceil(x), tl.math.floor(x))


def _nearbyint(x):  # round half to even, like rint
    tl = _tl()
    r = tl.math.floor(x + 0.5)
    tie_to_odd = ((r - x) == 0.5) & ((r - 2.0 * tl.math.floor(r * 0.5)) != 0.0)
    return tl.where(tie_to_odd, r - 1.0, r)


def _pow(a, b):
    tl = _tl()
    magnitude = tl.math.exp2(b * tl.math.log2(tl.abs(a)))
    odd_integer = (_trunc(b) == b) & ((b - 2.0 * tl.math.floor(b * 0.5)) != 0.0)
    return tl.where((a < 0) & odd_integer, -magnitude, magnitude)


def _tanh(x):
    tl = _tl()
    return 2.0 * tl.sigmoid(2.0 * x) - 1.0


def _log1p(x):  # log(u) corrected by the rounding error of u = 1 + x
    tl = _tl()
    u = 1.0 + x
    return tl.where(u == 1.0, x, tl.math.log(u) - ((u - 1.0) - x) / u)


def _expm1(x):
    tl = _tl()
    u = tl.math.exp(x)
    return tl.where(u == 1.0, x, tl.where(tl.abs(x) < 1.0, (u - 1.0) * x / tl.math.log(u), u - 1.0))


def _copysign(a, b):
    tl = _tl()
    return tl.where(b < 0, -tl.abs(a), tl.abs(a))


def _shim_table() -> dict[str, Callable[..., Any]]:
    # lambdas, not ``m.floor`` itself: look the builtin up at call time, when the interpreter has patched it
    tl = _tl()
    m = tl.math
    return {
        "floor": lambda x: m.floor(x),
        "ceil": lambda x: m.ceil(x),
        "trunc": _trunc,
        "nearbyint": _nearbyint,
        "rint": _nearbyint,
        "exp": lambda x: m.exp(x),
        "exp2": lambda x: m.exp2(x),
        "expm1": _expm1,
        "log": lambda x: m.log(x),
        "log2": lambda x: m.log2(x),
        "log10": lambda x: m.log2(x) * _LOG10_2,
        "log1p": _log1p,
        "sqrt": lambda x: m.sqrt(x),
        "rsqrt": lambda x: m.rsqrt(x),
        "sin": lambda x: m.sin(x),
        "cos": lambda x: m.cos(x),
        "tan": lambda x: m.sin(x) / m.cos(x),
        "tanh": _tanh,
        "fast_tanhf": _tanh,
        "sinh": lambda x: 0.5 * (m.exp(x) - m.exp(-x)),
        "cosh": lambda x: 0.5 * (m.exp(x) + m.exp(-x)),
        "erf": lambda x: m.erf(x),
        "erfc": lambda x: 1.0 - m.erf(x),
        "pow": _pow,
        "fma": lambda a, b, c: m.fma(a, b, c),
        "hypot": lambda a, b: m.sqrt(a * a + b * b),
        "fmod": lambda a, b: a - _trunc(a / b) * b,
        "copysign": _copysign,
        "signbit": lambda x: x < 0,
        "isnan": lambda x: x != x,
        "isinf": lambda x: tl.abs(x) == float("inf"),
        "mul_rn": lambda a, b: a * b,
    }


class _LibdeviceShim:
    """Stands in for ``libdevice`` in generated kernels while they run under the interpreter."""

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if name.startswith("__"):
            raise AttributeError(name)
        table = _shim_table()
        if name not in table:
            raise NotImplementedError(
                f"libdevice.{name} has no CPU-interpreter shim (lecture_code.triton_cpu covers "
                f"{', '.join(sorted(table))}); read this kernel with the C++ backend or on a GPU"
            )
        return table[name]

    def __repr__(self) -> str:
        return "<libdevice shim for the Triton interpreter (lecture_code.triton_cpu.inductor_on_cpu)>"


LIBDEVICE_SHIM = _LibdeviceShim()


@contextmanager
def libdevice_shim() -> Iterator[None]:
    """Inside the block, ``triton_helpers.libdevice`` (and ``triton_compat``'s) is :data:`LIBDEVICE_SHIM`."""
    patched: list[tuple[Any, Any]] = []
    for home in LIBDEVICE_HOMES:
        try:
            module = importlib.import_module(home)
        except ImportError:
            continue
        if hasattr(module, "libdevice"):
            patched.append((module, module.libdevice))
            module.libdevice = LIBDEVICE_SHIM
    if not patched:
        raise RuntimeError(f"found no libdevice to shim in {', '.join(LIBDEVICE_HOMES)}")
    try:
        yield
    finally:
        for module, original in patched:
            module.libdevice = original
