"""Argument checks and the output tensor, shared by every step of the GEMM build-up (:mod:`kernels.gemm`).

Each message names the function, the argument, what was expected and what came: ``a`` ``[M, K]`` and ``b``
``[K, N]`` are 2-D tensors of one supported dtype (fp32, fp16, bf16) on one device Triton can use; ``out``,
when given, is ``[M, N]`` of that dtype and device, with memory of its own that no input shares.
"""

from __future__ import annotations

import torch

from kernels.launch import check_device, check_dtype, check_output, check_tensor

__all__ = ["check_operands", "output"]


def check_operands(fn: str, a: torch.Tensor, b: torch.Tensor) -> None:
    """``a`` ``[M, K]`` and ``b`` ``[K, N]``: tensors, 2-D, inner sizes equal, one dtype and device."""
    check_tensor(fn, "a", a)
    check_tensor(fn, "b", b)
    for name, t, dims in (("a", a, "[M, K]"), ("b", b, "[K, N]")):
        if t.dim() != 2:
            raise ValueError(f"{fn}: {name} must be 2-D {dims}, got shape {tuple(t.shape)}")
    if b.shape[0] != a.shape[1]:
        raise ValueError(
            f"{fn}: b has {b.shape[0]} rows, expected {a.shape[1]} (a's columns: a is [M, K], b is [K, N]); "
            f"got a {tuple(a.shape)}, b {tuple(b.shape)}"
        )
    check_device(fn, "a", a, a)
    check_device(fn, "b", b, a, like="a")
    check_dtype(fn, "a", a, a)
    check_dtype(fn, "b", b, a, like="a")


def output(
    fn: str, out: torch.Tensor | None, a: torch.Tensor, N: int, reads: dict[str, torch.Tensor | None]
) -> torch.Tensor:
    """``out`` checked (``[M, N]``, a's dtype and device, no shared memory), or a new ``[M, N]`` tensor."""
    M = a.shape[0]
    if out is None:
        return torch.empty((M, N), device=a.device, dtype=a.dtype)
    check_tensor(fn, "out", out)
    if tuple(out.shape) != (M, N):
        raise ValueError(f"{fn}: out has shape {tuple(out.shape)}, expected [M, N] = {(M, N)}")
    check_device(fn, "out", out, a, like="a")
    if out.dtype != a.dtype:
        raise TypeError(f"{fn}: out has dtype {out.dtype}, expected a's dtype {a.dtype}")
    check_output(fn, "out", out, reads)
    return out
