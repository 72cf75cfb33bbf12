"""Tile sizes and grid sizes shared by every step of the GEMM build-up (:mod:`kernels.gemm`).

A :class:`Tiles` says how one program cuts the product ``C = A·B`` (A ``[M, K]``, B ``[K, N]``): an output
tile of ``block_m × block_n``, walked along K ``block_k`` columns at a time, tiles taken in super-rows of
``group_m`` row blocks (step 2), with ``num_warps`` warps and ``num_stages`` loads in flight.

:func:`default_tiles` is the one rule every step uses, so the steps differ only in what each one teaches:

- on a GPU, 16-bit: 128 × 256 × 64, 3 stages, 8 warps — Hopper's tile (0.98× cuBLAS on an H100; 4 stages of it
  do not fit 227 KB of shared memory), also Triton's matmul tutorial's largest config; fp32: 128 × 128 × 32;
- under the interpreter (CPU): tiles no larger than the problem, at most 64 (programs run one after another
  on a CPU, so fewer, larger programs are faster).

:func:`persistent_programs`: how many programs a persistent grid launches (step 3): one per SM on a GPU, a few
(:data:`CPU_PROGRAMS`) under the interpreter, never more than there are tiles.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kernels.launch import cdiv, dot_block, sm_count
from kernels.runtime import interpreting

__all__ = ["CPU_PROGRAMS", "Tiles", "default_tiles", "num_tiles", "persistent_programs"]

CPU_PROGRAMS = 4  # a persistent grid under the interpreter: enough programs that each loops over tiles


@dataclass(frozen=True)
class Tiles:
    """One program's tile and launch parameters (block sides are powers of two from 16 to 256)."""

    block_m: int
    block_n: int
    block_k: int
    group_m: int = 8
    num_warps: int = 8
    num_stages: int = 3

    def __post_init__(self) -> None:
        for name in ("block_m", "block_n", "block_k"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 16 or v > 256 or v & (v - 1):
                raise ValueError(
                    f"Tiles: {name} must be a power of two from 16 to 256 (tl.dot's rule), got {v!r}"
                )
        if not isinstance(self.group_m, int) or self.group_m < 1:
            raise ValueError(f"Tiles: group_m must be a positive int, got {self.group_m!r}")
        if self.num_warps not in (1, 2, 4, 8, 16):
            raise ValueError(f"Tiles: num_warps must be 1, 2, 4, 8 or 16, got {self.num_warps!r}")
        if not isinstance(self.num_stages, int) or self.num_stages < 1:
            raise ValueError(f"Tiles: num_stages must be a positive int, got {self.num_stages!r}")


def default_tiles(M: int, N: int, K: int, dtype: torch.dtype) -> Tiles:
    """The tiles every step uses by default (module docstring)."""
    if interpreting():
        return Tiles(min(64, dot_block(M)), min(64, dot_block(N)), min(64, dot_block(K)), 4, 4, 1)
    if dtype == torch.float32:
        return Tiles(128, 128, 32, 8, 8, 3)
    return Tiles(128, 256, 64, 8, 8, 3)


def num_tiles(M: int, N: int, tiles: Tiles) -> int:
    """Output tiles of an ``[M, N]`` product."""
    return cdiv(M, tiles.block_m) * cdiv(N, tiles.block_n)


def persistent_programs(M: int, N: int, tiles: Tiles, device: torch.device) -> int:
    """Programs of a persistent grid: one per SM on a GPU, :data:`CPU_PROGRAMS` under the interpreter, at most
    one per tile."""
    available = sm_count(device) if device.type == "cuda" else CPU_PROGRAMS
    return max(1, min(available, num_tiles(M, N, tiles)))
