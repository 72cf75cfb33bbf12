"""What a GPU offers, read once per device, and what each kernel path needs of it.

Every kernel path states its needs as a :class:`Needs` (compute capability, shared memory per program, and
for a grid whose programs wait on one another, how many programs must be resident at once); the code that
chooses a path (``kernels.lora.linear.choose_version``, the multi-LoRA planner, the TBE launcher) asks
:func:`unmet` and takes the path only where the answer is ``None``. The facts come from
``torch.cuda.get_device_properties`` (:func:`features`, cached per device index).

Which GPU gets which path (capability ``major.minor``, shared memory per program as CUDA's opt-in maximum):

===============================  =====  =======  ==============  ==========  ==========
GPU                              cc     smem     LoRA default    multi-LoRA  TBE
===============================  =====  =======  ==============  ==========  ==========
H100, H200, GH200                9.0    227 KB   v3              both paths  Triton
B200 (if its smem is 227 KB)     10.0   227 KB   v3              both paths  Triton
RTX 5090 and other sm_120        12.0   99 KB    v1              both paths  Triton
A100                             8.0    163 KB   v1              both paths  Triton
A10, RTX 3090, L4, RTX 4090      8.6/9  99 KB    v1              both paths  Triton
T4, V100 and older               < 8.0  —        v0 (torch)      error       error
CPU (``TRITON_INTERPRET=1``)     —      —        v3              both paths  Triton
===============================  =====  =======  ==============  ==========  ==========

- Tensor descriptors (TMA) exist from sm_90: LoRA v2 and v3 (:mod:`kernels.lora.gemm`) need them, and the
  shared memory their H100 tiles were sized for (:data:`kernels.lora.gemm.FAST_PATH_NEEDS`).
- Triton itself supports NVIDIA GPUs of compute capability 8.0 and up (its README), and bf16 ``tl.dot``
  needs sm_80: every Triton path here needs at least that. Below it LoRA runs v0 (cuBLAS); the multi-LoRA and
  TBE kernels raise, naming the pure-torch reference (:mod:`kernels.reference`).
- v3's tiles spin-wait on flags its producer programs raise. That is safe only if every program of the
  launch can be resident at once, whatever else the device runs: then a waiting tile never holds the SM
  its producer needs, and once other work drains every program has an SM. :func:`resident_programs` counts
  what fits (SMs × programs per SM from threads, registers and shared memory per program); v3's grid is
  at most one program per SM by construction (:func:`kernels.lora.gemm.programs_split`) and is checked
  against that count before launch; a device where it cannot hold (fewer than 2 SMs) runs v2, which never
  waits. On a MIG slice CUDA reports the slice's SMs, so the grid follows the slice.
- The interpreter (CPU) emulates descriptors and runs programs one after another in id order (producers
  first): every path runs there, so :func:`features` of a CPU device is ``None`` and nothing is unmet.

Tests patch :func:`features` to stand in for other GPUs (``tests/kernels/test_gpu_features.py``).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

__all__ = [
    "TRITON_FLOOR",
    "GpuFeatures",
    "Needs",
    "features",
    "resident_programs",
    "unmet",
]

# Fallbacks for torch builds whose device properties lack a field (per-SM limits of sm_80 … sm_90).
_MAX_THREADS_PER_SM = 2048
_REGS_PER_SM = 65536
_MAX_REGS_PER_THREAD = 255  # the most a kernel may use: the worst case when a count is not known yet


@dataclass(frozen=True)
class GpuFeatures:
    """The facts of one CUDA device that kernel paths depend on."""

    name: str
    capability: tuple[int, int]
    sm_count: int
    smem_per_block: int  # bytes one program may use (the opt-in maximum)
    smem_per_sm: int
    max_threads_per_sm: int = _MAX_THREADS_PER_SM
    regs_per_sm: int = _REGS_PER_SM


@dataclass(frozen=True)
class Needs:
    """What a kernel path needs. ``what``: the path's name in messages. ``capability``: the lowest compute
    capability; ``smem_per_block``: bytes of shared memory one program asks; ``threads``: per program;
    ``min_sms``: SMs below which the path is not taken (a producer/consumer grid needs two)."""

    what: str
    capability: tuple[int, int] = (8, 0)
    smem_per_block: int = 0
    threads: int = 128
    min_sms: int = 1


TRITON_FLOOR = (8, 0)  # Triton's README: "NVIDIA GPUs (Compute Capability 8.0+)"; bf16 tl.dot needs sm_80


@functools.cache
def _cuda_features(index: int) -> GpuFeatures:
    p = torch.cuda.get_device_properties(index)
    smem_block = getattr(p, "shared_memory_per_block_optin", 0) or getattr(p, "shared_memory_per_block", 0)
    return GpuFeatures(
        name=p.name,
        capability=(p.major, p.minor),
        sm_count=p.multi_processor_count,
        smem_per_block=smem_block,
        smem_per_sm=getattr(p, "shared_memory_per_multiprocessor", 0) or smem_block,
        max_threads_per_sm=getattr(p, "max_threads_per_multi_processor", 0) or _MAX_THREADS_PER_SM,
        regs_per_sm=getattr(p, "regs_per_multiprocessor", 0) or _REGS_PER_SM,
    )


def features(device: torch.device) -> GpuFeatures | None:
    """The features of a CUDA ``device`` (read once per device index), ``None`` for any other device (the
    interpreter, which runs every path)."""
    if device.type != "cuda":
        return None
    return _cuda_features(device.index if device.index is not None else torch.cuda.current_device())


def resident_programs(
    f: GpuFeatures, threads: int, smem: int, regs_per_thread: int = _MAX_REGS_PER_THREAD
) -> int:
    """How many programs of ``threads`` threads and ``smem`` bytes of shared memory can be resident at once
    on the whole device (0 if one does not fit an SM). Registers: ``regs_per_thread`` (the worst case, 255,
    unless the compiled kernel's count is known)."""
    per_sm = min(
        f.max_threads_per_sm // threads,
        f.regs_per_sm // (threads * regs_per_thread),
        f.smem_per_sm // smem if smem else f.max_threads_per_sm,
    )
    if smem > f.smem_per_block:
        per_sm = 0
    return f.sm_count * per_sm


def unmet(needs: Needs, device: torch.device) -> str | None:
    """Why ``device`` cannot run the path of ``needs``, or ``None`` if it can (always ``None`` off CUDA)."""
    f = features(device)
    if f is None:
        return None
    cc = f"sm_{f.capability[0]}{f.capability[1]}"
    if f.capability < needs.capability:
        want = f"sm_{needs.capability[0]}{needs.capability[1]}"
        return f"{needs.what} needs compute capability {want} or newer; {f.name} is {cc}"
    if needs.smem_per_block > f.smem_per_block:
        return (
            f"{needs.what} asks {needs.smem_per_block // 1024} KB of shared memory per program; "
            f"{f.name} ({cc}) offers {f.smem_per_block // 1024} KB"
        )
    if f.sm_count < needs.min_sms:
        return f"{needs.what} needs {needs.min_sms} SMs resident at once; {f.name} reports {f.sm_count}"
    if resident_programs(f, needs.threads, needs.smem_per_block) < needs.min_sms:
        return f"{needs.what}: fewer than {needs.min_sms} of its programs fit on {f.name} at once"
    return None
