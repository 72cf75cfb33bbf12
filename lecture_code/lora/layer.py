"""``LoRALinear``: a frozen ``nn.Linear`` plus a trainable low-rank update, PEFT's LoRA done by hand.

Notation as in :mod:`kernels.lora.linear`: x [..., K], frozen base W [N, K] and bias b [N], adapter A [r, K]
and B [N, r], scale s = alpha / r (``use_rslora``: alpha / √r, PEFT's rank-stabilised variant)::

    y = x Wᵀ + b + s · (dropout(x) Aᵀ) Bᵀ

Interchangeable with PEFT's ``LoraLayer`` for a linear layer: the same layout (PEFT's ``lora_A.weight`` is
[r, K], ``lora_B.weight`` is [N, r]), the same initialisation (A ~ ``kaiming_uniform_(a=√5)``, i.e.
U(−1/√K, 1/√K); B = 0, so a fresh adapter leaves the model's output unchanged *exactly*), the same scale,
and the same eager order of operations (``lora_B(lora_A(dropout(x))) * scaling`` added to the base output).

**What is trained.** A and B are ``nn.Parameter`` attributes, so ``module.parameters()`` (and any optimizer
built from it) sees them. The base weight and bias are set to ``requires_grad=False`` on construction:
frozen for real, not by a flag on the module (``module.requires_grad = False`` sets a plain Python
attribute and freezes nothing).

**Backends.** ``"eager"``: the PEFT computation in PyTorch ops. ``"fused"``: one call to
:func:`kernels.lora.linear.lora_linear` (forward and backward kernels; on a CPU they run in Triton's
interpreter). Which kernel of the ladder runs depends on the shape: :meth:`LoRALinear.fused_path` says which
and why.

**Dropout.** PEFT applies ``lora_dropout`` to the branch's input only: the base sees x, the branch sees
dropout(x). The fused kernels take one x for both: v3's producer programs load it for the shrink on their
own, v2 and v1 make a pass over it of their own, but none takes a second, dropped-out x or draws a dropout
mask in the shrink's loads (and again for dA in the backward). So ``backend="fused"`` with ``dropout > 0`` is
refused at construction, with this reason and the way out in the message (:func:`_check_backend`). PEFT's
default ``lora_dropout`` is 0.0; configs copied from tutorials often set 0.05 or 0.1 — those train with
``backend="eager"``.

**Merging.** :meth:`merge` adds s·B A into W (one forward GEMM instead of three, for inference),
:meth:`unmerge` subtracts it again; while merged the forward is the base layer alone.
"""

from __future__ import annotations

import math
import numbers

import torch
import torch.nn.functional as F
from torch import nn

from kernels.lora.linear import choose_version, lora_linear  # importing kernels first decides the Triton mode

__all__ = ["BACKENDS", "LoRALinear"]

BACKENDS = ("eager", "fused")


def _check_backend(backend: str, dropout: float) -> None:
    if backend not in BACKENDS:
        raise ValueError(f"LoRALinear: backend={backend!r} is not one of {BACKENDS}")
    if backend == "fused" and dropout > 0:
        raise ValueError(
            f"LoRALinear: backend='fused' needs dropout=0, got dropout={dropout}. The fused kernels take one "
            "x for both the base GEMM and the LoRA branch and draw no dropout mask, but LoRA dropout (as in "
            "PEFT's lora_dropout) feeds the branch a different, dropped-out x. Use backend='eager' to train "
            "with dropout, or dropout=0 (PEFT's default) for the fused kernels."
        )


