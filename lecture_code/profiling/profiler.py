"""A thin helper around ``torch.profiler`` for training loops.

``step_profiler(run_dir)`` returns a profiler with a wait/warmup/active schedule that records CPU (and CUDA,
when present) activity with shapes, memory and stacks, and on each finished cycle writes a TensorBoard
profiler log to ``run_dir/tensorboard`` (open with ``tensorboard --logdir``). That log *is* a Chrome trace
(``*.pt.trace.json``, named after host and pid; :func:`trace_files` finds them): open it in chrome://tracing
or https://ui.perfetto.dev. Call ``prof.step()`` once per training step.

Shapes, memory and stacks are what TensorBoard's views need, and they cost host time on every op: recording
them makes the host slower, so a launch-bound step looks slower and its GPU looks idler than without the
profiler. ``step_profiler(run_dir, detail=False)`` records only the ops and the GPU's kernels: what a
timeline and the GPU's busy time need, at a fraction of the overhead.
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


def step_profiler(
    run_dir: str | Path, wait: int = 1, warmup: int = 1, active: int = 3, detail: bool = True
) -> profile:
    """``detail``: also record shapes, memory and Python stacks (TensorBoard's views; slows the host)."""
    return profile(
        activities=activities(),
        schedule=schedule(wait=wait, warmup=warmup, active=active, repeat=1),
        on_trace_ready=tensorboard_trace_handler(str(Path(run_dir) / "tensorboard")),
        record_shapes=detail,
        profile_memory=detail,
        with_stack=detail,
    )


def trace_files(run_dir: str | Path) -> list[Path]:
    """The Chrome traces a ``step_profiler(run_dir)`` wrote, oldest first."""
    return sorted((Path(run_dir) / "tensorboard").glob("*.pt.trace.json"), key=lambda p: p.stat().st_mtime)
