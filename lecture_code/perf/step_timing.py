"""Time a training step the way a training loop runs it, and measure the memory one step allocates.

**Time.** A GPU runs asynchronously: ``train_step(batch)`` returns as soon as its kernels are *queued*. So a
timed repeat runs ``steps`` steps back to back and synchronizes once, at the end: ``wall / steps`` is the
throughput a real loop gets, and nothing inside the loop waits for the GPU unless the experiment asks for it
(``read_loss_every_step=True`` is finding 1's ``loss.item()``). Warm-up steps run first (compilation, the
optimizer's state, the caching allocator).

**Spread.** One number per configuration hides how much it moves from run to run (GPU clocks, the host's
other work, the allocator). :func:`time_interleaved` times several configurations *interleaved*: repeat 1 of
A, of B, of C, then repeat 2 of A, B, C, and so on, so a slow spell of the machine hits every configuration
alike instead of whichever happened to run then. Each :class:`StepTiming` keeps every repeat
(``samples_ms``) and reports their median (``ms_per_step``), minimum and maximum.

**Memory.** One more step runs under ``torch.profiler`` with ``profile_memory=True``, which records every
allocation and free as a ``[memory]`` event with its signed size in bytes. The running sum of those sizes is
what the step holds on top of what was alive before it (activations, gradients, temporaries); its maximum is
``peak_step_mib``, in MiB (2**20 bytes). Frees of blocks allocated before the step are left out: the profiler
reports them when it saw the allocation in an earlier profile, and counting them would lower the step's own
peak. Same code on CPU and GPU (where ``torch.cuda.max_memory_allocated`` would agree).
"""

from __future__ import annotations

import json
import math
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from lecture_code.profiling.quiet import quiet_profiler

__all__ = ["StepTiming", "Variant", "peak_step_bytes", "time_interleaved", "time_train_steps"]

CUDA_DEVICE_TYPE = 1  # "Device Type" of a [memory] event: 0 = CPU, 1 = CUDA


@dataclass
class StepTiming:
    """One measured configuration (a row of the tables in notebooks 02 and 03)."""

    label: str
    ms_per_step: float  # median over repeats of wall time / steps
    peak_step_mib: float  # the most one step held on top of what was live before it
    first_step_s: float  # the first call: includes torch.compile's compilation when compiled
    steps: int
    repeats: int
    samples_ms: tuple[float, ...] = field(default=())  # wall time / steps of every repeat, in run order
    # the host's clock / steps of every repeat, stopped when the last step call returned (the wait for the GPU
    # to finish not counted): the host's work plus any wait inside the loop, never more than the wall time
    issue_samples_ms: tuple[float, ...] = field(default=())

    @property
    def issue_ms(self) -> float:
        """The median of ``issue_samples_ms`` (NaN if there are none)."""
        return statistics.median(self.issue_samples_ms) if self.issue_samples_ms else math.nan

    @property
    def ms_min(self) -> float:
        return min(self.samples_ms, default=self.ms_per_step)

    @property
    def ms_max(self) -> float:
        return max(self.samples_ms, default=self.ms_per_step)

    def as_row(self, samples: bool = False) -> dict:
        """The table row; ``samples=True`` adds every repeat's time (for sidecars)."""
        row = {
            "label": self.label,
            "ms_per_step": round(self.ms_per_step, 3),
            "ms_min": round(self.ms_min, 3),
            "ms_max": round(self.ms_max, 3),
            "peak_step_mib": round(self.peak_step_mib, 2),
            "first_step_s": round(self.first_step_s, 3),
            "steps": self.steps,
            "repeats": self.repeats,
        }
        if samples:
            row["samples_ms"] = [round(s, 3) for s in self.samples_ms]
        return row

    @classmethod
    def from_row(cls, row: dict) -> StepTiming:
        """Inverse of :meth:`as_row` (``ms_min``/``ms_max`` are derived from ``samples_ms``)."""
        samples = tuple(row.get("samples_ms", ()))
        keep = ("label", "ms_per_step", "peak_step_mib", "first_step_s", "steps", "repeats")
        return cls(**{k: row[k] for k in keep}, samples_ms=samples)


