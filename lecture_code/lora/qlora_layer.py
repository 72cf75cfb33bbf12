"""``QLoRALinear``: a linear layer whose frozen weight is stored in NF4 (4 bits a value), plus a trainable
low-rank update: QLoRA's layer, with the fused kernels of :mod:`kernels.qlora.linear`.

Notation as in :mod:`lecture_code.lora.layer`: x [..., K], frozen base W [N, K] (now NF4) and bias b [N],
adapter A [r, K] and B [N, r], scale s = alpha / r::

    y = x Wᵀ + b + s · (x Aᵀ) Bᵀ

The base ``nn.Linear`` is quantized once, at construction, as :class:`lecture_code.lora.nf4_linear.NF4Linear`
does (this class is one, with adapters): its 16- or 32-bit weight is dropped, the codes and scales kept as
buffers, ≈ 4.13 bits a parameter instead of 16 or 32. A and B are initialised as PEFT does
(A ~ U(−1/√K, 1/√K), B = 0) and live in the base weight's dtype.

**Backends.** ``"fused"``: one call to :func:`kernels.qlora.linear.qlora_linear` with the layer's ``version``
(None: the op's default, measured fastest; ``"pairs"`` or ``"elements"``: W dequantized on chip in the forward
and in the backward's dX GEMM), the bias added after. ``"eager"``: W dequantized to the compute
dtype by :func:`kernels.qlora.nf4.dequantize_nf4`, then PEFT's order in torch ops: the pass the fused kernel
removes. No dropout (the fused kernel takes one x for the base and the branch, as the bf16 one does).
"""

from __future__ import annotations

import math
import numbers

import torch
import torch.nn.functional as F
from torch import nn

from kernels.qlora.linear import VERSIONS, qlora_linear  # importing kernels first decides the Triton mode
from kernels.qlora.nf4 import dequantize_nf4
from lecture_code.lora.nf4_linear import NF4Linear

__all__ = ["QLoRALinear"]


class QLoRALinear(NF4Linear):
    """``x Wᵀ + b + s·(x Aᵀ) Bᵀ`` with W frozen in NF4 (see the module docstring): an
    :class:`~lecture_code.lora.nf4_linear.NF4Linear` with a trainable low-rank update.

    Args:
        base: the linear layer to adapt: its weight is quantized to NF4 and dropped, its bias frozen.
        r: adapter rank, ≥ 1. alpha: s = alpha / r (default r). backend: ``"fused"`` or ``"eager"``.
        version: the fused backend's ``qlora_linear`` version (:data:`kernels.qlora.linear.VERSIONS`), None
        for its default.
    """

    def __init__(
        self,
        base: nn.Linear,
        r: int,
        alpha: float | None = None,
        backend: str = "fused",
        version: str | None = None,
    ):
        if not isinstance(base, nn.Linear):
            raise TypeError(f"QLoRALinear wraps an nn.Linear, got {type(base).__name__}")
        if isinstance(r, bool) or not isinstance(r, numbers.Integral) or r < 1:
            raise ValueError(f"QLoRALinear: r must be an int >= 1, got {r!r}")
        if backend not in ("fused", "eager"):
            raise ValueError(f"QLoRALinear: backend={backend!r} is not one of ('fused', 'eager')")
        if version is not None and version not in VERSIONS:
            raise ValueError(f"QLoRALinear: version={version!r} is not one of {VERSIONS} (or None)")
        super().__init__(base)
        alpha = r if alpha is None else alpha
        weight = base.weight
        n, k = weight.shape
        self.lora_a = nn.Parameter(torch.empty(int(r), k, device=weight.device, dtype=weight.dtype))
        self.lora_b = nn.Parameter(torch.zeros(n, int(r), device=weight.device, dtype=weight.dtype))
        nn.init.kaiming_uniform_(self.lora_a, a=math.sqrt(5))
        self.r, self.scale, self.backend, self.version = int(r), float(alpha) / int(r), backend, version

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x ``[..., K]`` → ``[..., N]``."""
        if self.backend == "fused":
            y = qlora_linear(x, self.weight_nf4, self.lora_a, self.lora_b, self.scale, version=self.version)
            return y if self.bias is None else y + self.bias
        w = dequantize_nf4(self.weight_nf4, x.dtype)
        return F.linear(x, w, self.bias) + F.linear(F.linear(x, self.lora_a), self.lora_b) * self.scale

    def extra_repr(self) -> str:
        n, k = self.shape
        version = "" if self.version is None else f", version={self.version!r}"
        head = f"in_features={k}, out_features={n}, r={self.r}, scale={self.scale:g}"
        return f"{head}, backend={self.backend!r}{version}"
