"""``NF4Linear``: a frozen linear layer whose weight is stored in NF4 (4 bits a value): the base of QLoRA.

The ``nn.Linear`` it replaces is quantized once (:func:`kernels.qlora.nf4.quantize_nf4`) and its 16- or
32-bit weight dropped: the module keeps the codes and scales as buffers (so ``state_dict``, ``.to(device)``
and checkpoints carry them), ≈ 4.13 bits a parameter, and its bias frozen. Its forward dequantizes W to x's
dtype and runs ``F.linear``; :class:`lecture_code.lora.qlora_layer.QLoRALinear` adds a trainable low-rank
update on the fused kernels, and :mod:`lecture_code.lora.peft_qlora` puts it under a PEFT LoRA layer.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from kernels.qlora.nf4 import NF4Weight, dequantize_nf4, quantize_nf4

__all__ = ["NF4Linear"]

# The fp32 scales are kept as int32 views of their bits: ``module.to(torch.bfloat16)`` converts floating
# buffers, and scales rounded to 8 bits of mantissa would move every weight; an integer buffer only changes
# device.
_BUFFERS = ("packed", "absmax_codes", "absmax_scales", "absmax_offset")
_AS_BITS = ("absmax_scales", "absmax_offset")


class NF4Linear(nn.Module):
    """``x Wᵀ + b`` with W frozen in NF4 (the module docstring).

    Args:
        base: the linear layer to quantize: its weight becomes NF4 and is dropped, its bias frozen.
        blocksize: values per absmax (:data:`kernels.qlora.nf4.BLOCKSIZES`; 64, QLoRA's, by default).
    """

    def __init__(self, base: nn.Linear, blocksize: int = 64):
        super().__init__()
        if not isinstance(base, nn.Linear):
            raise TypeError(f"{type(self).__name__} wraps an nn.Linear, got {type(base).__name__}")
        q = quantize_nf4(base.weight.detach(), blocksize)
        for name in _BUFFERS:
            t = getattr(q, name)
            self.register_buffer(name, t.view(torch.int32) if name in _AS_BITS else t)
        self.shape, self.dtype, self.blocksize = q.shape, q.dtype, q.blocksize
        self.out_features, self.in_features = q.shape
        self.bias = (
            None if base.bias is None else nn.Parameter(base.bias.detach().clone(), requires_grad=False)
        )

    @property
    def weight_nf4(self) -> NF4Weight:
        """The frozen weight as an :class:`NF4Weight` over this module's buffers (on its device)."""
        parts = [
            getattr(self, n).view(torch.float32) if n in _AS_BITS else getattr(self, n) for n in _BUFFERS
        ]
        return NF4Weight(*parts, self.shape, self.dtype, self.blocksize)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x ``[..., K]`` → ``[..., N]``: W dequantized to x's dtype, then ``F.linear``."""
        return F.linear(x, dequantize_nf4(self.weight_nf4, x.dtype), self.bias)

    def bits_per_parameter(self) -> float:
        """Stored bits of the frozen weight per parameter (codes, scales, offset)."""
        return self.weight_nf4.bits_per_parameter()

    def extra_repr(self) -> str:
        n, k = self.shape
        return f"in_features={k}, out_features={n}, blocksize={self.blocksize}, bias={self.bias is not None}"
