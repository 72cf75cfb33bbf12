"""A solution to notebook 09's exercise: NF4 → 16 bits, one program per block of W's flat elements.

Each program takes ``BLOCK`` consecutive flat indices f = n·K + k of W. Element f's 4-bit code sits in byte
``f // 2`` of ``packed``: the high nibble (``byte >> 4``) when f is even, the low one (``byte & 0xF``) when f
is odd, the order :func:`kernels.qlora.nf4.quantize_nf4` packs. Its value is ``code[nibble]`` (a 16-entry
table lookup) times its block's absmax, ``absmax[f // BLOCKSIZE]``: blocks are counted along the flattened
weight, so where K is not a multiple of the block size a block runs on into the next row. The product is
taken in fp32 and rounded once to W's dtype, as the reference does.

One mask, ``f < numel``: the packed bytes end with the last block's padding, and the last program runs past
N·K whenever N·K is not a multiple of ``BLOCK``; unmasked, its store lands past the end of W. Each byte is
loaded twice (by its two elements): :mod:`kernels.qlora.dequantize` loads it once per program and
interleaves the two nibbles' values instead. Offsets are int32 products: fine for the exercise's sizes
(the repository's kernels use int64).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

__all__ = ["dequantize_nf4"]

BLOCK = 256  # elements of W per program


@triton.jit
def _dequantize_kernel(packed_ptr, absmax_ptr, code_ptr, out_ptr, numel, BLOCKSIZE: tl.constexpr,
                       BLOCK: tl.constexpr):  # fmt: skip
    f = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    in_w = f < numel  # the masked tail
    byte = tl.load(packed_ptr + f // 2, mask=in_w, other=0).to(tl.int32)
    nibble = tl.where(f % 2 == 0, byte >> 4, byte & 0xF)  # the even element is the high nibble
    scale = tl.load(absmax_ptr + f // BLOCKSIZE, mask=in_w, other=0.0)
    value = tl.load(code_ptr + nibble) * scale
    tl.store(out_ptr + f, value.to(out_ptr.dtype.element_ty), mask=in_w)


def dequantize_nf4(
    packed: torch.Tensor,
    absmax: torch.Tensor,
    code: torch.Tensor,
    shape: tuple[int, int],
    blocksize: int,
    dtype: torch.dtype,
) -> torch.Tensor:
    """W ``shape`` = (N, K) in ``dtype`` from ``packed`` (uint8, two codes a byte, the even element high),
    ``absmax`` (fp32, one per ``blocksize`` elements of the flattened W) and ``code`` (fp32 [16])."""
    n, k = shape
    out = torch.empty((n, k), device=packed.device, dtype=dtype)
    _dequantize_kernel[(triton.cdiv(n * k, BLOCK),)](
        packed, absmax, code, out, n * k, BLOCKSIZE=blocksize, BLOCK=BLOCK
    )
    return out