@dataclass
class Variant:
    """One configuration to time: a train step, the batches it cycles through, and whether to sync."""

    label: str
    train_step: Callable[[object], torch.Tensor]  # one optimizer step; returns the loss as a device tensor
    batches: Sequence[object]
    read_loss_every_step: bool = False  # loss.item() after every step (a host sync on a GPU)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def peak_step_bytes(fn: Callable[[], object], device: torch.device) -> int:
    """Peak bytes ``fn()`` holds on ``device`` above what was allocated before it (profiler events)."""
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    _sync(device)
    with quiet_profiler(), profile(activities=activities, profile_memory=True) as prof:
        fn()
        _sync(device)
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "memory.json"
        prof.export_chrome_trace(str(trace))
        events = json.loads(trace.read_text())["traceEvents"]
    want = CUDA_DEVICE_TYPE if device.type == "cuda" else 0
    sizes = [  # (time, event index, signed bytes, address): the index orders an alloc and a free at one time
        (e["ts"], e["args"].get("Ev Idx", 0), e["args"]["Bytes"], e["args"].get("Addr"))
        for e in events
        if e.get("name") == "[memory]" and e.get("args", {}).get("Device Type") == want
    ]
    held, peak, live = 0, 0, set()
    for _, _, size, addr in sorted(sizes, key=lambda s: s[:2]):
        if size > 0:
            live.add(addr)
        elif addr in live:
            live.discard(addr)
        else:  # a block allocated before this profile (the profiler may know it from an earlier one): its
            continue  # free would lower the count below what the step itself allocated
        held += size
        peak = max(peak, held)
    return peak


class _Loop:
    """Runs one :class:`Variant` ``n`` steps at a time, cycling through its batches."""

    def __init__(self, variant: Variant, device: torch.device):
        if not variant.batches:
            raise ValueError(f"{variant.label!r}: a timed loop needs at least one batch")
        self.variant, self.device, self.cursor = variant, device, 0

    def run(self, n: int) -> None:
        v = self.variant
        running = torch.zeros((), device=self.device)
        for _ in range(n):
            loss = v.train_step(v.batches[self.cursor % len(v.batches)])
            self.cursor += 1
            if v.read_loss_every_step:
                loss.item()  # the host waits here for every kernel queued so far
            else:
                running += loss  # stays on the device: nothing waits

    def timed(self, n: int) -> float:
        """Seconds for ``n`` steps, from an idle device to an idle device."""
        return self.timed_and_issued(n)[0]

    def timed_and_issued(self, n: int) -> tuple[float, float]:
        """(seconds for ``n`` steps from an idle device to an idle device, seconds until the host had issued
        them: the clock read when the last step call returned, before waiting for the device)."""
        _sync(self.device)
        t0 = time.perf_counter()
        self.run(n)
        issued = time.perf_counter() - t0
        _sync(self.device)
        return time.perf_counter() - t0, issued


def time_interleaved(
    variants: Sequence[Variant],
    device: torch.device,
    *,
    steps: int = 20,
    warmup: int = 3,
    repeats: int = 3,
) -> list[StepTiming]:
    """Time every variant, repeats interleaved (A B C A B C ...); one :class:`StepTiming` each, in order.

    Per variant: one first step (timed alone: ``first_step_s``), ``warmup`` untimed steps, then ``repeats``
    timed repeats of ``steps`` steps (each with its wall time and its issue time, ``issue_samples_ms``), then
    one step under the memory profiler (``peak_step_mib``).
    """
    if not variants:
        raise ValueError("time_interleaved needs at least one variant")
    if steps < 1 or repeats < 1 or warmup < 0:
        raise ValueError(f"need steps >= 1, repeats >= 1, warmup >= 0; got {steps}, {repeats}, {warmup}")
    loops = [_Loop(v, device) for v in variants]
    first = []
    for loop in loops:
        first.append(loop.timed(1))
        loop.run(warmup)
    samples: list[list[float]] = [[] for _ in loops]
    issued: list[list[float]] = [[] for _ in loops]
    for _ in range(repeats):
        for loop, times, issue in zip(loops, samples, issued, strict=True):
            wall_s, issue_s = loop.timed_and_issued(steps)
            times.append(1e3 * wall_s / steps)
            issue.append(1e3 * issue_s / steps)
    results = []
    for loop, first_s, times, issue in zip(loops, first, samples, issued, strict=True):
        peak = peak_step_bytes(lambda loop=loop: loop.run(1), device)
        median = statistics.median(times)
        label = loop.variant.label
        results.append(
            StepTiming(label, median, peak / 2**20, first_s, steps, repeats, tuple(times), tuple(issue))
        )
    return results


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
    """:func:`time_interleaved` of one variant: ``train_step`` over ``batches`` (cycled).

    ``train_step(batch)`` does one optimizer step and returns the loss as a device tensor. With
    ``read_loss_every_step`` the loop calls ``loss.item()`` after every step (a host sync on a GPU);
    otherwise it adds the loss to a device tensor and reads nothing.
    """
    if not batches:
        raise ValueError("time_train_steps needs at least one batch")
    variant = Variant(label, train_step, batches, read_loss_every_step)
    return time_interleaved([variant], device, steps=steps, warmup=warmup, repeats=repeats)[0]
