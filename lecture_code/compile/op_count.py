"""Why fusion pays: count the passes over memory of an eager call against those of its compiled version.

Eager PyTorch runs one ATen op at a time, and every op that computes something is (at least) one kernel
launch that reads its inputs from memory and writes its result back; views (``t``, ``view``, ``select`` …)
only make a new tensor header. torch.compile's wrapper launches its generated kernels plus the library calls
it kept (``extern_kernels.addmm`` …), and each generated kernel covers many ATen ops.

- :func:`eager_op_count` runs ``fn(*inputs)`` eagerly under a ``TorchDispatchMode`` and records every ATen
  op that reaches the kernels (after autograd and composite decompositions: ``linear`` shows up as ``t`` +
  ``addmm``), and the bytes of the results the non-view ops allocate.
- :func:`compiled_op_count` reads a :class:`~lecture_code.compile.CompiledCode`: its kernels, its
  library calls, and the bytes of the buffers its wrapper allocates (``empty_strided_*`` calls).

Both return an :class:`OpCount`; ``launches`` is the number to compare, ``bytes_allocated`` says how much
intermediate memory each version writes results into (an eager intermediate is written once and read back
by the next op; a fused kernel keeps it in registers).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from lecture_code.compile.generated_code import CompiledCode, library_calls
from lecture_code.internals import TorchDispatchMode, tree_leaves

__all__ = ["OpCount", "compiled_op_count", "eager_op_count"]


@dataclass
class OpCount:
    """What one version of a call launches.

    Attributes:
        ops: launch name → how many times (ATen op names eagerly; kernel names or ``extern:<op>`` compiled).
        views: ATen view ops (no kernel, no memory traffic), eager only.
        bytes_allocated: bytes of the results written to fresh memory (eager: outputs of non-view ops;
            compiled: buffers the wrapper allocates).
    """

    ops: Counter = field(default_factory=Counter)
    views: Counter = field(default_factory=Counter)
    bytes_allocated: int = 0

    @property
    def launches(self) -> int:
        """Kernel launches (one per non-view ATen op eagerly; kernels + library calls compiled)."""
        return sum(self.ops.values())

    def row(self, label: str) -> dict[str, Any]:
        """One row of a comparison table."""
        return {
            "version": label,
            "kernel launches": self.launches,
            "distinct ops / kernels": len(self.ops),
            "MiB allocated for results": round(self.bytes_allocated / 2**20, 3),
        }


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


class _CountOps(TorchDispatchMode):
    def __init__(self, count: OpCount):
        super().__init__()
        self.count = count

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = func.overloadpacket.__name__
        if getattr(func, "is_view", False):
            self.count.views[name] += 1
        else:
            self.count.ops[name] += 1
            self.count.bytes_allocated += sum(
                _nbytes(t) for t in tree_leaves(out) if isinstance(t, torch.Tensor)
            )
        return out


def eager_op_count(fn: Callable[..., Any], *inputs: Any, no_grad: bool = True) -> OpCount:
    """Run ``fn(*inputs)`` eagerly once and count the ATen ops it dispatches (under ``no_grad`` by default:
    the inference forward, as ``capture_compiled_code`` compiles it)."""
    count = OpCount()
    with torch.set_grad_enabled(not no_grad), _CountOps(count):
        fn(*inputs)
    return count


_ALLOC = re.compile(r"empty_strided(?:_\w+)?\(\(([\d, ]*)\), \(([\d, ]*)\), (?:dtype=)?torch\.(\w+)")


def _dtype_size(name: str) -> int:
    dtype = getattr(torch, name, None)
    return dtype.itemsize if isinstance(dtype, torch.dtype) else 4


def compiled_op_count(code: CompiledCode, graph: str | None = None) -> OpCount:
    """Kernel launches, library calls and allocated buffer bytes of a capture (or of one ``graph`` of it).

    Launches are read from the wrapper's ``call()``: a kernel is counted once per call site (inductor reuses
    one kernel for two identical ops), a library call (``extern:addmm``, ``extern:searchsorted``) once each.
    """
    count = OpCount()
    for index, text in enumerate(code.files):
        if graph is not None and code.graphs[index] != graph:
            continue
        call = text.find("def call(")
        body = text[call:] if call >= 0 else text
        for k in code.kernels:
            if k.file_index == index:
                sites = len(re.findall(rf"^\s*{re.escape(k.name)}(?:\.run)?\(", body, re.M))
                count.ops[k.name] += max(sites, 1)  # 1 if this torch launches kernels some other way
        count.ops.update(f"extern:{op}" for op in library_calls(body))
        for shape, _, dtype in _ALLOC.findall(body):
            numel = 1
            for d in (int(s) for s in shape.split(",") if s.strip()):
                numel *= d
            count.bytes_allocated += numel * _dtype_size(dtype)
    return count
