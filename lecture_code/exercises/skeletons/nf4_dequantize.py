"""Your turn (notebook 09): NF4 → 16 bits in a Triton kernel: the nibble, the block's absmax, the tail masked.

The launcher is written: W allocated with ``torch.empty``, one program per ``BLOCK`` consecutive elements
of the flattened W (f = n·K + k, ``numel`` = N·K of them), the simplest grid. The kernel finds its flat
indices; its body is left to you (the TODO): for each f < numel load byte ``f // 2`` of ``packed``, take
its HIGH nibble (``byte >> 4``) when f is even and its low nibble (``byte & 0xF``) when f is odd, look the
nibble up in ``code`` (the 16 NF4 values), multiply by ``absmax[f // BLOCKSIZE]`` (a block is ``BLOCKSIZE``
consecutive elements of the flattened weight, whatever the rows), and store at ``out + f`` in out's dtype,
masked ``f < numel``: the packed bytes end with the last block's padding, which is not part of W. Check
it with ``check_nf4_dequantize(nf4_dequantize.dequantize_nf4)``.
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
    # unused until you write the body (hence the noqa)
    f = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)  # noqa: F841  (flat indices into W)
    # TODO: byte f // 2 (masked f < numel); its high nibble for even f, low for odd; code[nibble] ·
    # absmax[f // BLOCKSIZE]; store at out_ptr + f in out's dtype, masked f < numel


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
