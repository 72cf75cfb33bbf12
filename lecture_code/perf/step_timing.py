"""Time a training step the way a training loop runs it, and measure the memory one step allocates.

**Time.** A GPU runs asynchronously: ``train_step(batch)`` returns as soon as its kernels are *queued*. So the
timed loop runs ``steps`` steps back to back and synchronizes once, at the end: ``ms_per_step = wall / steps``
is the throughput a real loop gets, and nothing inside the loop waits for the GPU unless the experiment asks
for it (``read_loss_every_step=True`` is finding 1's ``loss.item()``). Warm-up steps run first (compilation,
the optimizer's state, the caching allocator), and the loop is repeated ``repeats`` times; the median is kept.

**Memory.** One more step runs under ``torch.profiler`` with ``profile_memory=True``, which records every
allocation and free as a ``[memory]`` event with its signed size in bytes. The running sum of those sizes is
what the step holds on top of what was alive before it (activations, gradients, temporaries); its maximum is
``peak_step_mb``. Same code on CPU and GPU (where ``torch.cuda.max_memory_allocated`` would agree).
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

__all__ = ["StepTiming", "peak_step_bytes", "time_train_steps"]

CUDA_DEVICE_TYPE = 1  # "Device Type" of a [memory] event: 0 = CPU, 1 = CUDA


@dataclass
class StepTiming:
    """One measured configuration (a row of the tables in notebooks 02 and 03)."""

    label: str
    ms_per_step: float  # median over repeats of wall time / steps
    peak_step_mb: float  # the most one step held on top of what was live before it
    first_step_s: float  # the first call: includes torch.compile's compilation when compiled
    steps: int
    repeats: int

    def as_row(self) -> dict:
        return {
            "label": self.label,
            "ms_per_step": round(self.ms_per_step, 3),
            "peak_step_mb": round(self.peak_step_mb, 2),
            "first_step_s": round(self.first_step_s, 3),
            "steps": self.steps,
            "repeats": self.repeats,
        }


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def peak_step_bytes(fn: Callable[[], object], device: torch.device) -> int:
    """Peak bytes ``fn()`` holds on ``device`` above what was allocated before it (profiler events)."""
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    _sync(device)
    with profile(activities=activities, profile_memory=True) as prof:
        fn()
        _sync(device)
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "memory.json"
        prof.export_chrome_trace(str(trace))
        events = json.loads(trace.read_text())["traceEvents"]
    want = CUDA_DEVICE_TYPE if device.type == "cuda" else 0
    sizes = [  # (time, event index, signed bytes): the index orders an alloc and a free at the same time
        (e["ts"], e["args"].get("Ev Idx", 0), e["args"]["Bytes"])
        for e in events
        if e.get("name") == "[memory]" and e.get("args", {}).get("Device Type") == want
    ]
    held, peak = 0, 0
    for _, _, size in sorted(sizes):
        held += size
        peak = max(peak, held)
    return peak


def time_train_steps(
    train_step: Callable[[object], torch.Tensor],
    batches: Sequence[object],
    device: torch.device,
    *,
    label: str = "",
    steps: int = 20,
    warmup: int = 3,
    repeats: int = 3,
    read_loss_every_step: bool = False,
) -> StepTiming:
    """Run ``train_step`` over ``batches`` (cycled) and return its :class:`StepTiming`.

    ``train_step(batch)`` does one optimizer step and returns the loss as a device tensor. With
    ``read_loss_every_step`` the loop calls ``loss.item()`` after every step (a host sync on a GPU);
    otherwise it adds the loss to a device tensor and reads nothing.
    """
    if not batches:
        raise ValueError("time_train_steps needs at least one batch")
    if steps < 1 or repeats < 1 or warmup < 0:
        raise ValueError(f"need steps >= 1, repeats >= 1, warmup >= 0; got {steps}, {repeats}, {warmup}")
    cursor = 0

    def run(n: int) -> None:
        nonlocal cursor
        running = torch.zeros((), device=device)
        for _ in range(n):
            loss = train_step(batches[cursor % len(batches)])
            cursor += 1
            if read_loss_every_step:
                loss.item()  # the host waits here for every kernel queued so far
            else:
                running += loss  # stays on the device: nothing waits

    _sync(device)
    t0 = time.perf_counter()
    run(1)
    _sync(device)
    first_step_s = time.perf_counter() - t0
    run(warmup)
    times = []
    for _ in range(repeats):
        _sync(device)
        t0 = time.perf_counter()
        run(steps)
        _sync(device)
        times.append(1e3 * (time.perf_counter() - t0) / steps)
    peak = peak_step_bytes(lambda: run(1), device)
    return StepTiming(label, statistics.median(times), peak / 2**20, first_step_s, steps, repeats)
