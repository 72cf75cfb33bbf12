"""NF4, the 4-bit weight format of QLoRA, with its double-quantized scales: quantize and dequantize in pure
torch, the reference every fused QLoRA kernel is checked against.

The format (Dettmers et al., "QLoRA: Efficient Finetuning of Quantized LLMs", 2023; the layout bitsandbytes'
``quantize_4bit(w, quant_type="nf4", compress_statistics=True)`` stores), for a weight ``w`` ``[N, K]``:

- ``w`` flattened row-major and cut into blocks of ``blocksize`` (64) consecutive values; where K is not a
  multiple of 64 a block runs on into the next row; the last block is padded with zeros.
- Per block its absmax ``a = max |w|``; each value becomes the index (0–15) of the nearest of the 16 code
  values :data:`NF4_CODE` to ``w / a``. The code: quantiles of a standard normal, 8 for the positive half
  and 7 for the negative, with an exact 0, scaled to ±1 (:func:`normal_code`).
- Two indices per byte, the even element in the high nibble.
- Double quantization: the absmaxes (fp32, one per 64 values: 0.5 bit per parameter) less their mean
  (``absmax_offset``) are themselves quantized, in blocks of 256, to 8-bit indices into the signed dynamic map
  (:func:`dynamic_code`) with an fp32 scale per 256 blocks.

Bits per parameter: 4 + 8/64 + 32/(64·256) = 4.127 (:meth:`NF4Weight.bits_per_parameter`).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch

__all__ = [
    "NF4_CODE",
    "NF4Weight",
    "dequantize_blocks",
    "dequantize_nf4",
    "dynamic_code",
    "normal_code",
    "quantize_nf4",
]

BLOCKSIZES = (64, 128, 256, 512, 1024, 2048, 4096)
SCALE_BLOCK = 256  # absmaxes per fp32 scale in the double quantization


def normal_code(offset: float = 0.9677083) -> torch.Tensor:
    """The 16 NF4 values from their definition: quantiles of N(0, 1) at 8 evenly spaced probabilities from
    ``offset`` down to 0.5 (the positive half, 0.5 itself dropped), at 7 for the negative half, plus 0;
    divided by the largest, sorted. ``offset``: the mean of 1 − 1/(2·15) and 1 − 1/(2·16), the paper's
    choice (probability 1 would put the outermost quantile at infinity)."""
    positive = torch.special.ndtri(torch.linspace(offset, 0.5, 9, dtype=torch.float64)[:-1])
    negative = -torch.special.ndtri(torch.linspace(offset, 0.5, 8, dtype=torch.float64)[:-1])
    values = torch.cat([positive, negative, torch.zeros(1, dtype=torch.float64)])
    return (values / values.max()).sort().values.float()


def dynamic_code() -> torch.Tensor:
    """The signed 8-bit dynamic map (256 sorted values in [-1, 1]) the double quantization indexes: for
    each decade 10⁻⁶ … 10⁰ (i = 0 … 6), the midpoints of 2^i + 1 evenly spaced points in [0.1, 1] scaled to
    that decade, with both signs (254 values), plus 0 and 1 (Dettmers, "8-Bit Approximations for
    Parallelism in Deep Learning", 2016)."""
    values = [0.0, 1.0]
    for i in range(7):
        edges = torch.linspace(0.1, 1, 2**i + 1, dtype=torch.float64)
        mids = ((edges[:-1] + edges[1:]) / 2 * 10.0 ** (i - 6)).tolist()
        values += mids + [-m for m in mids]
    return torch.tensor(sorted(values), dtype=torch.float32)


NF4_CODE = normal_code()
DYNAMIC_CODE = dynamic_code()


@functools.cache
def tables_on(device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """:data:`NF4_CODE` and :data:`DYNAMIC_CODE` on ``device``, copied once per device (a copy from the CPU
    inside a CUDA-graph capture would fail)."""
    return NF4_CODE.to(device), DYNAMIC_CODE.to(device)


def _tables(device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`tables_on`, or under torch.compile a plain copy (the compiled graph holds it; dynamo would trace
    through the cache and warn)."""
    if torch.compiler.is_compiling():
        return NF4_CODE.to(device), DYNAMIC_CODE.to(device)
    return tables_on(device)


def _nearest(x: torch.Tensor, code: torch.Tensor) -> torch.Tensor:
    """Index of the nearest entry of the sorted ``code`` for each value of ``x`` (a tie goes to the lower)."""
    mids = (code[1:] + code[:-1]) / 2
    return torch.bucketize(x, mids.to(x.device)).to(torch.uint8)


def _blocks(flat: torch.Tensor, size: int) -> torch.Tensor:
    """``flat`` zero-padded to a multiple of ``size``, as ``[blocks, size]``."""
    pad = -flat.numel() % size
    return torch.nn.functional.pad(flat, (0, pad)).view(-1, size)


@dataclass(frozen=True, eq=False)
class NF4Weight:
    """A weight ``[N, K]`` in NF4 (the module docstring): what :func:`quantize_nf4` returns.

    packed: uint8 ``[blocks · blocksize / 2]``, two 4-bit indices per byte, the even element high.
    absmax_codes: uint8 ``[blocks]``, indices into :func:`dynamic_code`.
    absmax_scales: fp32 ``[ceil(blocks / 256)]``; absmax_offset: fp32 ``[]``: a block's absmax is
    ``dynamic_code()[absmax_codes[b]] · absmax_scales[b // 256] + absmax_offset``.
    shape: ``(N, K)``; dtype: what :func:`dequantize_nf4` returns by default (the weight's own dtype).
    """

    packed: torch.Tensor
    absmax_codes: torch.Tensor
    absmax_scales: torch.Tensor
    absmax_offset: torch.Tensor
    shape: tuple[int, int]
    dtype: torch.dtype
    blocksize: int = 64

    def __post_init__(self):
        _check_blocksize(self.blocksize)
        blocks = math.ceil(self.shape[0] * self.shape[1] / self.blocksize)
        expect = {
            "packed": (torch.uint8, (blocks * self.blocksize // 2,)),
            "absmax_codes": (torch.uint8, (blocks,)),
            "absmax_scales": (torch.float32, (math.ceil(blocks / SCALE_BLOCK),)),
            "absmax_offset": (torch.float32, ()),
        }
        for name, (dtype, shape) in expect.items():
            got = getattr(self, name)
            if got.dtype != dtype or tuple(got.shape) != shape:
                raise ValueError(
                    f"NF4Weight.{name}: expected {dtype} of shape {shape} for a "
                    f"{self.shape[0]}x{self.shape[1]} weight in blocks of {self.blocksize}, "
                    f"got {got.dtype} of shape {tuple(got.shape)}"
                )

    def bits_per_parameter(self) -> float:
        """Stored bits over the weight's N·K parameters (padding, codes, scales and offset counted)."""
        stored = (self.packed, self.absmax_codes, self.absmax_scales, self.absmax_offset)
        return 8 * sum(t.numel() * t.element_size() for t in stored) / (self.shape[0] * self.shape[1])

    def absmax(self) -> torch.Tensor:
        """Each block's absmax, fp32 ``[blocks]``, as the double quantization gives it back."""
        codes = _tables(self.absmax_codes.device)[1][self.absmax_codes.long()]
        scales = self.absmax_scales.repeat_interleave(SCALE_BLOCK)[: codes.numel()]
        return codes * scales + self.absmax_offset


def _check_blocksize(blocksize: int) -> None:
    if blocksize not in BLOCKSIZES:
        raise ValueError(
            f"blocksize: expected one of {BLOCKSIZES} (bitsandbytes' NF4 sizes), got {blocksize}"
        )


def quantize_nf4(weight: torch.Tensor, blocksize: int = 64) -> NF4Weight:
    """``weight`` ``[N, K]`` (fp32, fp16 or bf16) in NF4 with double-quantized absmaxes (the module
    docstring)."""
    _check_blocksize(blocksize)
    if weight.dim() != 2 or weight.numel() == 0:
        raise ValueError(f"weight: expected a non-empty 2-D [N, K] tensor, got shape {tuple(weight.shape)}")
    if weight.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise ValueError(f"weight: expected float32, float16 or bfloat16, got {weight.dtype}")
    blocks = _blocks(weight.detach().float().reshape(-1), blocksize)
    absmax = blocks.abs().amax(dim=1)
    scaled = blocks / torch.where(absmax > 0, absmax, 1.0)[:, None]
    index = _nearest(scaled, NF4_CODE).view(-1, 2)
    packed = (index[:, 0] << 4) | index[:, 1]
    offset = absmax.mean()
    centred = _blocks(absmax - offset, SCALE_BLOCK)
    scales = centred.abs().amax(dim=1)
    codes = _nearest(centred / torch.where(scales > 0, scales, 1.0)[:, None], DYNAMIC_CODE)
    return NF4Weight(
        packed,
        codes.reshape(-1)[: absmax.numel()],
        scales,
        offset,
        tuple(weight.shape),
        weight.dtype,
        blocksize,
    )


def dequantize_nf4(q: NF4Weight, dtype: torch.dtype | None = None) -> torch.Tensor:
    """The weight ``[N, K]`` back from NF4, in ``dtype`` (default: the quantized weight's own)."""
    return dequantize_blocks(q.packed, q.absmax(), q.shape, q.blocksize, dtype or q.dtype)


def dequantize_blocks(
    packed: torch.Tensor, absmax: torch.Tensor, shape: tuple[int, int], blocksize: int, dtype: torch.dtype
) -> torch.Tensor:
    """The weight ``shape`` in ``dtype`` from its 4-bit codes (``packed``) and its blocks' fp32 ``absmax``
    (the double quantization already undone)."""
    index = torch.stack([packed >> 4, packed & 0xF], dim=1).view(-1, blocksize).long()
    values = _tables(packed.device)[0][index] * absmax[:, None]
    n, k = shape
    return values.reshape(-1)[: n * k].view(n, k).to(dtype)
