"""NeMo Automodel's Triton LoRA linear (``TritonLinearLoRA``, what its ``use_triton`` PEFT config selects),
loaded from the files :mod:`benchmarks.fetch_peers` extracted (``benchmarks.peers.NEMO``).

Its forward is NeMo's own: the frozen ``F.linear``, then ``apply_memory_efficient_lora`` →
``LoRATritonFunction``, whose forward runs ``lora_forward_kernel`` (x·Aᵀ·Bᵀ fused, scaled) and whose backward
runs ``lora_da_dx_kernel`` (dX and dY·B) and ``lora_db_kernel`` (A·Xᵀ), finished by two ``torch.matmul``.
``lora.py`` imports NeMo's MoE-expert LoRA classes at module level; the benchmarks never build those, and
their modules pull in NeMo's MoE stack, so four modules are stubbed with empty placeholder classes
(:data:`STUBS`, used by ``isinstance`` checks only). Everything else runs from NeMo's files as they are
(one fetch-time patch, ``benchmarks.peers.NEMO.patches``). Under the Triton interpreter (a CPU: no GPU to time
configs on) each autotuned kernel keeps only the first of its configs.
"""

from __future__ import annotations

import functools
import importlib
import types
from pathlib import Path

import torch
import triton

from benchmarks import peers
from benchmarks.peers import NEMO, importing_from
from kernels import runtime

PACKAGES = (
    "nemo_automodel",
    "nemo_automodel.components",
    "nemo_automodel.components._peft",
    "nemo_automodel.components.moe",
    "nemo_automodel.shared",
)
STUBS = {
    "nemo_automodel.components._peft.lora_experts": ("GroupedExpertsLoRA", "GroupedExpertsDeepEPLoRA"),
    "nemo_automodel.components._peft.lora_experts_mxfp4": (
        "GroupedExpertsLoRAMXFP4",
        "GroupedExpertsDeepEPLoRAMXFP4",
    ),
    "nemo_automodel.components.moe.layers": ("GroupedExperts", "GroupedExpertsDeepEP", "GroupedExpertsTE"),
    "nemo_automodel.components.moe.mok_experts": ("GroupedExpertsMoK",),
}


def _placeholder(name: str) -> type:
    return type(name, (), {"__doc__": "stand-in: the benchmarks build no MoE experts (benchmarks.peer_nemo)"})


@functools.cache
def load(root: Path | None = None) -> tuple[types.ModuleType | None, str | None]:
    """NeMo's ``lora`` module (with ``lora_kernel`` as its ``kernels`` attribute), or None and the reason it
    cannot be loaded (files not fetched, an import that fails here)."""
    root = root or NEMO.folder
    why = NEMO.missing(root)
    if why is not None:
        return None, why
    stubs = {module: {n: _placeholder(n) for n in names} for module, names in STUBS.items()}
    try:
        with importing_from(root, PACKAGES, stubs):
            lora = importlib.import_module("nemo_automodel.components._peft.lora")
            lora.kernels = importlib.import_module("nemo_automodel.components._peft.lora_kernel")
        if runtime.interpreting():
            first_config_only(lora.kernels)
    except Exception as e:  # noqa: BLE001 — any failure is a reason for the benchmark's row, not a crash
        return None, f"{NEMO.name}=={NEMO.version} does not import here ({type(e).__name__}: {e})"
    return lora, None


def first_config_only(module: types.ModuleType) -> None:
    """Every ``triton.autotune`` kernel of ``module`` keeps only its first config (tuning times configs on a
    GPU; the interpreter has none)."""
    for kernel in vars(module).values():
        configs = getattr(kernel, "configs", None)  # an Autotuner's list of triton.Config
        if isinstance(configs, list) and configs and isinstance(configs[0], triton.Config):
            kernel.configs = configs[:1]


def layer(lora: types.ModuleType, w: torch.Tensor, a: torch.Tensor, b: torch.Tensor, alpha: float):
    """NeMo's ``TritonLinearLoRA`` around a frozen ``nn.Linear`` holding w, with A and B copied in (its
    scale ``alpha / r``, dropout 0, the memory-efficient autograd path that runs the Triton kernels)."""
    out = lora.TritonLinearLoRA(  # built on the CPU, then moved (see peers.frozen_linear)
        peers.frozen_linear(w), dim=a.shape[0], alpha=alpha, dropout=0.0, use_memory_efficient_lora=True
    ).to(w.device)
    out.lora_A.weight.data.copy_(a)
    out.lora_B.weight.data.copy_(b)
    return out
