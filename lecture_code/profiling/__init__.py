"""Profiling a training step: record it, read the trace, draw it.

- :mod:`.profiler`: :func:`step_profiler`, ``torch.profiler`` with a wait/warmup/active schedule writing
  TensorBoard logs (Chrome traces) to a run folder;
- :mod:`.trace_analysis`: top ops (``key_averages``), trace events, top kernels, GPU idle, host syncs, and a
  per-step breakdown (host time, GPU busy time, kernels, launches, waits);
- :mod:`.quiet`: :func:`quiet_profiler` keeps the profiler library's status lines out of outputs;
- :mod:`.trace_plots`: the timeline (every host thread with ops above the GPU streams) and the op breakdown,
  as PNGs.
"""

from lecture_code.profiling.profiler import activities, step_profiler, trace_files
from lecture_code.profiling.quiet import quiet_profiler
from lecture_code.profiling.trace_analysis import (
    gpu_events,
    gpu_idle_fraction,
    host_syncs,
    load_trace,
    range_share,
    short_kernel_name,
    step_breakdown,
    step_ranges,
    sync_waits,
    top_kernels,
    top_ops,
)
from lecture_code.profiling.trace_plots import host_lanes, plot_op_breakdown, plot_timeline

__all__ = [
    "activities",
    "gpu_events",
    "gpu_idle_fraction",
    "host_lanes",
    "host_syncs",
    "load_trace",
    "plot_op_breakdown",
    "plot_timeline",
    "quiet_profiler",
    "range_share",
    "short_kernel_name",
    "step_breakdown",
    "step_profiler",
    "step_ranges",
    "sync_waits",
    "top_kernels",
    "top_ops",
    "trace_files",
]
