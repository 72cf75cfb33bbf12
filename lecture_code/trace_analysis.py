"""Read a profile two ways: the profiler's own tables, and the Chrome trace it writes.

1. **Op tables** (:func:`top_ops`): ``prof.key_averages()`` already groups every recorded op by name and sums
   its *self* time (time in the op minus time in the ops it called) and *total* time (including callees). We
   only turn it into a DataFrame and add each op's share of all self time, so self times add up to 100 %.

2. **Timelines** (:func:`load_trace`): ``step_profiler`` writes a Chrome trace (``*.pt.trace.json``, see
   :func:`lecture_code.profiling.trace_files`). The format is a JSON object whose ``traceEvents`` list holds
   events; we keep only *complete* events (``"ph": "X"``), each with a start ``ts`` and a duration ``dur``,
   both in microseconds, a process ``pid`` and a thread ``tid``. The category ``cat`` says what it is:

   ============================  ================================================================
   ``cpu_op``                    an ATen op on a host thread (``aten::addmm``)
   ``python_function``           a Python frame (recorded with ``with_stack=True``)
   ``user_annotation``           a ``record_function`` range, e.g. ``ProfilerStep#3``
   ``cuda_runtime``              a CUDA runtime call on the host (``cudaLaunchKernel``)
   ``kernel``, ``gpu_memcpy``,   work on the GPU; ``pid`` is the device, ``args["stream"]`` the stream
   ``gpu_memset``
   ============================  ================================================================

   From that table: :func:`gpu_idle_fraction` (how much of the profiled window no GPU work ran) and
   :func:`host_syncs` (where the host waited for the GPU).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
from torch.profiler import profile

GPU_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")

# Calls on the host that block until the GPU has caught up. ``aten::item`` (``tensor.item()``, ``float(t)``,
# ``if t:``) calls ``aten::_local_scalar_dense``, which on a GPU tensor copies device -> host and waits.
SYNC_NAMES = (
    "cudaStreamSynchronize",
    "cudaDeviceSynchronize",
    "cudaEventSynchronize",
    "aten::item",
    "aten::_local_scalar_dense",
)

TRACE_COLUMNS = ["name", "cat", "ts", "dur", "pid", "tid", "stream", "correlation"]


# --- op tables from the profiler object --------------------------------------------------------------------


_PYTHON_FRAME = re.compile(r"\.py\(\d+\): ")  # "file.py(123): function", a with_stack frame row


def top_ops(prof: profile, n: int = 10, by: str = "self_cpu_time_total") -> pd.DataFrame:
    """The ``n`` ops with the most self time, from ``prof.key_averages()``.

    ``by`` is ``"self_cpu_time_total"`` (host time) or ``"self_device_time_total"`` (GPU time; all zero on a
    CPU-only run). Columns: ``name, calls, self_us, total_us, share_pct`` where ``total_us`` includes callees
    and ``share_pct`` is this op's self time over the sum of all ops' self time. Python frames that
    ``with_stack=True`` records as rows of their own (``threading.py(331): wait`` from a background thread,
    ``module.py(12): forward``) are left out: they are not ops, and an idle thread's wait can top the list.
    """
    if by not in ("self_cpu_time_total", "self_device_time_total"):
        raise ValueError(f"by must be self_cpu_time_total or self_device_time_total, got {by!r}")
    total_attr = "cpu_time_total" if by == "self_cpu_time_total" else "device_time_total"
    rows = [
        {
            "name": avg.key,
            "calls": avg.count,
            "self_us": getattr(avg, by),
            "total_us": getattr(avg, total_attr),
        }
        for avg in prof.key_averages()
        if not _PYTHON_FRAME.search(avg.key)
    ]
    df = pd.DataFrame(rows, columns=["name", "calls", "self_us", "total_us"])
    all_self = df["self_us"].sum()
    df["share_pct"] = 100.0 * df["self_us"] / all_self if all_self > 0 else 0.0
    return df.sort_values("self_us", ascending=False, kind="stable").head(n).reset_index(drop=True)


# --- Chrome trace ------------------------------------------------------------------------------------------


def load_trace(path: str | Path) -> pd.DataFrame:
    """The complete (``ph == "X"``) events of a Chrome trace, one row each, sorted by start time.

    Columns: ``name, cat, ts, dur`` (microseconds), ``pid, tid``, ``stream`` (GPU events only, else ``None``)
    and ``correlation`` (links a ``cuda_runtime`` launch to the GPU event it caused; ``None`` elsewhere).
    """
    with open(path) as f:
        trace = json.load(f)
    rows = []
    for event in trace["traceEvents"]:
        if event.get("ph") != "X":
            continue
        args = event.get("args", {})
        rows.append(
            {
                "name": event["name"],
                "cat": event.get("cat", ""),
                "ts": float(event["ts"]),
                "dur": float(event.get("dur", 0.0)),
                "pid": event.get("pid"),
                "tid": event.get("tid"),
                "stream": args.get("stream"),
                "correlation": args.get("correlation"),
            }
        )
    return pd.DataFrame(rows, columns=TRACE_COLUMNS).sort_values("ts", kind="stable").reset_index(drop=True)


def gpu_events(events: pd.DataFrame) -> pd.DataFrame:
    """The events that ran on a GPU (kernels, memcpys, memsets)."""
    return events[events["cat"].isin(GPU_CATEGORIES)]


def profiled_window(events: pd.DataFrame) -> tuple[float, float]:
    """(start, end) in microseconds: the ``ProfilerStep#k`` ranges if recorded, else every event."""
    steps = events[events["name"].str.startswith("ProfilerStep#")]
    window = steps if len(steps) else events
    return float(window["ts"].min()), float((window["ts"] + window["dur"]).max())


