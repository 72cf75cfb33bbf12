"""Multi-LoRA metadata: the token→adapter map grouped by adapter, built on the device with no host sync.

A batch of T tokens, each with an adapter id in ``[0, L)`` or −1 (no adapter). The kernels of
:mod:`kernels.multi_lora` want the tokens of one adapter side by side, so one program can run one adapter's
weights over a block of its tokens. :func:`build_meta` computes, with device ops only:

- ``sorted_tokens`` [T] int32: token indices grouped by adapter (a *stable* sort: ascending token order
  within an adapter, so the result never depends on the sort's algorithm), adapters in ascending id order,
  the tokens without an adapter last;
- ``counts`` [L] int32: tokens per adapter (zero for adapters nobody uses);
- ``starts`` [L + 1] int32: where adapter l's tokens begin in ``sorted_tokens`` (``starts[L]`` = tokens
  that have an adapter, so the kernels never look past it);
- ``active`` [L] int32: the adapter ids that have tokens first (ascending), then the others;
  ``num_active`` [1] int32 how many have tokens.

Nothing here reads a value back to the host: shapes depend on T and L only, so the same object is reused
by every layer of one step, and building it inside a CUDA graph capture records a fixed sequence of kernels
(``torch.sort``, ``torch.searchsorted``, ``torch.diff``, ``torch.argsort``, a sum). The kernels use
``counts`` alone: with ids sorted ascending, adapter l's tokens start at Σ_{j<l} counts[j], and a program
finds its (adapter, row block) from the counts with a prefix sum (see :mod:`kernels.multi_lora`).

**Ids out of range.** Ids below −1 or ≥ L are grouped with the −1 tokens (the kernels leave those rows
untouched and never index an adapter with them), so a bad id cannot read or write out of bounds. Raising an
error for them needs the ids on the host, a sync: :func:`build_meta` checks when ``validate`` is True; the
default checks CPU tensors always (no sync to pay) and CUDA tensors only when ``FUSED_KERNELS_DEBUG=1`` is
in the environment, and never during a CUDA graph capture. So on a GPU the check is a debug flag, kept out
of the hot path; serving code validates the ids once where it builds the batch.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass

import torch

__all__ = ["DEBUG_ENV", "MultiLoRAMeta", "build_meta", "debug_checks"]

DEBUG_ENV = "FUSED_KERNELS_DEBUG"


def debug_checks() -> bool:
    """Whether checks that need a host sync run on CUDA tensors (``FUSED_KERNELS_DEBUG=1``)."""
    return os.environ.get(DEBUG_ENV, "") not in ("", "0")


@dataclass(frozen=True)
class MultiLoRAMeta:
    """The token→adapter grouping of one batch (see the module docstring); reuse it across layers."""

    num_tokens: int
    num_adapters: int
    sorted_tokens: torch.Tensor  # [T] int32
    counts: torch.Tensor  # [L] int32
    starts: torch.Tensor  # [L + 1] int32
    active: torch.Tensor  # [L] int32
    num_active: torch.Tensor  # [1] int32

    @property
    def device(self) -> torch.device:
        return self.counts.device


@functools.lru_cache(maxsize=64)
def _boundaries(n: int, device: torch.device) -> torch.Tensor:
    # 0, 1, …, L as int32 on the device: cached, so a call (or a graph capture) launches no arange. Built on
    # the first call, which is outside any capture in the usual warm-up-then-capture order.
    return torch.arange(n, dtype=torch.int32, device=device)


def _check_ids(adapter_ids: torch.Tensor, num_adapters: int) -> None:
    bad = (adapter_ids < -1) | (adapter_ids >= num_adapters)
    if bool(bad.any()):
        first = int(bad.nonzero()[0, 0])
        raise ValueError(
            f"build_meta: adapter_ids[{first}] = {int(adapter_ids[first])} is out of range: ids must be −1 "
            f"(no adapter) or in [0, {num_adapters}) for {num_adapters} stacked adapters"
        )


def build_meta(adapter_ids: torch.Tensor, num_adapters: int, validate: bool | None = None) -> MultiLoRAMeta:
    """Group the tokens of ``adapter_ids`` [T] (int32 or int64, −1 = no adapter) by adapter; see the module.

    ``validate``: raise ``ValueError`` for ids outside ``[-1, L)`` (a host sync on CUDA); ``None`` = on CPU
    tensors always, on CUDA tensors when ``FUSED_KERNELS_DEBUG=1`` and not capturing a CUDA graph.
    """
    if not isinstance(adapter_ids, torch.Tensor) or adapter_ids.dim() != 1:
        shape = tuple(adapter_ids.shape) if isinstance(adapter_ids, torch.Tensor) else type(adapter_ids)
        raise ValueError(f"build_meta: adapter_ids must be a 1-D tensor [T], got {shape}")
    if adapter_ids.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"build_meta: adapter_ids has dtype {adapter_ids.dtype}; use int32 or int64")
    if not isinstance(num_adapters, int) or num_adapters < 1:
        raise ValueError(f"build_meta: num_adapters={num_adapters!r} must be an int ≥ 1")
    L, device = num_adapters, adapter_ids.device
    if validate is None:
        validate = device.type == "cpu" or (debug_checks() and not torch.cuda.is_current_stream_capturing())
    if validate:
        _check_ids(adapter_ids, L)
    ids = adapter_ids.to(torch.int32)
    key = torch.where((ids >= 0) & (ids < L), ids, L)  # no adapter (or a bad id): after every adapter
    sorted_key, order = torch.sort(key, stable=True)
    starts = torch.searchsorted(sorted_key, _boundaries(L + 1, device), out_int32=True)
    counts = torch.diff(starts)
    active = torch.argsort((counts == 0).to(torch.int32), stable=True).to(torch.int32)
    num_active = (counts > 0).sum(dtype=torch.int32).reshape(1)
    return MultiLoRAMeta(
        num_tokens=adapter_ids.shape[0],
        num_adapters=L,
        sorted_tokens=order.to(torch.int32),
        counts=counts,
        starts=starts,
        active=active,
        num_active=num_active,
    )
