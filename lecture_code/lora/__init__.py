"""LoRA for the lecture's models: ``LoRALinear``, ``apply_lora``, merging, adapter files, the DLRM case study.

- :mod:`.layer`: ``LoRALinear`` (backend ``"eager"`` | ``"fused"``, the latter calling
  ``kernels.lora.linear``);
- :mod:`.qlora_layer`: ``QLoRALinear``, the frozen weight in NF4 (4 bits a value), on
  ``kernels.qlora.linear``; :mod:`.qlora_adaptation`: a short fine-tuning run on an NF4 base against the
  16-bit base;
- :mod:`.apply`: ``apply_lora`` (PEFT-style ``target_modules``), ``merge_lora``/``unmerge_lora``,
  ``set_backend``, ``parameter_counts``;
- :mod:`.adapter_io`: adapter-only ``save_adapter``/``load_adapter`` (A, B and their config, no base);
- :mod:`.original_pattern`: the original lecture's LoRA mistakes, re-created small to show what they do;
- :mod:`.dlrm_adaptation`: adapt a trained DLRM to a shifted day with LoRA (``python -m lecture_code.lora``);
- :mod:`.multi_tenant`: one adapter per market on DLRM's over-arch, a mixed batch scored in one pass
  (``score_mixed``, via ``kernels.multi_lora.shrink_expand``) against one merged model per market
  (``score_per_market``);
- :mod:`.exercises`: the name notebook 07 imports its first checker by (now in ``lecture_code.exercises``);
- :mod:`.nf4_linear`: ``NF4Linear``, a frozen linear layer stored in NF4 (the base of ``QLoRALinear``);
- :mod:`.peft_kernels`: ``use_fused_kernels(peft_model)``, the PEFT drop-in (needs ``peft``, imported on first
  use of the name); :mod:`.peft_qlora`: ``use_qlora_kernels(peft_model)``, the same with each base in NF4 on
  the fused QLoRA kernel.
"""

from lecture_code.lora.adapter_io import (
    adapter_config,
    adapter_state_dict,
    load_adapter,
    save_adapter,
)
from lecture_code.lora.apply import (
    ParameterCount,
    apply_lora,
    linear_names,
    lora_modules,
    merge_lora,
    parameter_counts,
    set_backend,
    unmerge_lora,
)
from lecture_code.lora.layer import BACKENDS, LoRALinear
from lecture_code.lora.multi_tenant import MarketAdapters, score_mixed, score_per_market
from lecture_code.lora.nf4_linear import NF4Linear
from lecture_code.lora.qlora_layer import QLoRALinear

__all__ = [
    "BACKENDS",
    "LoRALinear",
    "MarketAdapters",
    "NF4Linear",
    "ParameterCount",
    "QLoRALinear",
    "adapter_config",
    "adapter_state_dict",
    "apply_lora",
    "linear_names",
    "load_adapter",
    "lora_modules",
    "merge_lora",
    "parameter_counts",
    "save_adapter",
    "score_mixed",
    "score_per_market",
    "set_backend",
    "unmerge_lora",
]


def __getattr__(name: str):
    # The PEFT drop-in imports peft (and transformers: seconds): only when its names are asked for.
    if name in ("use_fused_kernels", "use_peft_forward"):
        from lecture_code.lora import peft_kernels

        return getattr(peft_kernels, name)
    if name == "use_qlora_kernels":
        from lecture_code.lora import peft_qlora

        return peft_qlora.use_qlora_kernels
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
