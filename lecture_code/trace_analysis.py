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
   :func:`host_syncs` (where the host waited for the GPU, and which op made it wait).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
from torch.profiler import profile

GPU_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")

# CUDA runtime calls with which the host waits for the GPU. ``tensor.item()`` on a GPU tensor (also
# ``float(t)``, ``if t:``, ``t.tolist()``, ``t.cpu()``) copies device -> host and then waits for that copy,
# i.e. for every kernel queued before it: a ``cudaMemcpyAsync`` whose GPU side is a DtoH memcpy, followed by
# one of these. On a CPU tensor ``aten::item`` is a plain read and waits for nothing (Adam's ``step``
# counters live on the CPU for this reason), so ``aten::item`` alone does not mean a sync.
SYNC_CALLS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize")

TRACE_COLUMNS = ["name", "cat", "ts", "dur", "pid", "tid", "stream", "correlation"]


# --- op tables from the profiler object --------------------------------------------------------------------


_PYTHON_FRAME = re.compile(r"\.py\(\d+\): |^<built-in")  # with_stack rows: "file.py(12): f", "<built-in …>"
_ANNOTATION = re.compile(r"^ProfilerStep|#")  # record_function ranges, e.g. "Optimizer.step#Adam.step"


def top_ops(prof: profile, n: int = 10, by: str = "self_cpu_time_total") -> pd.DataFrame:
    """The ``n`` ops with the most self time, from ``prof.key_averages()``.

    ``by`` is ``"self_cpu_time_total"`` (host time) or ``"self_device_time_total"`` (GPU time; all zero on a
    CPU-only run). Columns: ``name, calls, self_us, total_us, share_pct`` where ``total_us`` includes callees
    and ``share_pct`` is this op's self time over the sum of all ops' self time. Python frames that
    ``with_stack=True`` records as rows of their own (``threading.py(331): wait`` from a background thread,
    ``module.py(12): forward``) are left out: they are not ops, and an idle thread's wait can top the list.
    So are ``record_function`` ranges (``ProfilerStep*``, ``Optimizer.step#Adam.step``): they contain ops.
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
        if not _PYTHON_FRAME.search(avg.key) and not _ANNOTATION.search(avg.key)
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


def top_kernels(events: pd.DataFrame, n: int = 10) -> pd.DataFrame:
    """The ``n`` GPU kernels (and copies) with the most GPU time, from the trace: same columns as
    :func:`top_ops` (``total_us == self_us``: a kernel calls nothing), ``share_pct`` of all GPU time.

    ``key_averages`` lists both an ATen op and the kernels it launched with the same device time, so its
    device-time table counts the work twice; grouping the trace's GPU events by name counts it once.
    """
    gpu = gpu_events(events)
    table = gpu.groupby("name").agg(calls=("dur", "size"), self_us=("dur", "sum")).reset_index()
    table["total_us"] = table["self_us"]
    all_gpu = table["self_us"].sum()
    table["share_pct"] = 100.0 * table["self_us"] / all_gpu if all_gpu > 0 else 0.0
    table = table.sort_values("self_us", ascending=False, kind="stable").head(n).reset_index(drop=True)
    return table[["name", "calls", "self_us", "total_us", "share_pct"]]


_TEMPLATE_OR_ARGS = re.compile(r"[<(]")


def short_kernel_name(name: str) -> str:
    """``void at::native::(anonymous namespace)::embedding_backward_kernel<float, long>(long const*, ...)``
    → ``embedding_backward_kernel``: no return type, namespaces, template or argument list. Names with
    nothing to strip (``triton_poi_fused_relu_0``, ``aten::mm``, ``Memcpy DtoH ...``) come back unchanged."""
    if "::" not in name or name.startswith("aten::"):
        return name
    base = name.removeprefix("void ").replace("(anonymous namespace)::", "")
    cut = _TEMPLATE_OR_ARGS.search(base)
    head = base[: cut.start()] if cut else base
    return head.rsplit("::", 1)[-1] or name


def profiled_window(events: pd.DataFrame) -> tuple[float, float]:
    """(start, end) in microseconds: the ``ProfilerStep#k`` ranges if recorded, else every event."""
    steps = step_ranges(events)
    window = steps if len(steps) else events
    return float(window["ts"].min()), float((window["ts"] + window["dur"]).max())


def step_ranges(events: pd.DataFrame) -> pd.DataFrame:
    """The host's ``ProfilerStep#k`` ranges (the GPU-side copies of the annotation are left out)."""
    return events[(events["cat"] == "user_annotation") & events["name"].str.startswith("ProfilerStep#")]


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
    """Where the host waited for the GPU: a row per (``caused_by``, ``call``) with ``calls`` and ``total_us``.

    A wait is a :data:`SYNC_CALLS` runtime call, or a ``cudaMemcpy*`` runtime call whose GPU copy went
    device -> host (matched through ``correlation``). ``caused_by`` is the outermost ATen op around it on the
    same host thread (``aten::item`` for ``loss.item()``, ``aten::to`` for ``.cpu()``, ``aten::nonzero`` for
    a data-dependent shape), or ``"(no op)"`` for a direct call such as ``torch.cuda.synchronize()``.
    ``total_us`` is host time spent in the call: the time the host sat idle while the GPU caught up.
    Empty on a CPU-only trace: there is no device to wait for.
    """
    dtoh = events[(events["cat"] == "gpu_memcpy") & events["name"].str.contains("DtoH")]
    is_runtime = events["cat"] == "cuda_runtime"
    is_dtoh_copy = events["name"].str.startswith("cudaMemcpy") & events["correlation"].isin(
        dtoh["correlation"].dropna()
    )
    waits = events[is_runtime & (events["name"].isin(SYNC_CALLS) | is_dtoh_copy)]
    ops = events[events["cat"] == "cpu_op"]
    callers = [_outermost_op(ops, w.tid, w.ts, w.ts + w.dur) for w in waits.itertuples()]
    table = (
        waits.assign(caused_by=callers, call=waits["name"])
        .groupby(["caused_by", "call"])
        .agg(calls=("dur", "size"), total_us=("dur", "sum"))
    )
    return table.sort_values("total_us", ascending=False)


def _outermost_op(ops: pd.DataFrame, tid, start: float, end: float) -> str:
    around = ops[(ops["tid"] == tid) & (ops["ts"] <= start) & (ops["ts"] + ops["dur"] >= end)]
    return str(around["name"].iloc[0]) if len(around) else "(no op)"  # ops are sorted by start time
