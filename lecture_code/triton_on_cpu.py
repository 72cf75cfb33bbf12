"""Make torch.compile (inductor) emit real Triton kernels on a machine without a GPU.

On a CPU, inductor normally writes C++ (``cpp_fused_relu_0``); on a GPU it writes Triton
(``triton_poi_fused_relu_0``). The lecture wants learners to *read the Triton*, so on a CPU we ask inductor
for Triton anyway and run it through Triton's interpreter. Five pieces, all undone on exit:

1. ``torch._inductor.config.cpu_backend = "triton"`` (and ``compile_threads = 1``, so nothing is compiled
   in a worker process that does not see steps 2–5).
2. ``TRITON_INTERPRET=1``: ``@triton.jit`` in the generated modules gives interpreted functions that run
   on CPU tensors with numpy.
3. A stub Triton driver (:func:`make_stub_driver`): Triton insists on exactly one active driver and finds none
   on a CPU ("0 active drivers"). Inductor asks the driver for a target to hash and tune for; the stub says
   ``GPUTarget("cuda", 90, 32)`` (an H100), so the code you read is the code a GPU would get.
4. A ``libdevice`` shim (:data:`LIBDEVICE_SHIM`): generated kernels call ``libdevice.floor``,
   ``libdevice.pow`` …, which the interpreter cannot run (they are calls into NVIDIA's bitcode library).
   The shim implements the common ones with ``tl`` operations; an unsupported one raises a clear error.
5. Interpretable helpers: ``@triton.jit`` helpers defined before ``TRITON_INTERPRET=1`` was set
   (``tl.sigmoid``, ``triton_helpers.maximum``) are swapped for interpreted twins while the block runs.

On exit ``triton.language`` is also put back as it was: the interpreter leaves some of its numpy patches
behind after a kernel calls a helper, and they would break compiling for a GPU later (``lecture_code.ptx``).

All of it leans on internals that move between versions, so every step is guarded:
:func:`run_with_triton_on_cpu` runs a function under the context manager and, if anything fails, runs it
again with the C++ backend and records why (:class:`TritonOnCpuStatus.reason`) for the caller to print.

On a GPU machine none of this is needed: put the model and inputs on ``cuda`` and inductor writes Triton.
"""

from __future__ import annotations

import functools
import math
import os
import warnings
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any

import torch

__all__ = [
    "LIBDEVICE_SHIM",
    "TritonOnCpuStatus",
    "inductor_triton_on_cpu",
    "make_stub_driver",
    "run_with_triton_on_cpu",
    "triton_on_cpu_available",
]

TARGET_ARCH = 90  # the stub driver reports an sm_90 (H100) target
_MISSING = object()
_LOG10_2 = math.log10(2.0)


@dataclass
class TritonOnCpuStatus:
    """What the context manager managed to do. ``backend`` is ``"triton"`` or ``"cpp"``.

    ``reason`` is empty while Triton is active and says why when it fell back to C++.
    """

    backend: str = "triton"
    reason: str = ""

    @property
    def active(self) -> bool:
        return self.backend == "triton"

    def fall_back(self, reason: str) -> None:
        self.backend = "cpp"
        self.reason = reason

    def __str__(self) -> str:
        if self.active:
            return "inductor emits Triton on the CPU (interpreter + stub driver for an sm_90 target)"
        return f"inductor emits C++ on the CPU: {self.reason}"


# ---------------------------------------------------------------------------------------------------------
# 3. The stub driver
# ---------------------------------------------------------------------------------------------------------
def make_stub_driver(arch: int = TARGET_ARCH) -> Any:
    """A Triton ``DriverBase`` that is always active and reports ``GPUTarget("cuda", arch, 32)``.

    Built at call time from whatever abstract methods the installed Triton declares, so a method added in
    a later Triton gets a stub that raises instead of a ``TypeError`` at construction.
    """
    from triton.backends.compiler import GPUTarget
    from triton.backends.driver import DriverBase

    def _not_on_cpu(name: str) -> Callable[..., Any]:
        def method(self, *args, **kwargs):
            raise RuntimeError(f"the CPU stub Triton driver cannot {name}: there is no GPU on this machine")

        return method

    namespace: dict[str, Any] = {name: _not_on_cpu(name) for name in DriverBase.__abstractmethods__}
    namespace.update(
        is_active=classmethod(lambda cls: True),
        get_current_target=lambda self: GPUTarget("cuda", arch, 32),
        get_active_torch_device=lambda self: torch.device("cpu"),
        map_python_to_cpp_type=lambda self, ty: "void*" if ty.startswith("*") else ty,
        get_current_device=lambda self: 0,
        set_current_device=lambda self, device: None,
        get_current_stream=lambda self, device=None: 0,
        get_device_interface=lambda self: torch.cpu,
        __repr__=lambda self: f"CpuStubDriver(cuda sm_{arch}, for reading generated code)",
    )
    cls = type("CpuStubDriver", (DriverBase,), namespace)
    return cls()


