"""Where a training step's time goes: wall time without the profiler, GPU busy time and host waits with it.

A step's wall time is set by whichever is slower, the host launching kernels or the GPU running them, plus
every moment one waits for the other. Three measurements per configuration:

- **wall** (``ms_per_step``, ``ms_min``, ``ms_max``): the timed loop of :mod:`.step_timing`, no profiler,
  repeats interleaved with the other configurations;
- **GPU busy** (``gpu_busy_ms``): the union of the intervals of the kernels, copies and memsets that the
  profiled steps queued (matched to their launch by correlation id, at full length even when the GPU ran them
  after the host's step ended: :func:`~lecture_code.profiling.trace_analysis.window_gpu_work`), per step, in
  a *light* profile (:func:`~lecture_code.profiling.step_profiler` with ``detail=False``: no shapes, memory
  or stacks). The profiler slows the host, not the kernels, so their durations are the GPU's real work;
  divided by the unprofiled wall it gives the GPU's idle share without the profiler's overhead
  (``gpu_idle_estimate``, 0 when the GPU's work fills the step); ``top`` lists the kernels that take the
  most of it (``name, calls_per_step, share_pct``; host ops by self time on a CPU);
- **host waits** (``syncs_per_step``, ``host_wait_ms``, ``sync_causes``): the host calls that wait for the
  GPU in the same light profile, and the op that made each one; ``host_busy_ms`` is the rest of the light
  profile's step: the host's own work (a little inflated by the profiler).

``profiled_step_ms`` (the light profile's step) next to the unprofiled wall says what the profiler costs.
:func:`explain` turns the rows of a batch-size sweep into sentences, so a notebook says what it measured.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from lecture_code.perf.step_timing import StepTiming, Variant, time_interleaved
from lecture_code.perf.workload import Workload, make_model, make_step, profile_training_steps
from lecture_code.profiling.trace_analysis import (
    short_kernel_name,
    step_breakdown,
    top_kernels,
    top_ops,
    window_gpu_work,
)

__all__ = ["anatomy_row", "explain", "measure_step_anatomy", "top_work"]


def top_work(prof, events, n: int = 8) -> list[dict]:
    """What takes the step's time: on a GPU the ``n`` kernels with the most GPU time among those the profiled
    steps launched (:func:`~lecture_code.profiling.trace_analysis.window_gpu_work`), on a CPU the ``n`` host
    ops with the most self time. Rows ``{name (short), calls_per_step, share_pct}``."""
    steps = step_breakdown(events)["steps"]
    work = window_gpu_work(events)
    ranked = top_kernels(work, n=n) if len(work) else top_ops(prof, n=n)
    return [
        {
            "name": short_kernel_name(r.name),
            "calls_per_step": round(r.calls / steps, 2),
            "share_pct": round(r.share_pct, 1),
        }
        for r in ranked.itertuples()
    ]


def anatomy_row(timing: StepTiming, breakdown: dict) -> dict:
    """One row: the timing's columns (with every repeat), the light profile's, the idle estimate."""
    busy = breakdown["gpu_busy_ms"]
    return {
        **timing.as_row(samples=True),
        "profiled_step_ms": round(breakdown["step_ms"], 3),
        "gpu_busy_ms": None if busy is None else round(busy, 3),
        "gpu_idle_estimate": None if busy is None else round(max(0.0, 1 - busy / timing.ms_per_step), 4),
        "profiled_gpu_idle": breakdown["gpu_idle_fraction"],
        "kernels_per_step": breakdown["kernels_per_step"],
        "launches_per_step": breakdown["launches_per_step"],
        "syncs_per_step": breakdown["syncs_per_step"],
        "host_wait_ms": round(breakdown["host_wait_ms"], 3),
        "host_busy_ms": round(breakdown["step_ms"] - breakdown["host_wait_ms"], 3),
        "sync_causes": breakdown["sync_causes"],
    }


def measure_step_anatomy(
    workloads: Sequence[Workload], trace_dir: str | Path, steps: int = 20, warmup: int = 3, repeats: int = 3
) -> list[dict]:
    """One :func:`anatomy_row` per workload (e.g. one per batch size), labelled ``B=<batch>``."""
    steps_of = [make_step(make_model(w)) for w in workloads]
    variants = [Variant(f"B={w.batch_size}", s, w.batches) for w, s in zip(workloads, steps_of, strict=True)]
    device = workloads[0].device
    timings = time_interleaved(variants, device, steps=steps, warmup=warmup, repeats=repeats)
    rows = []
    for w, step, timing in zip(workloads, steps_of, timings, strict=True):
        prof, events = profile_training_steps(
            w, Path(trace_dir) / f"b{w.batch_size}", detail=False, step=step
        )
        row = anatomy_row(timing, step_breakdown(events))
        rows.append({**row, "batch_size": w.batch_size, "top": top_work(prof, events)})
    return rows


def _ms(x: float) -> str:
    return f"{x:.1f} ms" if x >= 10 else f"{x:.2f} ms"


def explain(rows: Sequence[dict]) -> list[str]:
    """Sentences about a batch-size sweep of :func:`anatomy_row` rows (ordered by batch), from their numbers.

    Says for each step whether the GPU's work fills it; compares the two largest batches (does the wall
    follow the GPU's work?); and names the waits that appear as the batch grows, with the op behind them.
    """
    if not rows:
        return []
    if rows[0]["gpu_busy_ms"] is None:
        return [
            "No GPU in this run: the step is host work only, so it cannot show GPU idle time or waits "
            "(the committed GPU run below can)."
        ]
    out = []
    for r in rows:
        busy, wall = r["gpu_busy_ms"], r["ms_per_step"]
        out.append(
            f"B={r['batch_size']}: the step takes {_ms(wall)} and the GPU works {_ms(busy)} "
            f"({100 * busy / wall:.0f}% of it); the host works {_ms(r['host_busy_ms'])} per step "
            f"(light profile) "
            f"and waits in {r['syncs_per_step']:.0f} CUDA calls ({_ms(r['host_wait_ms'])})."
        )
    if len(rows) >= 2:
        a, b = rows[-2], rows[-1]
        wall_ratio = b["ms_per_step"] / a["ms_per_step"]
        busy_ratio = b["gpu_busy_ms"] / max(a["gpu_busy_ms"], 1e-9)
        if busy_ratio > 1.3 and wall_ratio < 1 + (busy_ratio - 1) / 3:
            verdict = (
                f"the GPU's work grows {busy_ratio:.1f}x but the step only {wall_ratio:.2f}x: the GPU's work "
                f"stays below what the host spends per step, so the host sets the pace, not the batch."
            )
        elif busy_ratio > 1.3:
            verdict = (
                f"the step follows the GPU's work ({busy_ratio:.1f}x the work, {wall_ratio:.2f}x the time)."
            )
        else:
            verdict = f"the GPU's work changes {busy_ratio:.2f}x and the step {wall_ratio:.2f}x."
        out.append(f"From B={a['batch_size']} to B={b['batch_size']} {verdict}")
        first = rows[0]
        for r in rows[1:]:
            new = {op: n for op, n in r["sync_causes"].items() if n >= first["sync_causes"].get(op, 0.0) + 1}
            if new:
                ops = ", ".join(f"{n:.0f} in {op}" for op, n in sorted(new.items(), key=lambda kv: -kv[1]))
                out.append(
                    f"From B={r['batch_size']} on, the host waits for the GPU where it did not at "
                    f"B={first['batch_size']}: {ops} per step (waiting CUDA calls); each wait drains the "
                    f"GPU's queue, so host and GPU time add up instead of overlapping."
                )
                break
    return out
