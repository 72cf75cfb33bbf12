"""Every torch/Triton internal ``lecture_code`` uses, in one place, behind one version check.

Internals move between releases (the lecture this repo descends from broke when
``torch._inductor.triton_heuristics`` moved in torch 2.4). So no other module of ``lecture_code`` imports a
private torch or Triton module, reads a private attribute or names an internal logger: it calls the small
functions below, and an upgrade that moves one breaks here, loudly, in one place. (The kernels' own Triton
internals live in :mod:`kernels.internals`, for the same reason; the version parsing is shared from there.)

:data:`KNOWN_TO_WORK` lists the (torch, triton) pairs on which ``lecture_code`` was run and tested: there,
inductor's Triton on a CPU must work and a failure is an error (:func:`versions_known_to_work`). On any other
pair the Triton-on-CPU path falls back to inductor's C++ and says why (notebook 03 then shows C++).

Where an internal has a public twin, ``lecture_code`` uses the public one directly
(``torch.compiler.reset()``, not ``torch._dynamo.reset()``).
"""

from __future__ import annotations

import functools
import logging
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
import triton

from kernels.internals import version_tuple

# (torch (major, minor), triton (major, minor)) pairs on which lecture_code was run and tested.
KNOWN_TO_WORK: tuple[tuple[tuple[int, int], tuple[int, int]], ...] = (
    ((2, 13), (3, 9)),  # CPU: dev machine and CI (torch 2.13.0 CPU wheel, triton 3.9): Triton on a CPU works
    ((2, 13), (3, 6)),  # CPU: the same torch with the GPU image's Triton: Triton on a CPU works (2026-11-22)
    ((2, 11), (3, 6)),  # GPU: the H100 image (torch 2.11.0+cu130, triton 3.6.0): capture, PTX; inductor on
    # a GPU writes Triton itself, so Triton on the CPU is neither needed nor tried there
)


def version_pair() -> tuple[tuple[int, int], tuple[int, int]]:
    """(torch, triton) as ``(major, minor)``, e.g. ``((2, 13), (3, 9))``."""
    return version_tuple(torch.__version__), version_tuple(triton.__version__)


def versions_known_to_work() -> bool:
    """True when this (torch, triton) pair is in :data:`KNOWN_TO_WORK`."""
    return version_pair() in KNOWN_TO_WORK


def triton_on_cpu_expected() -> bool:
    """True on a machine without a GPU whose pair is known to work: there Triton on the CPU must succeed."""
    return versions_known_to_work() and not torch.cuda.is_available()


def describe_versions() -> str:
    """One line for a notebook or an error message."""
    (t_major, t_minor), (tr_major, tr_minor) = version_pair()
    known = "known to work" if versions_known_to_work() else "not in KNOWN_TO_WORK: fallbacks allowed"
    return f"torch {t_major}.{t_minor} + triton {tr_major}.{tr_minor} ({known})"


# --- torch internals ---------------------------------------------------------------------------------------
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402  (op counting: a stable private class)
from torch.utils._pytree import tree_leaves  # noqa: E402

INDUCTOR_LOGGER = "torch._inductor"  # the logger inductor's output_code artifact is written to
DYNAMO_LOGGER = "torch._dynamo"  # the logger dynamo warns on (graph breaks, ignored profiler records)
AUTOTUNE_LOGGER = "torch._inductor.select_algorithm"  # where max-autotune logs each candidate it drops

# The module inductor's generated Triton imports its ``@triton.jit`` helpers from
# (``triton_helpers.maximum``), and the modules it imports ``libdevice`` from (the second in some versions).
INDUCTOR_HELPER_MODULE = "torch._inductor.runtime.triton_helpers"
LIBDEVICE_HOMES = (INDUCTOR_HELPER_MODULE, "torch._inductor.runtime.triton_compat")

# The imports at the top of a Triton file inductor writes: a kernel's text runs again under this header.
INDUCTOR_KERNEL_HEADER = f"""\
import triton
import triton.language as tl
from torch._inductor.runtime import triton_helpers
from {INDUCTOR_HELPER_MODULE} import libdevice, math as tl_math
"""


def run_and_get_code(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, list[str]]:
    """``torch._inductor.utils.run_and_get_code``: run ``fn``; return (result, generated wrapper sources)."""
    from torch._inductor.utils import run_and_get_code as _run_and_get_code

    return _run_and_get_code(fn, *args, **kwargs)


