"""PEFT drop-in: a PEFT LoRA model runs the fused LoRA kernel (:func:`kernels.lora.linear.lora_linear`)
without leaving PEFT.

::

    model = get_peft_model(base, LoraConfig(r=16, lora_alpha=32, target_modules=["q_proj", "v_proj"]))
    report = use_fused_kernels(model)  # every eligible LoRA Linear now calls the fused kernel
    ...train, model.save_pretrained(path), model.merge_and_unload() as usual...
    use_peft_forward(model)           # back to PEFT's own forward

**How.** Each eligible ``peft.tuners.lora.Linear`` has its class switched to :class:`FusedLoraLinear`, a
subclass whose only change is ``forward``. Nothing else moves: the same module objects, parameters and
names, so PEFT's state dict, ``save_pretrained``/``from_pretrained``, ``merge``/``merge_and_unload``,
``add_adapter``/``set_adapter`` and ``disable_adapter`` work as before (they see a ``LoraLayer``). A model
loaded with ``PeftModel.from_pretrained`` is a fresh PEFT model: call :func:`use_fused_kernels` on it again.
(PEFT's own hook for custom layers, ``LoraConfig._register_custom_module``, is experimental and meant for
layer types PEFT does not support; ``nn.Linear`` it does, so the switch happens after PEFT built the layer.)

**The forward.** ``y = x Wᵀ + b + s·(x Aᵀ) Bᵀ`` for the first active adapter in one kernel call, the same
math as PEFT's ``base_layer(x) + lora_B(lora_A(dropout(x))) * scaling`` with dropout the identity; further
active adapters (PEFT allows several) are added after it as PEFT adds them. PEFT's own forward runs instead,
call by call, when adapters are disabled or merged, for mixed-batch ``adapter_names``, for extra arguments,
when x, W and the adapter differ in dtype or device, when the base weight is being trained, and for an
active adapter the kernel cannot take.

**What the kernel cannot take** (these adapters stay on PEFT's path; :func:`use_fused_kernels` lists them
once, in one warning and in its report): ``lora_dropout > 0`` (the kernel takes one x for the base
GEMM and the branch; dropout would feed the branch another x, which it does not take), DoRA and PEFT's
other LoRA variants, ``lora_bias`` (a bias on B), ``fan_in_fan_out`` (GPT-2's ``Conv1D`` layout), a base
layer that is not a plain ``nn.Linear`` (quantized layers), and LoRA layers that are not Linear (Embedding,
Conv).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any

import peft
import torch
from packaging.specifiers import SpecifierSet
from peft.tuners.lora import Linear as PeftLoraLinear
from peft.tuners.lora import LoraLayer
from torch import nn

from kernels.lora.linear import lora_linear

__all__ = [
    "FusedLoraLinear",
    "FusedReport",
    "adapter_problem",
    "check_peft_version",
    "use_fused_kernels",
    "use_peft_forward",
    "warn_kept",
]

PEFT_VERSIONS = ">=0.21,<0.22"  # written and tested against these (the GPU image has 0.21); others warn


def adapter_problem(layer: PeftLoraLinear, adapter: str, base_type: type = nn.Linear) -> str | None:
    """Why the fused kernel cannot run ``adapter`` of ``layer``, or None if it can; ``base_type``: the base
    layer the kernel takes (``nn.Linear`` here; :mod:`lecture_code.lora.peft_qlora` asks for its NF4 one)."""
    if type(layer.get_base_layer()) is not base_type:
        return f"base layer is {type(layer.get_base_layer()).__name__}, not {base_type.__name__}"
    if layer.fan_in_fan_out:
        return "fan_in_fan_out (Conv1D layout)"
    if adapter in layer.lora_variant:
        variant = type(layer.lora_variant[adapter]).__name__
        return "DoRA" if "Dora" in variant else f"LoRA variant {variant}"
    if layer.lora_bias.get(adapter, False):
        return "lora_bias (a bias on B)"
    dropout = layer.lora_dropout[adapter]
    if not isinstance(dropout, nn.Identity) and getattr(dropout, "p", 1.0) > 0:
        return f"lora_dropout = {dropout.p} > 0"
    return None


def _kernel_takes(layer: PeftLoraLinear, adapter: str, x: torch.Tensor) -> bool:
    """Per call: the adapter is eligible and x, W, A, B agree in dtype and device, W and b frozen."""
    if adapter_problem(layer, adapter) is not None:
        return False
    base = layer.get_base_layer()
    tensors = (base.weight, layer.lora_A[adapter].weight, layer.lora_B[adapter].weight)
    if any(t.dtype != x.dtype or t.device != x.device for t in tensors):
        return False
    frozen = not (base.weight.requires_grad or (base.bias is not None and base.bias.requires_grad))
    return frozen or not torch.is_grad_enabled()


class FusedLoraLinear(PeftLoraLinear):
    """PEFT's LoRA ``Linear`` whose forward calls the fused kernel (module docstring); all else is PEFT's.
    ``_kernel_takes`` and ``_kernel`` are the two places a subclass over another base changes
    (:class:`lecture_code.lora.peft_qlora.FusedQLoraLinear`)."""

    def _kernel_takes(self, adapter: str, x: torch.Tensor) -> bool:
        return _kernel_takes(self, adapter, x)

    def _kernel(self, x: torch.Tensor, adapter: str) -> torch.Tensor:
        """Base and ``adapter`` in one kernel call, the bias included."""
        base = self.get_base_layer()
        a, b, scale = self.lora_A[adapter].weight, self.lora_B[adapter].weight, float(self.scaling[adapter])
        return lora_linear(x, base.weight, a, b, scale, base.bias)

    def forward(self, x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        if args or kwargs or self.disable_adapters or self.merged:
            return super().forward(x, *args, **kwargs)
        active = [a for a in self.active_adapters if a in self.lora_A]
        if not active or not all(self._kernel_takes(a, x) for a in active):
            return super().forward(x)
        self._check_forward_args(x)
        first, *rest = active
        result = self._kernel(x, first)
        for adapter in rest:  # as PEFT adds each further active adapter
            result = result + self.lora_B[adapter](self.lora_A[adapter](x)) * self.scaling[adapter]
        return result

    def __repr__(self) -> str:
        return "fused_" + super().__repr__()


@dataclass
class FusedReport:
    """What :func:`use_fused_kernels` did: ``fused`` layer names; ``kept``: ``"name"`` or ``"name[adapter]"``
    → why it stays on PEFT's path."""

    fused: list[str] = field(default_factory=list)
    kept: dict[str, str] = field(default_factory=dict)


