"""Cheap repeated launches of a Triton kernel: the compiled kernel's own launcher, cached per exact arguments.

``kernel[grid](*args, **constexprs)`` (``JITFunction.run``) spends most of its host time before the launch:
binding the arguments, specializing each one (ints by value ``== 1`` and divisibility by 16, pointers by
16-byte alignment), building the cache key string, looking up the compiled kernel. On the H100 machine
(triton 3.6) that is ≈ 90 µs for the 30-argument LoRA GEMM against ≈ 25 µs for a whole ``F.linear``.

:class:`CachedLauncher` does the normal launch the first time it sees a *launch key* and keeps the compiled
kernel's launcher (``compiled[grid]``, the runner ``CompiledKernel.__getitem__`` returns); later calls with
the same key go straight to it. The key is finer than Triton's specialization, so it can never pick a kernel
Triton would not have picked: every int argument by exact value, floats by type only (they are never
specialized), every tensor by dtype and ``data_ptr() % 16 == 0``, plus the grid, the constexprs, warps,
stages and the current device. What is skipped: the binder, the key string, and the check that the kernel's
global variables did not change (the kernels here read none).

What this leans on is not public Triton API: it goes through :mod:`kernels.internals` and its one version
check (:data:`~kernels.internals.DIRECT_LAUNCH`). Where that check fails (an older or newer Triton) or under
the interpreter (where ``run`` returns nothing), every call takes the normal path.
"""

from __future__ import annotations

import threading

import torch
import triton

from kernels.internals import (
    DIRECT_LAUNCH,
    autotuner_best_config,
    autotuner_kernel,
    compiled_runner,
    jit_arg_names,
)
from kernels.runtime import interpreting

__all__ = ["CachedLauncher", "TunedLauncher", "ensure_allocator"]

MAX_ENTRIES = 512  # launch keys per kernel; beyond that the table is cleared (e.g. a new M on every call)


def _arg_key(a):
    t = type(a)
    if t is int or t is bool or a is None:
        return a
    if t is float:
        return float
    return (a.dtype, a.data_ptr() % 16 == 0)  # a tensor


class CachedLauncher:
    """``launcher(grid, args, constexprs)`` ≡ ``fn[grid](*args, **dict(constexprs), num_warps=…)``.

    ``constexprs``: a tuple of ``(name, value)`` pairs naming every constexpr parameter of ``fn`` after the
    positional ``args`` (so it is hashable and part of the key), ``num_warps``/``num_stages`` the options.
    """

    def __init__(self, fn):
        self.fn = fn
        self.enabled = DIRECT_LAUNCH and not interpreting()  # the interpreter's run returns nothing
        self._runners: dict[tuple, tuple] = {}

    def __call__(self, grid: tuple, args: tuple, constexprs: tuple, num_warps: int, num_stages: int) -> None:
        key = None
        if self.enabled:
            key = (grid, constexprs, num_warps, num_stages, torch.cuda.current_device(), *map(_arg_key, args))
            hit = self._runners.get(key)
            if hit is not None:
                runner, tail = hit
                runner(*args, *tail)
                return
        compiled = self.fn[grid](*args, **dict(constexprs), num_warps=num_warps, num_stages=num_stages)
        runner = compiled_runner(compiled, grid) if key is not None else None
        if runner is not None:
            names = jit_arg_names(self.fn)[len(args) :]
            given = dict(constexprs)
            if set(names) == set(given):  # every remaining parameter is one of the constexprs
                if len(self._runners) >= MAX_ENTRIES:
                    self._runners.clear()
                self._runners[key] = (runner, tuple(given[n] for n in names))

    def clear(self) -> None:
        self._runners.clear()


class TunedLauncher:
    """An autotuned kernel's launches: ``triton.autotune`` picks the config on the first call per ``key``,
    every later call launches that config through a :class:`CachedLauncher` of the kernel under it.

    ``launcher(key, grid_of, args, constexprs)`` ≡ ``autotuner[grid_of](*args, **dict(constexprs))``, where
    ``key`` holds what the autotuner keys on (its key arguments and the tensors' dtypes) and ``grid_of(meta)``
    is the grid for a config's meta-parameters. Skipped after the first call: the autotuner's own dispatch
    (its key, its config lookup) and ``JITFunction.run``. Under the interpreter: always the autotuner.
    """

    def __init__(self, autotuner):
        self.autotuner = autotuner
        self.launch = CachedLauncher(autotuner_kernel(autotuner))
        self._chosen: dict[tuple, triton.Config] = {}

    def __call__(self, key: tuple, grid_of, args: tuple, constexprs: tuple = ()) -> None:
        config = self._chosen.get(key) if self.launch.enabled else None
        if config is None:
            self.autotuner[grid_of](*args, **dict(constexprs))
            if self.launch.enabled:
                self._chosen[key] = autotuner_best_config(self.autotuner)  # just tuned or looked up
            return
        meta = {**dict(constexprs), **config.kwargs}
        self.launch(grid_of(meta), args, tuple(sorted(meta.items())), config.num_warps, config.num_stages)

    def clear(self) -> None:
        self._chosen.clear()
        self.launch.clear()


def _scratch(size: int, align: int, stream) -> torch.Tensor:
    return torch.empty(size, dtype=torch.int8, device="cuda")


_THREAD = threading.local()


def ensure_allocator() -> None:
    """Give Triton an allocator for the global scratch that device-side tensor descriptors need.

    Triton keeps it in a context variable, which a new thread does not inherit (autograd runs the backward on
    its own thread: seen with triton 3.6), so it is set once per thread.
    """
    if not getattr(_THREAD, "allocator_set", False):
        triton.set_allocator(_scratch)
        _THREAD.allocator_set = True
