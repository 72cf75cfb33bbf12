"""One place decides how kernels run: on a GPU, or on a CPU through Triton's interpreter.

- GPU when ``torch.cuda.is_available()`` and ``TRITON_INTERPRET`` is not on: Triton compiles real kernels,
  autotuning benchmarks configs, :func:`default_device` is cuda.
- CPU otherwise: ``TRITON_INTERPRET=1`` must be in the environment *before* any ``@triton.jit`` decorator
  runs. ``kernels/__init__.py`` calls :func:`ensure_mode` first thing, so importing anything from
  ``kernels`` is enough. A user who set ``TRITON_INTERPRET`` themselves is respected.

Interpreter caveats handled here (each with its Triton issue or reason):
- bf16 ``tl.dot`` returns garbage under the interpreter (triton-lang/triton#11584): kernels take the
  ``DOT_UPCAST`` constexpr from :func:`dot_upcast` and cast bf16 tiles to fp32 before ``tl.dot``.
- ``@triton.autotune`` needs a GPU to time configs: :func:`autotune_configs` keeps only the first
  config in interpreter mode.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

__all__ = [
    "Sizes",
    "autotune_configs",
    "default_device",
    "dot_upcast",
    "ensure_mode",
    "has_gpu",
    "interpreting",
    "mode",
    "sizes",
]


def has_gpu() -> bool:
    """True when a CUDA device is usable."""
    return torch.cuda.is_available()


def ensure_mode() -> str:
    """Set ``TRITON_INTERPRET=1`` on machines without a GPU unless the user chose. Returns the mode."""
    if not has_gpu() and "TRITON_INTERPRET" not in os.environ:
        os.environ["TRITON_INTERPRET"] = "1"
    return mode()


# How Triton reads TRITON_INTERPRET (triton 3.6-3.9: these words, any case, no spaces; anything else is off).
_TRUTHY = ("1", "true", "on", "yes", "y")


def interpreting() -> bool:
    """True when Triton kernels run under the CPU interpreter (``TRITON_INTERPRET``, read as Triton does)."""
    return os.environ.get("TRITON_INTERPRET", "").lower() in _TRUTHY


def mode() -> str:
    """``"gpu"`` or ``"cpu-interpreter"``."""
    return "cpu-interpreter" if interpreting() or not has_gpu() else "gpu"


def default_device() -> torch.device:
    """The device for kernels, models and tensors: the one decision, for the whole repository
    (``lecture_code.environment.device`` returns this).

    cuda when a GPU is present and Triton is not interpreting; cpu otherwise, also on a GPU machine where
    ``TRITON_INTERPRET=1`` is set (the interpreter runs kernels on the host, and :func:`mode` then says
    ``"cpu-interpreter"`` and :func:`sizes` the small sizes).
    """
    return torch.device("cuda" if has_gpu() and not interpreting() else "cpu")


def dot_upcast(dtype: torch.dtype) -> bool:
    """Whether a kernel must upcast its ``tl.dot`` operands to fp32 (interpreter + bf16 bug)."""
    return interpreting() and dtype == torch.bfloat16


def autotune_configs(configs: list) -> list:
    """All configs on a GPU; only the first under the interpreter (autotune cannot time on a CPU)."""
    return configs[:1] if interpreting() else configs


@dataclass(frozen=True)
class Sizes:
    """Problem sizes for one runtime mode: kernels never hard-code sizes; notebooks and benchmarks ask."""

    name: str
    vector_numel: int
    rows: int
    cols: int
    batch_size: int


SMALL = Sizes(name="small", vector_numel=4_099, rows=96, cols=130, batch_size=256)
FULL = Sizes(name="full", vector_numel=1 << 26, rows=65_536, cols=4_096, batch_size=8_192)


def sizes() -> Sizes:
    """``small`` on a CPU (interpreter), ``full`` on a GPU."""
    return FULL if mode() == "gpu" else SMALL