def check_peft_version(fn: str) -> None:
    """Warn (in ``fn``'s name) where the installed peft is not one this module was written against."""
    if not SpecifierSet(PEFT_VERSIONS).contains(peft.__version__):
        warnings.warn(
            f"{fn}: written for peft{PEFT_VERSIONS}, found {peft.__version__}: it reads PEFT's layer "
            "attributes (lora_A/B, scaling, lora_dropout, lora_variant, lora_bias); check the results",
            UserWarning,
            stacklevel=3,
        )


def warn_kept(fn: str, report: FusedReport) -> None:
    """One warning listing ``report.kept`` (the layers and adapters left on PEFT's path), if any."""
    if report.kept:
        lines = "\n".join(f"  {where}: {why}" for where, why in report.kept.items())
        warnings.warn(
            f"{fn}: {len(report.kept)} LoRA layer(s) or adapter(s) stay on PEFT's path:\n" + lines,
            UserWarning,
            stacklevel=3,
        )


def use_fused_kernels(model: nn.Module, warn: bool = True) -> FusedReport:
    """Switch every LoRA ``Linear`` of a PEFT ``model`` to :class:`FusedLoraLinear`, in place; returns the
    report, and (``warn``) lists once, in one warning, the layers and adapters left on PEFT's path."""
    check_peft_version("use_fused_kernels")
    report = FusedReport()
    for name, module in model.named_modules():
        if type(module) in (PeftLoraLinear, FusedLoraLinear):
            adapters = list(module.lora_A.keys())
            problems = {a: adapter_problem(module, a) for a in adapters}
            for adapter, problem in problems.items():
                if problem is not None:
                    report.kept[f"{name}[{adapter}]"] = problem
            if any(p is None for p in problems.values()):
                module.__class__ = FusedLoraLinear
                report.fused.append(name)
        elif isinstance(module, FusedLoraLinear):  # a subclass: already on a fused kernel of its own
            continue
        elif isinstance(module, LoraLayer):
            report.kept[name] = f"{type(module).__name__} LoRA layer (the kernel is for Linear layers)"
    if warn:
        warn_kept("use_fused_kernels", report)
    return report


def use_peft_forward(model: nn.Module) -> int:
    """Undo :func:`use_fused_kernels`: each :class:`FusedLoraLinear` back to PEFT's class; returns a count."""
    count = 0
    for module in model.modules():
        if type(module) is FusedLoraLinear:
            module.__class__ = PeftLoraLinear
            count += 1
    return count
