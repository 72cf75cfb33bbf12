"""The lecture's goals, in one table: what RESULTS.md checks each latest measurement against.

Each :class:`Goal` states its bound in words (``text``, what a reader sees) and says which row of which
workload's CSV it is about (``key``, matched by the workload's section; the section names the benchmark that
writes the CSV). A goal whose row the CSV lacks is reported as "not measured", never as met.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass

__all__ = ["GOALS", "Goal", "goals_for"]


@dataclass(frozen=True)
class Goal:
    """``value <op> bound`` for the row ``key`` of ``workload``'s latest CSV, stated as ``text``."""

    workload: str
    key: str
    text: str
    op: str  # "<=" or ">="
    bound: float

    def met(self, value: float) -> bool:
        return {"<=": operator.le, ">=": operator.ge}[self.op](value, self.bound)


GOALS: tuple[Goal, ...] = (
    Goal(
        "preprocess",
        "1000000 rows",
        "≥ 500k rows/s end to end on a 1M-row synthetic file (2-core CPU)",
        ">=",
        500e3,
    ),
    Goal("pointwise", "largest size", "Triton v1 ≥ 95% of the copy reference at large sizes", ">=", 95.0),
    Goal(
        "pointwise",
        "smallest size",
        "no slower than torch.compile at small sizes (x compile ≥ 1)",
        ">=",
        1.0,
    ),
    # ours = the best `fused*` implementation; each goal is for uniform AND Zipf ids (worse counts)
    Goal(
        "dlrm_step",
        "kaggle, batch 2048",
        "≤ 0.35 ms per training step (H100, Kaggle preset, batch 2048)",
        "<=",
        0.35,
    ),
    Goal(
        "dlrm_step",
        "kaggle, batch 2048, × eager",
        "≥ 13× the eager step (eager, sparse grads)",
        ">=",
        13.0,
    ),
    Goal(
        "dlrm_step",
        "kaggle, batch 2048, × two tricks",
        "≥ 2× the two-tricks version (packed + index_add_, CUDA graph)",
        ">=",
        2.0,
    ),
    # mixed precision: the fp32 goal above is out of reach (the step's fp32 MLP GEMMs alone take ≈ 0.33 ms on
    # cuBLAS); the bf16-MLP step (fp32 tables, master weights and loss) is held to a faster bound AND to
    # learning what fp32 eager learns: the benchmark's auc_gap column (lecture_code.perf.auc_trajectory)
    Goal(
        "dlrm_step",
        "kaggle, batch 2048, bf16 × two tricks",
        "bf16 MLPs (fp32 tables, master weights, loss): ≥ 2.5× the two-tricks version "
        "(packed + index_add_, CUDA graph)",
        ">=",
        2.5,
    ),
    Goal(
        "dlrm_step",
        "kaggle, batch 2048, bf16 AUC gap",
        "bf16 MLPs: holdout AUC within 1e-3 of fp32 eager's at every evaluation over 300 steps (max |Δ AUC|)",
        "<=",
        1e-3,
    ),
    Goal(
        "dlrm_step",
        "kaggle, batch 2048, peak memory",
        "peak memory no higher than eager's (% of eager, sparse grads)",
        "<=",
        100.0,
    ),
    Goal("lora", "8192x4096x4096 r16 fwd", "LoRA overhead over the frozen base ≤ +5%", "<=", 5.0),
    Goal("lora", "8192x4096x4096 r16 fwd+bwd", "LoRA overhead over the frozen base ≤ +5%", "<=", 5.0),
    Goal("lora", "8192x4096x4096 r64 fwd", "LoRA overhead over the frozen base ≤ +10%", "<=", 10.0),
    Goal("lora", "8192x4096x4096 r64 fwd+bwd", "LoRA overhead over the frozen base ≤ +10%", "<=", 10.0),
    Goal("lora", "16384x4096x14336 r16 fwd+bwd", "LoRA overhead over the frozen base ≤ +3%", "<=", 3.0),
    # small M, where the host dominates: both sides replayed from CUDA graphs (bench_lora's "(graph)" rows)
    Goal(
        "lora",
        "512x4096x4096 r16 fwd+bwd graph",
        "in CUDA graphs, LoRA overhead over the graphed frozen base ≤ +30% at 512 rows",
        "<=",
        30.0,
    ),
    Goal(
        "lora",
        "16x4096x4096 r16 fwd+bwd graph",
        "in CUDA graphs, LoRA overhead over the graphed frozen base ≤ +50% at 16 rows",
        "<=",
        50.0,
    ),
    # wall µs per fwd+bwd call in a loop, ours at its best (torch.compile(mode="reduce-overhead") included)
    # over the unsloth-style order's without a graph: what a practitioner who compiles the model gets
    Goal(
        "lora",
        "512x4096x4096 r16 fwd+bwd wall",
        "wall time per fwd+bwd call ≤ the unsloth-style order's at 512 rows (ours at its best / theirs ≤ 1)",
        "<=",
        1.0,
    ),
    Goal(
        "lora",
        "16x4096x4096 r16 fwd+bwd wall",
        "wall time per fwd+bwd call ≤ the unsloth-style order's at 16 rows (ours at its best / theirs ≤ 1)",
        "<=",
        1.0,
    ),
    # ours = add_multi_lora (provider "ours"), 8 adapters, r 16, K = N = 4096, one slice
    Goal(
        "multi_lora",
        "T=16 µs",
        "shrink + expand ≤ 10 µs (8 adapters, r 16, K = N = 4096, bf16)",
        "<=",
        10.0,
    ),
    Goal(
        "multi_lora",
        "T=256 µs",
        "shrink + expand ≤ 40 µs (8 adapters, r 16, K = N = 4096, bf16)",
        "<=",
        40.0,
    ),
    Goal(
        "multi_lora",
        "T=4096 µs",
        "shrink + expand ≤ 45 µs (8 adapters, r 16, K = N = 4096, bf16)",
        "<=",
        45.0,
    ),
    Goal(
        "multi_lora",
        "T=4096 % copy",
        "≥ 80% of the copy reference on the bytes that must move",
        ">=",
        80.0,
    ),
    Goal(
        "multi_lora",
        "T=16384 % copy",
        "≥ 85% of the copy reference on the bytes that must move",
        ">=",
        85.0,
    ),
    # ours = qlora_linear's default version (W in NF4, bf16 activations); keys read by
    # lecture_code/results/workloads/qlora.py
    Goal(
        "qlora",
        "8192x4096x4096 r16 fwd+bwd",
        "QLoRA overhead over the 16-bit base linear ≤ +15% (W in NF4, bf16 activations)",
        "<=",
        15.0,
    ),
    Goal(
        "qlora",
        "8192x4096x4096 r16 fwd+bwd vs dequantize",
        "≥ 1.25× faster than dequantizing W to 16 bits (forward and backward) and then torch's LoRA",
        ">=",
        1.25,
    ),
    Goal(
        "qlora",
        "512x4096x4096 r16 fwd graph",
        "in CUDA graphs, the QLoRA forward no slower than the 16-bit base linear at 512 rows (overhead ≤ 0%)",
        "<=",
        0.0,
    ),
    # keys: preset, ranks, backend, measure (lecture_code/results/workloads/ddp.py reads them)
    Goal(
        "ddp",
        "kaggle, 2 ranks, fused-graph, scaling",
        "≥ 90% scaling efficiency on 2 GPUs (Kaggle preset, batch 2048/GPU)",
        ">=",
        90.0,
    ),
    Goal(
        "ddp",
        "kaggle, 4 ranks, fused-graph, scaling",
        "≥ 85% scaling efficiency on 4 GPUs (Kaggle preset, batch 2048/GPU)",
        ">=",
        85.0,
    ),
    Goal(
        "ddp",
        "kaggle, 2 ranks, fused-graph, samples/s",
        "≥ 10M samples/s on 2 GPUs (stated for H100s)",
        ">=",
        10e6,
    ),
    Goal(
        "ddp",
        "terabyte, 4 ranks, sharded, samples/s",
        "the 1TB-size model (177.9M rows) trains on 4 GPUs, tables sharded, at ≥ 2M samples/s",
        ">=",
        2e6,
    ),
)


def goals_for(workload: str) -> list[Goal]:
    return [g for g in GOALS if g.workload == workload]
