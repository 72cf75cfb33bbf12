"""What the profiler costs: the same step timed without it, with a light profile and with a detailed one.

A launch-bound step is host time, and the profiler adds host time to every op it records: shapes, memory and
Python stacks (``detail=True``, what TensorBoard's views need) add the most. So a detailed profile stretches
the step and makes the GPU look idler than it is. The GPU's *work* is not stretched: kernel durations come
from the GPU. Hence the estimate without the profiler: GPU busy time from the light profile over the wall
time of the unprofiled loop (:func:`~lecture_code.perf.step_anatomy.anatomy_row`).
"""

from __future__ import annotations

from pathlib import Path

from lecture_code.perf.step_anatomy import anatomy_row
from lecture_code.perf.step_timing import time_train_steps
from lecture_code.perf.workload import Workload, make_model, make_step, profile_training_steps
from lecture_code.profiling.trace_analysis import step_breakdown

__all__ = ["measure_profiler_cost"]


def measure_profiler_cost(
    workload: Workload, run_dir: str | Path, steps: int = 20, warmup: int = 3, repeats: int = 3
) -> dict:
    """``{"unprofiled": anatomy row, "light": breakdown, "heavy": breakdown, "light_prof", "light_events",
    "heavy_prof", "heavy_events"}``: one fresh model's step, timed, then profiled light and detailed."""
    run_dir = Path(run_dir)
    step = make_step(make_model(workload))
    timing = time_train_steps(
        step,
        workload.batches,
        workload.device,
        label="no profiler",
        steps=steps,
        warmup=warmup,
        repeats=repeats,
    )
    light_prof, light_events = profile_training_steps(workload, run_dir / "light", detail=False, step=step)
    heavy_prof, heavy_events = profile_training_steps(workload, run_dir / "detailed", detail=True, step=step)
    light = step_breakdown(light_events)
    return {
        "unprofiled": anatomy_row(timing, light),
        "light": light,
        "heavy": step_breakdown(heavy_events),
        "light_prof": light_prof,
        "light_events": light_events,
        "heavy_prof": heavy_prof,
        "heavy_events": heavy_events,
    }
