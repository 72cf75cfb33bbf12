"""PEFT with a 4-bit base: the LoRA Linear layers of a PEFT model get their frozen weight quantized to NF4
(:class:`lecture_code.lora.nf4_linear.NF4Linear`) and their forward on the fused QLoRA kernel
(:func:`kernels.qlora.linear.qlora_linear`, its default version), without leaving PEFT.

::

    model = get_peft_model(base, LoraConfig(r=16, lora_alpha=32, target_modules=["q_proj", "v_proj"]))
    report = use_qlora_kernels(model)  # each LoRA Linear: base weight → NF4, forward → the fused kernel
    ...train, model.save_pretrained(path) as usual (the adapters alone)...

**How.** Each ``peft.tuners.lora.Linear`` over a plain ``nn.Linear`` gets an :class:`NF4Linear` as its base
layer and its class switched to :class:`FusedQLoraLinear`, a subclass whose forward calls the fused kernel;
the adapters, their names and PEFT's adapter state dict are untouched, so ``save_pretrained``,
``add_adapter``/``set_adapter`` and ``disable_adapter`` work as before. The quantization is one way: keep the
16-bit model if you need it back. ``merge`` and ``merge_and_unload`` raise (an NF4 weight cannot take an
update in place); ``unload`` gives back a model whose linear layers are :class:`NF4Linear`.

**The forward.** As :mod:`lecture_code.lora.peft_kernels`' (the same conditions, from
:func:`~lecture_code.lora.peft_kernels.adapter_problem`): the first active adapter in the kernel call, the
bias after, further active adapters as PEFT adds them; PEFT's own forward, over the NF4 base (W dequantized,
then ``F.linear``), where the kernel cannot take the call (``lora_dropout > 0``, DoRA, ``lora_bias``, mixed
dtypes, extra arguments, disabled adapters). Every quantized layer is listed in the report's ``fused``;
adapters that stay on PEFT's forward, with the reason, in its ``kept``.
"""

from __future__ import annotations

from typing import Any

import torch
from peft.tuners.lora import Linear as PeftLoraLinear
from peft.tuners.lora import LoraLayer
from torch import nn

from kernels.qlora.linear import qlora_linear
from lecture_code.lora.nf4_linear import NF4Linear
from lecture_code.lora.peft_kernels import (
    FusedLoraLinear,
    FusedReport,
    adapter_problem,
    check_peft_version,
    warn_kept,
)

__all__ = ["FusedQLoraLinear", "use_qlora_kernels"]


def _kernel_takes(layer: PeftLoraLinear, adapter: str, x: torch.Tensor) -> bool:
    """Per call: the adapter is eligible and x, A, B (and the base's bias) agree in dtype and device, the NF4
    base on x's device."""
    if adapter_problem(layer, adapter, base_type=NF4Linear) is not None:
        return False
    base = layer.get_base_layer()
    tensors = (layer.lora_A[adapter].weight, layer.lora_B[adapter].weight)
    tensors += () if base.bias is None else (base.bias,)
    return base.packed.device == x.device and all(
        t.dtype == x.dtype and t.device == x.device for t in tensors
    )


class FusedQLoraLinear(FusedLoraLinear):
    """PEFT's LoRA ``Linear`` over an :class:`NF4Linear` base, its forward on the fused QLoRA kernel (module
    docstring): :class:`~lecture_code.lora.peft_kernels.FusedLoraLinear`'s forward with this kernel."""

    def _kernel_takes(self, adapter: str, x: torch.Tensor) -> bool:
        return _kernel_takes(self, adapter, x)

    def _kernel(self, x: torch.Tensor, adapter: str) -> torch.Tensor:
        base = self.get_base_layer()
        a, b, scale = self.lora_A[adapter].weight, self.lora_B[adapter].weight, float(self.scaling[adapter])
        y = qlora_linear(x, base.weight_nf4, a, b, scale)
        return y if base.bias is None else y + base.bias

    def merge(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError(
            "FusedQLoraLinear.merge: the base weight is stored in NF4 and cannot take the adapter's update "
            "in place; merge on the 16-bit model, or keep the adapter separate"
        )


def use_qlora_kernels(model: nn.Module, blocksize: int = 64, warn: bool = True) -> FusedReport:
    """Quantize the base weight of every LoRA ``Linear`` of a PEFT ``model`` over an ``nn.Linear`` to NF4
    and switch the layer to :class:`FusedQLoraLinear`, in place; returns the report, and (``warn``) lists
    once, in one warning, the layers and adapters that run PEFT's forward."""
    check_peft_version("use_qlora_kernels")
    report = FusedReport()
    for name, module in model.named_modules():
        if type(module) is PeftLoraLinear and type(module.base_layer) is nn.Linear:
            module.base_layer = NF4Linear(module.base_layer, blocksize)
            module.__class__ = FusedQLoraLinear
            report.fused.append(name)
            for adapter in module.lora_A:
                problem = adapter_problem(module, adapter, base_type=NF4Linear)
                if problem is not None:
                    report.kept[f"{name}[{adapter}]"] = problem
        elif isinstance(module, LoraLayer) and type(module) is not FusedQLoraLinear:
            base = type(module.get_base_layer()).__name__
            report.kept[name] = f"{type(module).__name__} over {base}: not quantized"
    if warn:
        warn_kept("use_qlora_kernels", report)
    return report