@contextmanager
def output_code_logged() -> Iterator[logging.Logger]:
    """Inside the block, inductor logs the code it generates (``TORCH_LOGS=output_code``, via
    ``torch._logging.set_logs``) to the yielded logger; the log settings are reset on exit."""
    torch._logging.set_logs(output_code=True)
    try:
        yield logging.getLogger(INDUCTOR_LOGGER)
    finally:
        torch._logging.set_logs()


@contextmanager
def recompiles_logged() -> Iterator[list[str]]:
    """Inside the block, dynamo logs why it compiles a function again (``TORCH_LOGS=recompiles``, via
    ``torch._logging.set_logs``); the yielded list collects those messages instead of printing them to stderr.

    Each message is one recompile: ``Recompiling function f in <file>:<line>`` and, below ``triggered by the
    following guard failure(s):``, one ``- 0/0: tensor 'x' size mismatch at index 0. expected 64, actual 32``
    line per failed guard. The records reach dynamo's logger (``torch._dynamo``, which does not propagate to
    ``torch``), from its ``__recompiles`` artifact logger. The log settings are reset on exit.
    """
    messages: list[str] = []

    class _Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.name.endswith(".__recompiles"):
                messages.append(record.getMessage())

    torch._logging.set_logs(recompiles=True)
    logger = logging.getLogger(DYNAMO_LOGGER)
    printing = list(logger.handlers)  # torch's stderr handler: the messages go to the list only
    for handler in printing:
        logger.removeHandler(handler)
    collector = _Collect(level=logging.DEBUG)
    logger.addHandler(collector)
    try:
        yield messages
    finally:
        logger.removeHandler(collector)
        for handler in printing:
            logger.addHandler(handler)
        torch._logging.set_logs()


