"""Buffers with a guard region after their end, to catch a kernel that reads or writes past a tensor.

A Triton kernel whose last block runs past the end of a row or a tensor and is not masked reads and writes
memory it does not own: on a GPU it may corrupt a neighbour or look harmless; in the interpreter it touches
host memory. Notebook 04 runs inductor's captured v0 kernel the same way
(``lecture_code.compile.bias_relu_v0``, ``V0.run``): each tensor lives at the start of a larger buffer whose
tail is filled with a sentinel, the kernel gets the inner view, and afterwards any guard element that no
longer holds the sentinel was written past the end. Inputs get a guard too, so an unmasked read stays
inside memory allocated here.

The guard is :data:`GUARD` elements: enough for any block a kernel of the lecture launches (a kernel with a
block larger than this could still step past it).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["GUARD", "SENTINEL", "Guarded", "guarded_copy", "guarded_output"]

GUARD = 4096  # elements after the end of every guarded tensor
SENTINEL = -2048.0  # exact in fp16/bf16/fp32; far from N(0, 1) data, so a value read from a guard stands out


@dataclass
class Guarded:
    """A tensor at the start of ``buffer``, whose last :data:`GUARD` elements hold :data:`SENTINEL`."""

    buffer: torch.Tensor
    shape: tuple[int, ...]

    @property
    def numel(self) -> int:
        return self.buffer.numel() - GUARD

    @property
    def tensor(self) -> torch.Tensor:
        """The view a kernel is given (contiguous, at the start of the buffer)."""
        return self.buffer[: self.numel].view(self.shape)

    def written_past_end(self) -> int:
        """How many guard elements no longer hold the sentinel (NaN counts as written)."""
        return int((self.buffer[self.numel :] != SENTINEL).sum())


def _buffer(numel: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    return torch.full((numel + GUARD,), SENTINEL, dtype=dtype, device=device)


def guarded_copy(t: torch.Tensor) -> Guarded:
    """A contiguous copy of ``t`` with a guard after it (for inputs)."""
    g = Guarded(_buffer(t.numel(), t.dtype, t.device), tuple(t.shape))
    g.tensor.copy_(t)
    return g


def guarded_output(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> Guarded:
    """An output poisoned with NaN (an element never written stays NaN), with a guard after it."""
    numel = 1
    for n in shape:
        numel *= n
    g = Guarded(_buffer(numel, dtype, device), tuple(shape))
    g.tensor.fill_(float("nan"))
    return g