# ---------------------------------------------------------------------------------------------------------
# 4. The libdevice shim: plain Python over ``tl``; the interpreter runs it like the kernel itself.
# ---------------------------------------------------------------------------------------------------------
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
                f"libdevice.{name} has no CPU-interpreter shim (lecture_code.triton_on_cpu covers "
                f"{', '.join(sorted(table))}); read this kernel with the C++ backend or on a GPU"
            )
        return table[name]

    def __repr__(self) -> str:
        return "<libdevice shim for the Triton interpreter (lecture_code.triton_on_cpu)>"


LIBDEVICE_SHIM = _LibdeviceShim()

# Where generated kernels import ``libdevice`` from (``from ...triton_helpers import libdevice``).
_LIBDEVICE_HOMES = ("torch._inductor.runtime.triton_helpers", "torch._inductor.runtime.triton_compat")


# ---------------------------------------------------------------------------------------------------------
# The context manager
# ---------------------------------------------------------------------------------------------------------
def _clear_torch_triton_caches() -> None:
    """``torch.utils._triton`` caches the backend it derived from the active driver: forget it."""
    try:
        import torch.utils._triton as tt
    except ImportError:
        return
    for name in ("triton_backend", "triton_hash_with_backend"):
        cached = getattr(tt, name, None)
        if hasattr(cached, "cache_clear"):
            cached.cache_clear()


@contextmanager
def _env(name: str, value: str) -> Iterator[None]:
    old = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old


@contextmanager
def _stub_driver() -> Iterator[None]:
    import triton

    config = triton.runtime.driver
    missing = object()
    previous = getattr(config, "_active", missing)
    config.set_active(make_stub_driver())
    try:
        yield
    finally:
        if previous is missing:
            try:
                config.reset_active()
            except Exception:  # noqa: BLE001  (no real driver on a CPU: leave nothing active)
                pass
        else:
            config._active = previous
        _clear_torch_triton_caches()


@contextmanager
def _libdevice_shim() -> Iterator[None]:
    import importlib

    patched: list[tuple[Any, Any]] = []
    for home in _LIBDEVICE_HOMES:
        try:
            module = importlib.import_module(home)
        except ImportError:
            continue
        if hasattr(module, "libdevice"):
            patched.append((module, module.libdevice))
            module.libdevice = LIBDEVICE_SHIM
    if not patched:
        raise RuntimeError(f"found no libdevice to shim in {', '.join(_LIBDEVICE_HOMES)}")
    try:
        yield
    finally:
        for module, original in patched:
            module.libdevice = original


# Modules whose ``@triton.jit`` helpers generated kernels call (``tl.sigmoid``, ``triton_helpers.maximum``).
_HELPER_MODULE_PREFIXES = ("triton.language", "torch._inductor.runtime.triton_helpers")


@contextmanager
def _interpretable_helpers() -> Iterator[int]:
    """Make ``@triton.jit`` helpers defined *before* ``TRITON_INTERPRET=1`` callable by the interpreter.

    ``@triton.jit`` decides at decoration time: with the interpreter off it returns a ``JITFunction``, which
    an interpreted kernel cannot call ("Cannot call @triton.jit'd outside of the scope of a kernel"). That
    happens whenever triton was imported before the environment variable was set (always on a GPU machine).
    Swap each such helper, in every module that holds it, for an ``InterpretedFunction`` of the same Python
    function; put the originals back on exit. Yields how many helpers were swapped.
    """
    import sys

    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    replacements: dict[int, Any] = {}
    swapped: list[tuple[Any, str, Any]] = []
    for name, module in list(sys.modules.items()):
        if module is None or not name.startswith(_HELPER_MODULE_PREFIXES):
            continue
        for attr, value in list(vars(module).items()):
            if isinstance(value, JITFunction):
                if id(value) not in replacements:
                    replacements[id(value)] = InterpretedFunction(value.fn)
                swapped.append((module, attr, value))
                setattr(module, attr, replacements[id(value)])
    try:
        yield len(replacements)
    finally:
        for module, attr, value in reversed(swapped):
            setattr(module, attr, value)


def _language_objects() -> list[Any]:
    """The modules and classes Triton's interpreter patches while a kernel runs."""
    import triton.language as tl

    objects: list[Any] = [tl, tl.core, tl.math, getattr(tl, "standard", tl)]
    objects += [c for c in vars(tl.core).values() if isinstance(c, type) and c.__module__ == tl.core.__name__]
    return list({id(o): o for o in objects}.values())