def busy_time(intervals: pd.DataFrame) -> float:
    """Length of the union of ``[ts, ts + dur)`` intervals: overlapping work (two streams) counts once."""
    busy, cur_start, cur_end = 0.0, None, None
    for start, end in sorted(zip(intervals["ts"], intervals["ts"] + intervals["dur"], strict=True)):
        if cur_end is None or start > cur_end:
            busy += 0.0 if cur_end is None else cur_end - cur_start
            cur_start, cur_end = start, end
        else:
            cur_end = max(cur_end, end)
    return busy + (0.0 if cur_end is None else cur_end - cur_start)


def gpu_idle_fraction(events: pd.DataFrame) -> float | None:
    """Fraction of the profiled window in which no GPU work ran (``None`` when the trace has no GPU events).

    ``idle = 1 - |union of GPU intervals ∩ window| / |window|``. A high value means the GPU waits for the
    host: launch overhead, data loading, synchronizations (see :func:`host_syncs`).
    """
    gpu = gpu_events(events)
    if gpu.empty:
        return None
    start, end = profiled_window(events)
    clipped = pd.DataFrame({"ts": gpu["ts"].clip(start, end)})
    clipped["dur"] = (gpu["ts"] + gpu["dur"]).clip(start, end) - clipped["ts"]
    return 1.0 - busy_time(clipped) / (end - start)


def host_syncs(events: pd.DataFrame) -> pd.DataFrame:
    """Host calls that wait for the GPU, grouped by name: ``calls`` and ``total_us`` (index: name).

    Counts the explicit synchronizations and ``aten::item`` / ``aten::_local_scalar_dense`` from
    :data:`SYNC_NAMES`, and ``cudaMemcpy*`` runtime calls whose GPU copy went device -> host (found through
    ``correlation``). The rows nest (``aten::item`` contains ``_local_scalar_dense``, which on a GPU contains
    the memcpy and the stream sync), so read them side by side rather than summing them. On a CPU-only run
    ``aten::item`` still shows up: it is where a GPU run would stall.
    """
    dtoh = events[(events["cat"] == "gpu_memcpy") & events["name"].str.contains("DtoH")]
    is_sync = events["name"].isin(SYNC_NAMES)
    is_dtoh_copy = events["name"].str.startswith("cudaMemcpy") & events["correlation"].isin(
        dtoh["correlation"].dropna()
    )
    syncs = events[(is_sync | is_dtoh_copy) & ~events["cat"].isin(GPU_CATEGORIES)]
    table = syncs.groupby("name").agg(calls=("dur", "size"), total_us=("dur", "sum"))
    return table.sort_values("total_us", ascending=False)
