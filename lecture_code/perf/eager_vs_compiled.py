"""The same DLRM training step eager and under ``torch.compile``: time per step and memory per step.

Both start from the same initial weights and see the same batches. The compiled step compiles the forward
and the loss (``torch.compile(forward_loss)`` in :func:`lecture_code.training.make_train_step`); AOTAutograd
derives and compiles the backward from it; the optimizer step stays eager. ``first_step_s`` of the compiled
row is mostly compilation time, paid once per process (and per new input shape). The two are timed with
their repeats interleaved (:func:`~lecture_code.perf.step_timing.time_interleaved`).
"""

from __future__ import annotations

import torch

from lecture_code.perf.step_timing import StepTiming, Variant, time_interleaved
from lecture_code.perf.workload import Workload, make_model, make_step

__all__ = ["measure_eager_vs_compiled"]


def measure_eager_vs_compiled(
    workload: Workload, steps: int = 20, warmup: int = 3, repeats: int = 3
) -> list[StepTiming]:
    torch.compiler.reset()  # a fresh compile: first_step_s includes it whatever ran before
    variants = [
        Variant(label, make_step(make_model(workload), compile_model=compile_model), workload.batches)
        for label, compile_model in (("eager", False), ("torch.compile", True))
    ]
    return time_interleaved(variants, workload.device, steps=steps, warmup=warmup, repeats=repeats)
