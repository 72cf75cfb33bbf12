"""A training step's host time and GPU time, measured apart, and the calls in it that make the host wait.

A loop's wall time per step is the larger of the host's work and the GPU's work (they overlap). To see each
alone, the GPU is first held by a sleep kernel (``torch.cuda._sleep``, through :mod:`lecture_code.internals`)
while the host enqueues: the events around one step then time only the GPU's work (:func:`hidden_step`).

The host's work has no such clean clock; two clocks each read it plus something, so each is an upper bound:
:func:`host_ms_per_step` times a loop issued while the GPU still sleeps (no wait for the GPU is possible, but
launches into a queue the GPU does not drain were measured to cost more), and the timed loop itself gives the
host's clock until its last step call returned (``StepTiming.issue_ms`` in :mod:`.step_timing`: launches as in
training, but a sync, or a full launch queue, waits; never more than the wall time). :func:`host_bound` takes
the smaller and says whether it can hold a wait. :func:`sync_sites` names the lines of one step that make the
host wait (their count is the step's syncs). Used by :func:`lecture_code.perf.dlrm_step.measure`.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from lecture_code.data import Batch
from lecture_code.internals import gpu_sleep

__all__ = [
    "SYNC_WARNING",
    "hidden_step",
    "host_bound",
    "host_ms_per_step",
    "sync_sites",
]


SYNC_WARNING = "called a synchronizing CUDA operation"
"""The text of the warning torch's sync debug mode issues at each call that makes the host wait."""


def sync_sites(step: Callable, batch: Batch, device: torch.device, warmup: int = 1) -> list[str]:
    """Where one step makes the host wait for the GPU (``.item()``, ``nonzero``, a blocking copy…): one
    ``folder/file.py:line`` per such call, the Python line that made it, as torch's sync debug mode reports
    them (``torch.cuda.set_sync_debug_mode("warn")``: one warning per such call, :data:`SYNC_WARNING`; other
    warnings are not counted). The step first runs ``warmup`` times with the mode off, so a wait that happens
    once (a lazy initialisation, a first call's compile or allocation) is not reported as one of every step.
    Empty on a CPU, where there is nothing to wait for."""
    if device.type != "cuda":
        return []
    for _ in range(warmup):
        step(batch)
    torch.cuda.synchronize(device)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            step(batch)
        finally:
            torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize(device)
    return [
        f"{'/'.join(Path(w.filename).parts[-2:])}:{w.lineno}"
        for w in caught
        if SYNC_WARNING in str(w.message)
    ]


def host_ms_per_step(
    step: Callable, batches: Sequence[Batch], device: torch.device, wall_ms: float, n: int = 8, tries: int = 4
) -> tuple[float, bool]:
    """(host ms per step, clean): the host's clock over ``n`` steps issued back to back, divided by ``n``.

    On a GPU the stream is first held by a sleep sized to twice the wall time of the ``n`` steps (a loop's
    wall time per step is at least the host's work per step), then an event is recorded behind it. If that
    event has not completed when the host has issued the ``n`` steps, the GPU ran none of their work during
    the clock: nothing the host did can have waited for it (a sync, a full launch queue), so the clock holds
    the host's work alone (``clean``). Otherwise the try is repeated with half the steps (a launch queue
    holds about a thousand kernels) and a sleep twice as long; after ``tries`` the last time is returned
    with ``clean`` False: an upper bound, not the host's work. On a CPU: the loop's time (the whole step).

    Measured (H100, the ``benchmarks/results/dlrm_step/`` CSV of 2026-11-28): in every row without a CUDA
    graph this read *above* the loop's wall time per step (eager 7.74 against 5.62 ms, fused 4.07 against
    3.65) with ``clean`` True, which the host's work alone cannot do: launches into a queue the sleeping GPU
    does not drain cost the host more than in the loop. An upper bound, then; :func:`host_bound` sets it
    beside the timed loop's issue clock."""
    if device.type != "cuda":
        t0 = time.perf_counter()
        for i in range(n):
            step(batches[i % len(batches)])
        return 1e3 * (time.perf_counter() - t0) / n, True
    host = math.nan
    for attempt in range(tries):
        torch.cuda.synchronize(device)
        gpu_sleep(int(2e6 * 2 * n * max(wall_ms, 0.5) * 2**attempt))  # ≈ 2e6 cycles per ms
        asleep = torch.cuda.Event()
        asleep.record()
        t0 = time.perf_counter()
        for i in range(n):
            step(batches[i % len(batches)])
        host = 1e3 * (time.perf_counter() - t0) / n
        clean = not asleep.query()
        torch.cuda.synchronize(device)
        if clean:
            return host, True
        n = max(1, n // 2)
    return host, False


def host_bound(
    asleep: tuple[float, bool], issue_ms: float, gpu_ms: float | None, syncs: float
) -> tuple[float, bool, str]:
    """(host ms, clean, which clock): the smaller of two upper bounds on the host's work per step,
    ``asleep`` = :func:`host_ms_per_step`'s (ms, clean) and ``issue_ms`` = the timed loop's issue clock per
    step (``StepTiming.issue_ms``: the host's clock until the loop's last step call returned). The issue
    clock holds no wait (``clean``) when the step has no sync and the host is slower than the GPU
    (``issue_ms >= gpu_ms``): a GPU that drains the queue faster than the host fills it never makes a launch
    wait. Ties and NaNs go to the asleep clock."""
    asleep_ms, asleep_clean = asleep
    if not issue_ms < asleep_ms:
        return asleep_ms, asleep_clean, "asleep"
    gpu_faster = gpu_ms is not None and math.isfinite(gpu_ms) and issue_ms >= gpu_ms
    return issue_ms, syncs == 0 and gpu_faster, "issue"


def hidden_step(step: Callable, batch: Batch, device: torch.device, wall_ms: float) -> tuple[float, float]:
    """(GPU ms, host ms) of one step: the GPU sleeps while the host issues the step (≈ 2e6 cycles per ms).

    The GPU ms are the events' span around the step. The host clock runs from before ``start.record()`` to
    after ``end.record()``: anything in the step that waits for the GPU (a host sync, a full launch queue)
    waits for the sleep too, and one step timed alone pays costs a loop amortises. So its ``host ms`` is an
    upper bound on the host's work, not that work: :func:`~lecture_code.perf.dlrm_step.measure` takes the
    host's time from :func:`host_ms_per_step` instead."""
    if device.type != "cuda":
        t0 = time.perf_counter()
        step(batch)
        return float("nan"), 1e3 * (time.perf_counter() - t0)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize(device)
    gpu_sleep(int(4e6 * max(wall_ms, 0.5)))  # twice the wall time of a whole step
    t0 = time.perf_counter()
    start.record()
    step(batch)
    end.record()
    host = 1e3 * (time.perf_counter() - t0)
    torch.cuda.synchronize(device)
    return start.elapsed_time(end), host
