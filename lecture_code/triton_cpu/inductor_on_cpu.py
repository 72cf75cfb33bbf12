"""Make torch.compile (inductor) emit real Triton kernels on a machine without a GPU.

On a CPU, inductor normally writes C++ (``cpp_fused_relu_0``); on a GPU it writes Triton
(``triton_poi_fused_relu_0``). The lecture wants learners to *read the Triton*, so on a CPU we ask inductor
for Triton anyway and run it through Triton's interpreter. Five pieces, all undone on exit:

1. ``torch._inductor.config.cpu_backend = "triton"`` (and ``compile_threads = 1``, so nothing is compiled
   in a worker process that does not see steps 2–5).
2. ``TRITON_INTERPRET=1``: ``@triton.jit`` in the generated modules gives interpreted functions that run
   on CPU tensors with numpy.
3. A stub Triton driver (:func:`make_stub_driver`, in :mod:`lecture_code.triton_cpu.stub_driver`): Triton
   insists on exactly one active driver and finds none on a CPU ("0 active drivers"). Inductor asks the
   driver for a target to hash and tune for; the stub says ``GPUTarget("cuda", 90, 32)`` (an H100), so the
   code you read is the code a GPU would get.
4. A ``libdevice`` shim (:data:`LIBDEVICE_SHIM`, in :mod:`lecture_code.triton_cpu.libdevice_shim`): generated
   kernels call ``libdevice.floor``, ``libdevice.pow`` …, which the interpreter cannot run (they are calls
   into NVIDIA's bitcode library). The shim implements the common ones with ``tl`` operations; an
   unsupported one raises a clear error.
5. Interpretable helpers: ``@triton.jit`` helpers defined before ``TRITON_INTERPRET=1`` was set
   (``tl.sigmoid``, ``triton_helpers.maximum``) are swapped for interpreted twins while the block runs
   (:mod:`lecture_code.triton_cpu.interpreter_patches`).

On exit ``triton.language`` is also put back as it was: the interpreter leaves some of its numpy patches
behind after a kernel calls a helper, and they would break compiling for a GPU later (``lecture_code.ptx``).

All of it leans on internals that move between versions (each reached through :mod:`lecture_code.internals`),
so every step is guarded:
:func:`run_with_triton_on_cpu` runs a function under the context manager. On a (torch, triton) pair listed in
:data:`lecture_code.internals.KNOWN_TO_WORK` (the pinned CPU stack among them) a failure raises
:class:`TritonOnCpuError`: a regression there must fail CI, not quietly turn notebook 03's Triton into C++.
On any other pair it runs the function again with the C++ backend and records why
(:class:`TritonOnCpuStatus.reason`) for the caller to print.

On a GPU machine none of this is needed: put the model and inputs on ``cuda`` and inductor writes Triton.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any

import torch

from lecture_code.internals import (
    active_triton_driver,
    clear_torch_triton_caches,
    describe_versions,
    dynamo_graph_break_errors,
    inductor_config,
    run_and_get_code,
    triton_on_cpu_expected,
)
from lecture_code.triton_cpu.interpreter_patches import (
    interpretable_helpers,
    restore_triton_language,
    set_env,
)
from lecture_code.triton_cpu.libdevice_shim import LIBDEVICE_SHIM, libdevice_shim
from lecture_code.triton_cpu.stub_driver import TARGET_ARCH as TARGET_ARCH
from lecture_code.triton_cpu.stub_driver import make_stub_driver

__all__ = [
    "TritonOnCpuError",
    "LIBDEVICE_SHIM",
    "TritonOnCpuStatus",
    "inductor_triton_on_cpu",
    "make_stub_driver",
    "run_with_triton_on_cpu",
    "triton_on_cpu_available",
]


class TritonOnCpuError(RuntimeError):
    """Triton on the CPU failed on a torch/Triton pair where it is known to work."""


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
# The context manager
# ---------------------------------------------------------------------------------------------------------
@contextmanager
def _stub_driver() -> Iterator[None]:
    """Make :func:`make_stub_driver`'s driver Triton's active one inside the block (step 3)."""
    try:
        with active_triton_driver(make_stub_driver()):
            yield
    finally:
        clear_torch_triton_caches()  # torch cached the backend it derived from the stub: forget it


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

            config = inductor_config()
            if not hasattr(config, "cpu_backend"):
                raise RuntimeError(f"torch {torch.__version__} has no torch._inductor.config.cpu_backend")
            stack.enter_context(config.patch(cpu_backend="triton", compile_threads=1))
            stack.enter_context(set_env("TRITON_INTERPRET", "1"))
            if not torch.cuda.is_available():  # a GPU machine keeps its real driver
                stack.enter_context(_stub_driver())
            stack.enter_context(libdevice_shim())
            stack.enter_context(restore_triton_language())
            stack.enter_context(interpretable_helpers())
            stack.enter_context(warnings.catch_warnings())
            # inductor's generated modules look for a "cpu" Triton backend and warn that kernels will not be
            # executable without one; under the interpreter they are, so the warning only misleads here
            warnings.filterwarnings("ignore", message="Could not find an active CPU backend")
            clear_torch_triton_caches()
        except Exception as exc:  # noqa: BLE001  (any refusal → C++ with the reason)
            stack.close()
            status.fall_back(f"setup refused on torch {torch.__version__}: {type(exc).__name__}: {exc}")
        yield status


def _first_line(exc: BaseException, limit: int = 300) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def run_with_triton_on_cpu(fn: Callable[[], Any]) -> tuple[Any, TritonOnCpuStatus]:
    """Run ``fn()`` under :func:`inductor_triton_on_cpu`; on any failure run it again with C++.

    ``fn`` should compile from scratch (``run_and_get_code`` resets dynamo itself), so the retry really
    compiles for the C++ backend. Returns ``(fn's result, status)``.
    """
    graph_breaks = dynamo_graph_break_errors()
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
    if triton_on_cpu_expected():
        raise TritonOnCpuError(
            f"Triton on the CPU failed on {describe_versions()}, where it must work: {status.reason}"
        )
    torch.compiler.reset()
    return fn(), status


@functools.cache
def triton_on_cpu_available() -> tuple[bool, str]:
    """Probe once per process: compile ``relu(x * 2 + 1)`` for CPU tensors with Triton and check the result.

    Returns ``(True, description)`` or ``(False, reason)``. Takes a few seconds the first time.
    """

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