@contextmanager
def _restore_triton_language() -> Iterator[None]:
    """Put ``triton.language`` back exactly as it was when the block began.

    The interpreter swaps ``tl``'s builtins for numpy versions while a kernel runs and undoes it afterwards,
    but a ``@triton.jit`` *helper* called from an interpreted kernel (``triton_helpers.maximum``, every
    kernel inductor writes) patches the modules in its own globals (``triton.language.core``) and never
    undoes it. Compiling for a GPU later in the same process then fails deep inside Triton
    (``lecture_code.ptx`` needs the real builtins), so snapshot and restore.
    """
    objects = _language_objects()
    snapshot = [(obj, dict(vars(obj))) for obj in objects]
    try:
        yield
    finally:
        for obj, before in snapshot:
            now = dict(vars(obj))
            for name, value in before.items():
                if now.get(name, _MISSING) is not value:
                    try:
                        setattr(obj, name, value)
                    except (AttributeError, TypeError):
                        pass
            for name in now.keys() - before.keys():
                try:
                    delattr(obj, name)
                except (AttributeError, TypeError):
                    pass


@contextmanager
def inductor_triton_on_cpu() -> Iterator[TritonOnCpuStatus]:
    """Inside this block, torch.compile of CPU tensors emits (and runs) Triton kernels. Restores all on exit.

    Yields a :class:`TritonOnCpuStatus`. If the installed torch/triton refuse the setup, the block still runs
    with inductor's C++ backend, ``status.backend == "cpp"`` and ``status.reason`` says why. Errors raised
    by the body itself propagate (after restoring): use :func:`run_with_triton_on_cpu` to fall back on those.
    Call compiled functions inside the block: their kernels need the interpreter and the stub driver.

    Example::

        with inductor_triton_on_cpu() as status:
            out, code = run_and_get_code(torch.compile(model), x)
        print(status)
    """
    status = TritonOnCpuStatus()
    with ExitStack() as stack:
        try:
            import triton  # noqa: F401
            from torch._inductor import config as inductor_config

            if not hasattr(inductor_config, "cpu_backend"):
                raise RuntimeError(f"torch {torch.__version__} has no torch._inductor.config.cpu_backend")
            stack.enter_context(inductor_config.patch(cpu_backend="triton", compile_threads=1))
            stack.enter_context(_env("TRITON_INTERPRET", "1"))
            if not torch.cuda.is_available():  # a GPU machine keeps its real driver
                stack.enter_context(_stub_driver())
            stack.enter_context(_libdevice_shim())
            stack.enter_context(_restore_triton_language())
            stack.enter_context(_interpretable_helpers())
            stack.enter_context(warnings.catch_warnings())
            # inductor's generated modules look for a "cpu" Triton backend and warn that kernels will not be
            # executable without one; under the interpreter they are, so the warning only misleads here
            warnings.filterwarnings("ignore", message="Could not find an active CPU backend")
            _clear_torch_triton_caches()
        except Exception as exc:  # noqa: BLE001  (any refusal → C++ with the reason)
            stack.close()
            status.fall_back(f"setup refused on torch {torch.__version__}: {type(exc).__name__}: {exc}")
        yield status


def _first_line(exc: BaseException, limit: int = 300) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _dynamo_graph_break_errors() -> tuple[type[BaseException], ...]:
    try:
        from torch._dynamo import exc
    except ImportError:
        return ()
    return tuple(e for e in (getattr(exc, "Unsupported", None), getattr(exc, "UserError", None)) if e)


def run_with_triton_on_cpu(fn: Callable[[], Any]) -> tuple[Any, TritonOnCpuStatus]:
    """Run ``fn()`` under :func:`inductor_triton_on_cpu`; on any failure run it again with C++.

    ``fn`` should compile from scratch (``run_and_get_code`` resets dynamo itself), so the retry really
    compiles for the C++ backend. Returns ``(fn's result, status)``.
    """
    graph_breaks = _dynamo_graph_break_errors()
    with inductor_triton_on_cpu() as status:
        if status.active:
            try:
                return fn(), status
            except graph_breaks:
                raise  # dynamo refused the function itself: not about Triton, C++ would fail the same way
            except Exception as exc:  # noqa: BLE001
                status.fall_back(
                    f"compiling or running the Triton kernels failed on torch {torch.__version__}: "
                    f"{type(exc).__name__}: {_first_line(exc)}"
                )
    torch._dynamo.reset()
    return fn(), status


@functools.cache
def triton_on_cpu_available() -> tuple[bool, str]:
    """Probe once per process: compile ``relu(x * 2 + 1)`` for CPU tensors with Triton and check the result.

    Returns ``(True, description)`` or ``(False, reason)``. Takes a few seconds the first time.
    """
    try:
        from torch._inductor.utils import run_and_get_code
    except ImportError as exc:
        return False, f"torch {torch.__version__} has no torch._inductor.utils.run_and_get_code: {exc}"

    def probe(x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x * 2.0 + 1.0)

    x = torch.linspace(-2.0, 2.0, 37)
    (out, code), status = run_with_triton_on_cpu(lambda: run_and_get_code(torch.compile(probe), x))
    if not status.active:
        return False, status.reason
    if not any("@triton.jit" in c for c in code):
        return False, "inductor compiled the probe but wrote no @triton.jit kernel"
    if not torch.allclose(out, probe(x)):
        return False, "the Triton kernels ran under the interpreter but gave a wrong result"
    return True, str(status)
