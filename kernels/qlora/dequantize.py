"""NF4 → 16 bits in a kernel of its own: the pass the usual QLoRA order (PEFT with bitsandbytes) runs before
every GEMM over the frozen weight, and that :mod:`kernels.qlora.nf4_gemm` removes.

Math: element f of the flat weight is ``NF4_CODE[code_f] · absmax[f // blocksize]``, code_f the high nibble
of byte f // 2 for even f, the low one for odd f (:mod:`kernels.qlora.nf4`). One program per ``BLOCK`` bytes:
it reads them (and their blocks' absmaxes) and writes ``2 · BLOCK`` values. Bytes per weight value: 0.5 read
+ 4/blocksize of fp32 absmax read + e written (e = 2 for bf16): a memory-bound pass that writes 3.6 times
what it reads; at N = K = 4096 in bf16, 8.4 MB of codes and 1.0 MB of absmaxes in, 33.5 MB out.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.launch import cdiv

__all__ = ["dequantize_nf4_kernel"]

BLOCK = 1024  # bytes per program: 2048 values


@triton.jit
def _dequantize_kernel(packed_ptr, absmax_ptr, code_ptr, out_ptr, numel, BLOCKSIZE: tl.constexpr,
                       BLOCK: tl.constexpr):  # fmt: skip
    byte_at = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    byte = tl.load(packed_ptr + byte_at, mask=byte_at * 2 < numel, other=0).to(tl.int32)
    even = byte_at * 2  # the flat index of the byte's high nibble; the low one is even + 1
    scale = tl.load(absmax_ptr + even // BLOCKSIZE, mask=even < numel, other=0.0)  # one block holds both
    high = tl.load(code_ptr + (byte >> 4)) * scale
    low = tl.load(code_ptr + (byte & 0xF)) * scale
    values = tl.interleave(high, low).to(out_ptr.dtype.element_ty)  # [2·BLOCK]: high, low, high, low, …
    flat = tl.program_id(0).to(tl.int64) * 2 * BLOCK + tl.arange(0, 2 * BLOCK)
    tl.store(out_ptr + flat, values, mask=flat < numel)


def dequantize_nf4_kernel(
    packed: torch.Tensor,
    absmax: torch.Tensor,
    code: torch.Tensor,
    shape: tuple[int, int],
    blocksize: int,
    dtype: torch.dtype,
) -> torch.Tensor:
    """The weight ``shape`` in ``dtype`` from its codes (``packed`` uint8) and its blocks' fp32 ``absmax``
    (``code``: the 16 fp32 NF4 values on the same device): one launch. On a GPU equal to
    :func:`kernels.qlora.nf4.dequantize_blocks` (the same products, rounded once to nearest); Triton's
    interpreter truncates fp32 to bf16 instead (fp16 it rounds), one unit in the last place at most."""
    n, k = shape
    out = torch.empty((n, k), device=packed.device, dtype=dtype)
    if n * k:
        _dequantize_kernel[(cdiv(packed.numel(), BLOCK),)](
            packed, absmax, code, out, n * k, BLOCKSIZE=blocksize, BLOCK=BLOCK
        )
    return out
