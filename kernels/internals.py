"""Every Triton internal the kernels use, in one place, behind one version check.

The launch protocol the fast launches rely on (:mod:`kernels.fast_launch`) is not public API:
``JITFunction.run`` (what ``kernel[grid](...)`` calls) returns the ``CompiledKernel``;
``CompiledKernel[grid]`` is a runner that takes every argument in signature order, constexprs included; a
``JITFunction`` lists its parameters in ``arg_names``; an ``Autotuner`` wraps its kernel in ``fn`` and keeps
the config its last run used in ``best_config``. All of it was read and tested in triton 3.6 and 3.9
(:data:`KNOWN_TO_WORK`). :data:`DIRECT_LAUNCH` is true only there; elsewhere (an older or newer Triton, the
interpreter, where ``run`` returns nothing) every launch takes Triton's normal path, so the next Triton breaks
nothing silently: it only loses the shortcut, and ``tests/kernels/test_cached_launches.py`` says so.

``torch`` internals: four probes of what intercepts torch calls (:func:`plain_eager`), read in torch 2.11
and 2.13 (:data:`TORCH_KNOWN_TO_WORK`); outside those versions :func:`plain_eager` says False and every
caller takes its public path (the ``torch.library`` op).
"""

from __future__ import annotations

import torch
import triton

__all__ = [
    "DIRECT_LAUNCH",
    "KNOWN_TO_WORK",
    "TORCH_KNOWN_TO_WORK",
    "TRITON_VERSION",
    "autotuner_best_config",
    "autotuner_kernel",
    "compiled_runner",
    "jit_arg_names",
    "plain_eager",
    "version_tuple",
]


def version_tuple(text: str) -> tuple[int, int]:
    """``"3.6.0"`` → ``(3, 6)``; ``"2.11.0+cu130"`` → ``(2, 11)``; ``"3.9.0rc1"`` → ``(3, 9)``."""
    major, minor = text.split("+")[0].split(".")[:2]
    return int(major), int("".join(ch for ch in minor if ch.isdigit()) or 0)


TRITON_VERSION = version_tuple(triton.__version__)
KNOWN_TO_WORK = ((3, 6), (3, 9))  # the first and last Triton (major, minor) the protocol was read in
DIRECT_LAUNCH = KNOWN_TO_WORK[0] <= TRITON_VERSION <= KNOWN_TO_WORK[1]
TORCH_KNOWN_TO_WORK = ((2, 11), (2, 13))  # the torch (major, minor) the probes of plain_eager were read in
_PROBES_WORK = TORCH_KNOWN_TO_WORK[0] <= version_tuple(torch.__version__) <= TORCH_KNOWN_TO_WORK[1]
_PLAIN_TENSORS = (torch.Tensor, torch.nn.Parameter)


def compiled_runner(compiled, grid: tuple):
    """The runner of a ``CompiledKernel`` for ``grid``, or None when ``compiled`` is not one (interpreter)."""
    if compiled is None or not hasattr(compiled, "__getitem__"):
        return None
    return compiled[(*grid, 1, 1)[:3]]


def jit_arg_names(fn) -> list[str]:
    """A ``@triton.jit`` function's parameter names, in signature order."""
    return list(fn.arg_names)


def autotuner_kernel(autotuner):
    """The ``@triton.jit`` function under a ``@triton.autotune``."""
    return autotuner.fn


def autotuner_best_config(autotuner) -> triton.Config:
    """The config the autotuner's last call launched (tuned then, or looked up)."""
    return autotuner.best_config


def plain_eager(*tensors) -> bool:
    """Whether an op's body may be called directly instead of the ``torch.library`` op, with the same result:
    eager (neither torch.compile nor ``torch.jit.trace`` tracing), no ``TorchDispatchMode`` or
    ``TorchFunctionMode`` active (FakeTensorMode, FlopCounterMode, …), no functorch transform (vmap, grad), no
    profiler (whose traces name the op), and each tensor (None allowed) a plain ``torch.Tensor`` or
    ``Parameter``, not a subclass, not on the meta device (the op's fake function answers there). False
    outside :data:`TORCH_KNOWN_TO_WORK`."""
    return (
        _PROBES_WORK
        and not torch.compiler.is_compiling()
        and not torch.jit.is_tracing()
        and not torch._C._len_torch_dispatch_stack()
        and not torch._C._is_torch_function_mode_enabled()
        and not torch._C._are_functorch_transforms_active()
        and not torch.autograd.profiler._is_profiler_enabled
        and all(t is None or (type(t) in _PLAIN_TENSORS and not t.is_meta) for t in tensors)
    )
