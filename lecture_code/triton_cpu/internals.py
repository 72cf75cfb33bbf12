"""Every torch/Triton internal used outside this folder, imported here behind one version check.

Internals move between releases (the lecture this repo descends from broke when
``torch._inductor.triton_heuristics`` moved in torch 2.4). So the rest of ``lecture_code`` never imports a
private torch or Triton module itself: it imports the names below, and an upgrade that moves one breaks here,
loudly, in one place. The other modules of this folder (stub driver, libdevice shim, interpreter patches,
inductor on the CPU) are the rest of that one place.

:data:`KNOWN_TO_WORK` lists the (torch, triton) pairs on which the whole folder was run and tested: there,
inductor's Triton on a CPU must work and a failure is an error (:func:`versions_known_to_work`). On any other
pair the Triton-on-CPU path falls back to inductor's C++ and says why (notebook 03 then shows C++).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
import triton

# (torch major.minor, triton major.minor) pairs on which this folder was run and tested.
KNOWN_TO_WORK: tuple[tuple[str, str], ...] = (
    ("2.13", "3.9"),  # CPU: dev machine and CI (torch 2.13.0 CPU wheel, triton 3.9): Triton on the CPU works
    ("2.13", "3.6"),  # CPU: the same torch with the GPU image's Triton: Triton on the CPU works (2026-11-22)
    ("2.11", "3.6"),  # GPU: the H100 image (torch 2.11.0+cu130, triton 3.6.0): capture, PTX; inductor on
    # a GPU writes Triton itself, so Triton on the CPU is neither needed nor tried there
)


def _major_minor(version: str) -> str:
    return ".".join(version.split("+")[0].split(".")[:2])


def version_pair() -> tuple[str, str]:
    """(torch, triton) as ``major.minor`` strings, e.g. ``("2.13", "3.9")``."""
    return _major_minor(torch.__version__), _major_minor(triton.__version__)


def versions_known_to_work() -> bool:
    """True when this (torch, triton) pair is in :data:`KNOWN_TO_WORK`."""
    return version_pair() in KNOWN_TO_WORK


def triton_on_cpu_expected() -> bool:
    """True on a machine without a GPU whose pair is known to work: there Triton on the CPU must succeed."""
    return versions_known_to_work() and not torch.cuda.is_available()


def describe_versions() -> str:
    """One line for a notebook or an error message."""
    torch_v, triton_v = version_pair()
    known = "known to work" if versions_known_to_work() else "not in KNOWN_TO_WORK: fallbacks allowed"
    return f"torch {torch_v} + triton {triton_v} ({known})"


# --- torch internals ---------------------------------------------------------------------------------------
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402  (op counting: a stable private class)
from torch.utils._pytree import tree_leaves  # noqa: E402


def run_and_get_code(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, list[str]]:
    """``torch._inductor.utils.run_and_get_code``: run ``fn``; return (result, generated wrapper sources)."""
    from torch._inductor.utils import run_and_get_code as _run_and_get_code

    return _run_and_get_code(fn, *args, **kwargs)


def gpu_sleep_available() -> bool:
    """Whether ``torch.cuda._sleep`` exists: a kernel that spins for a number of cycles (timers use it to keep
    the GPU busy while the host enqueues the work being timed)."""
    return hasattr(torch.cuda, "_sleep")


def gpu_sleep(cycles: int) -> None:
    """``torch.cuda._sleep(cycles)``: enqueue a kernel that keeps the current stream busy for ``cycles``."""
    torch.cuda._sleep(cycles)


# --- triton internals --------------------------------------------------------------------------------------
@functools.cache
def triton_compile_api() -> tuple[type, type]:
    """``(ASTSource, GPUTarget)``: what ``triton.compile`` needs to build for a GPU that is not here."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    return ASTSource, GPUTarget


__all__ = [
    "KNOWN_TO_WORK",
    "TorchDispatchMode",
    "describe_versions",
    "gpu_sleep",
    "gpu_sleep_available",
    "run_and_get_code",
    "tree_leaves",
    "triton_on_cpu_expected",
    "triton_compile_api",
    "version_pair",
    "versions_known_to_work",
]