class LoRALinear(nn.Module):
    """``base(x) + s·(dropout(x) Aᵀ) Bᵀ`` around a frozen ``nn.Linear`` (see the module docstring).

    Args:
        base: the linear layer to adapt; its weight and bias are frozen in place (``requires_grad=False``).
        r: adapter rank, ≥ 1.
        alpha: scale numerator: s = alpha / r (PEFT's ``lora_alpha``); default ``r`` (s = 1).
        dropout: probability of PEFT's ``lora_dropout`` on the branch input (eager backend only).
        backend: ``"eager"`` or ``"fused"``.
        use_rslora: s = alpha / √r (PEFT's ``use_rslora``).

    Attributes: ``base``, ``lora_a`` [r, K], ``lora_b`` [N, r] (parameters), ``scale``, ``merged``.
    """

    def __init__(
        self,
        base: nn.Linear,
        r: int,
        alpha: float | None = None,
        dropout: float = 0.0,
        backend: str = "eager",
        use_rslora: bool = False,
    ):
        super().__init__()
        if not isinstance(base, nn.Linear):
            raise TypeError(f"LoRALinear wraps an nn.Linear, got {type(base).__name__}")
        if isinstance(r, bool) or not isinstance(r, numbers.Integral) or r < 1:
            raise ValueError(f"LoRALinear: r must be an int >= 1, got {r!r}")
        alpha = r if alpha is None else alpha
        if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real) or not math.isfinite(alpha):
            raise ValueError(f"LoRALinear: alpha must be a finite number, got {alpha!r}")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"LoRALinear: dropout must be in [0, 1), got {dropout}")
        _check_backend(backend, dropout)
        self.base = base
        base.weight.requires_grad_(False)
        if base.bias is not None:
            base.bias.requires_grad_(False)
        n, k = base.weight.shape
        factory = {"device": base.weight.device, "dtype": base.weight.dtype}
        self.lora_a = nn.Parameter(torch.empty(int(r), k, **factory))
        self.lora_b = nn.Parameter(torch.empty(n, int(r), **factory))
        self.r, self.alpha, self.use_rslora = int(r), float(alpha), bool(use_rslora)
        self.scale = self.alpha / (math.sqrt(self.r) if use_rslora else self.r)
        self.dropout_p = float(dropout)
        self.dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.backend = backend
        self.merged = False
        self.reset_lora_parameters()

    @property
    def in_features(self) -> int:
        return self.base.in_features

    @property
    def out_features(self) -> int:
        return self.base.out_features

    @torch.no_grad()
    def reset_lora_parameters(self) -> None:
        """PEFT's initialisation: A ~ kaiming_uniform_(a=√5) = U(−1/√K, 1/√K), B = 0."""
        nn.init.kaiming_uniform_(self.lora_a, a=math.sqrt(5))
        nn.init.zeros_(self.lora_b)

    def set_backend(self, backend: str) -> LoRALinear:
        """Switch between ``"eager"`` and ``"fused"`` (same parameters, same results within rounding)."""
        _check_backend(backend, self.dropout_p)
        self.backend = backend
        return self

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x ``[..., K]`` → ``[..., N]``."""
        if self.merged:
            return self.base(x)
        if self.backend == "fused":
            return lora_linear(x, self.base.weight, self.lora_a, self.lora_b, self.scale, self.base.bias)
        return self.base(x) + F.linear(F.linear(self.dropout(x), self.lora_a), self.lora_b) * self.scale

    @torch.no_grad()
    def delta_weight(self) -> torch.Tensor:
        """s·B A ``[N, K]`` in the base dtype (computed in fp32 or wider): what :meth:`merge` adds."""
        compute = torch.promote_types(self.lora_b.dtype, torch.float32)
        delta = (self.lora_b.to(compute) @ self.lora_a.to(compute)) * self.scale
        return delta.to(self.base.weight.dtype)

    @torch.no_grad()
    def merge(self) -> None:
        """W += s·B A; the forward is then the base layer alone (inference). Raises if already merged."""
        if self.merged:
            raise RuntimeError("LoRALinear.merge: the adapter is already merged into the base weight")
        self.base.weight.add_(self.delta_weight())
        self.merged = True

    @torch.no_grad()
    def unmerge(self) -> None:
        """W −= s·B A: undo :meth:`merge` (exact up to one rounding of W per merge/unmerge pair)."""
        if not self.merged:
            raise RuntimeError("LoRALinear.unmerge: the adapter is not merged")
        self.base.weight.sub_(self.delta_weight())
        self.merged = False

    def fused_path(self, rows: int = 1) -> tuple[str, str | None]:
        """``(version, reason)``: which kernel of :mod:`kernels.lora.linear`'s ladder the fused backend runs
        for an input of ``rows`` rows on this layer's device and dtype, and why it is not the fast one (or
        None)."""
        x = torch.empty(rows, self.in_features, device=self.base.weight.device, dtype=self.base.weight.dtype)
        return choose_version(x, self.base.weight, self.lora_b)

    def extra_repr(self) -> str:
        rs = ", rslora" if self.use_rslora else ""
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, r={self.r}, "
            f"alpha={self.alpha:g}, scale={self.scale:g}{rs}, dropout={self.dropout_p:g}, "
            f"backend={self.backend!r}, merged={self.merged}"
        )