@contextmanager
def autotune_errors_collected() -> Iterator[list[str]]:
    """Inside the block, the warnings and errors inductor's GEMM autotuning logs go to the yielded list, not
    to stderr: one per candidate it dropped (``Runtime error during autotuning: … out of resource: triton_mm
    Required: 262144 Hardware limit:232448 … Ignoring this choice.``, a Triton tile that needs more shared
    memory than the GPU has). A filter on that one logger; other loggers and lower levels are untouched."""
    messages: list[str] = []

    def collect(record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        messages.append(record.getMessage())
        return False

    logger = logging.getLogger(AUTOTUNE_LOGGER)
    logger.addFilter(collect)
    try:
        yield messages
    finally:
        logger.removeFilter(collect)


def dynamo_logger() -> logging.Logger:
    """Dynamo's logger (its warnings: ``Profiler record function … will be ignored``, graph breaks)."""
    return logging.getLogger(DYNAMO_LOGGER)


def dynamo_explain(fn: Callable[..., Any], *args: Any) -> Any:
    """``torch._dynamo.explain(fn)(*args)``: the graphs dynamo traced and the breaks between them
    (``.graphs``, ``.graph_break_count``, ``.break_reasons``)."""
    return torch._dynamo.explain(fn)(*args)


def dynamo_graph_break_errors() -> tuple[type[BaseException], ...]:
    """The exceptions dynamo raises when it refuses a function itself (``Unsupported``, ``UserError``)."""
    try:
        from torch._dynamo import exc
    except ImportError:
        return ()
    return tuple(e for e in (getattr(exc, "Unsupported", None), getattr(exc, "UserError", None)) if e)


def inductor_config() -> types.ModuleType:
    """Inductor's settings, ``torch._inductor.config`` (``.patch(...)`` sets them for a block)."""
    from torch._inductor import config

    return config


def inductor_mode_options(mode: str) -> dict[str, Any]:
    """``torch._inductor.list_mode_options(mode)``: the inductor settings a ``torch.compile(mode=...)`` turns
    on, e.g. ``{'max_autotune': True, 'coordinate_descent_tuning': True}``."""
    from torch._inductor import list_mode_options

    return dict(list_mode_options(mode))


@contextmanager
def fresh_inductor_cache() -> Iterator[None]:
    """``torch._inductor.utils.fresh_cache()``: inside the block inductor compiles as on a fresh machine.

    Its on-disk caches (FX graph cache, GEMM autotuning timings, Triton kernels) live in a new temporary
    folder (``TORCHINDUCTOR_CACHE_DIR`` and ``TRITON_CACHE_DIR`` point there), its in-memory caches are
    cleared on entry, and the folder is deleted on exit. Nothing is read from, or written to, the caches
    of earlier runs: a compile inside finds no earlier result to reuse, so it lowers and autotunes again.
    """
    from torch._inductor.utils import fresh_cache

    with fresh_cache():
        yield


def clear_torch_triton_caches() -> None:
    """``torch.utils._triton`` caches the backend it derived from the active driver: forget it."""
    try:
        import torch.utils._triton as tt
    except ImportError:
        return
    for name in ("triton_backend", "triton_hash_with_backend"):
        cached = getattr(tt, name, None)
        if hasattr(cached, "cache_clear"):
            cached.cache_clear()


def gpu_sleep_available() -> bool:
    """Whether ``torch.cuda._sleep`` exists: a kernel that spins for a number of cycles (timers use it to keep
    the GPU busy while the host enqueues the work being timed)."""
    return hasattr(torch.cuda, "_sleep")


def gpu_sleep(cycles: int) -> None:
    """``torch.cuda._sleep(cycles)``: enqueue a kernel that keeps the current stream busy for ``cycles``."""
    torch.cuda._sleep(cycles)


def foreach_copy_(targets: list[torch.Tensor], sources: list[torch.Tensor]) -> None:
    """``torch._foreach_copy_(targets, sources)``: each source copied into its target (casting to the
    target's dtype) by one multi-tensor kernel on a GPU, where a ``copy_`` each would launch one per pair."""
    torch._foreach_copy_(targets, sources)


# --- triton internals --------------------------------------------------------------------------------------
@functools.cache
def triton_compile_api() -> tuple[type, type]:
    """``(ASTSource, GPUTarget)``: what ``triton.compile`` needs to build for a GPU that is not here."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    return ASTSource, GPUTarget


@functools.cache
def triton_driver_api() -> tuple[type, type]:
    """``(DriverBase, GPUTarget)``: what a Triton driver subclasses and the target it reports."""
    from triton.backends.compiler import GPUTarget
    from triton.backends.driver import DriverBase

    return DriverBase, GPUTarget


@contextmanager
def active_triton_driver(driver: Any) -> Iterator[None]:
    """``driver`` is Triton's active driver inside the block; the previous one (or none) is put back after."""
    config = triton.runtime.driver
    missing = object()
    previous = getattr(config, "_active", missing)
    config.set_active(driver)
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


def jit_function_class() -> type:
    """``triton.runtime.jit.JITFunction``: what ``@triton.jit`` returns when not interpreting (compilable)."""
    from triton.runtime.jit import JITFunction

    return JITFunction


def interpreted_function_class() -> type | None:
    """``triton.runtime.interpreter.InterpretedFunction`` (what ``@triton.jit`` returns under
    ``TRITON_INTERPRET=1``), or ``None`` in a Triton without one."""
    try:
        from triton.runtime.interpreter import InterpretedFunction
    except ImportError:
        return None
    return InterpretedFunction


def interpreter_module() -> types.ModuleType | None:
    """``triton.runtime.interpreter`` (its module globals are copied into each function it rewrites), or
    ``None`` in a Triton without one."""
    try:
        from triton.runtime import interpreter
    except ImportError:
        return None
    return interpreter


__all__ = [
    "DYNAMO_LOGGER",
    "INDUCTOR_HELPER_MODULE",
    "INDUCTOR_KERNEL_HEADER",
    "INDUCTOR_LOGGER",
    "KNOWN_TO_WORK",
    "LIBDEVICE_HOMES",
    "TorchDispatchMode",
    "active_triton_driver",
    "clear_torch_triton_caches",
    "describe_versions",
    "dynamo_explain",
    "dynamo_graph_break_errors",
    "dynamo_logger",
    "foreach_copy_",
    "fresh_inductor_cache",
    "gpu_sleep",
    "gpu_sleep_available",
    "inductor_config",
    "inductor_mode_options",
    "interpreted_function_class",
    "interpreter_module",
    "jit_function_class",
    "output_code_logged",
    "recompiles_logged",
    "run_and_get_code",
    "tree_leaves",
    "triton_compile_api",
    "triton_driver_api",
    "triton_on_cpu_expected",
    "version_pair",
    "versions_known_to_work",
]
