"""A thin helper around ``torch.profiler`` for training loops.

``step_profiler(run_dir)`` returns a profiler with a wait/warmup/active schedule that records CPU (and CUDA,
when present) activity with shapes, memory and stacks, and on each finished cycle writes both a TensorBoard
profiler log (``run_dir/tensorboard``, open with ``tensorboard --logdir``) and a Chrome trace
(``run_dir/traces/*.json``, open in chrome://tracing or https://ui.perfetto.dev). Call ``prof.step()`` once
per training step.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler


def activities() -> list[ProfilerActivity]:
    acts = [ProfilerActivity.CPU]
    if torch.cuda.is_available():
        acts.append(ProfilerActivity.CUDA)
    return acts


def step_profiler(run_dir: str | Path, wait: int = 1, warmup: int = 1, active: int = 3) -> profile:
    run_dir = Path(run_dir)
    traces = run_dir / "traces"
    traces.mkdir(parents=True, exist_ok=True)
    tensorboard_handler = tensorboard_trace_handler(str(run_dir / "tensorboard"))

    def on_trace_ready(prof: profile) -> None:
        tensorboard_handler(prof)
        prof.export_chrome_trace(str(traces / f"step_{prof.step_num}.json"))

    return profile(
        activities=activities(),
        schedule=schedule(wait=wait, warmup=warmup, active=active, repeat=1),
        on_trace_ready=on_trace_ready,
        record_shapes=True,
        profile_memory=True,
        with_stack=True,
    )
