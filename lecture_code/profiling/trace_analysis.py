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

   From that table: :func:`gpu_idle_fraction` (how much of the time the GPU spent on the profiled steps'
   kernels, matched to their launches, it ran nothing),
   :func:`host_syncs` (where the host waited for the GPU, and which op made it wait) and
   :func:`step_breakdown` (per step: host time, GPU busy time, kernels, launches, waits).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
from torch.profiler import profile

GPU_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
HOST_CUDA_CATEGORIES = (
    "cuda_runtime",
    "cuda_driver",
)  # host calls that queue GPU work (cuLaunchKernel: driver)

# CUDA runtime calls with which the host waits for the GPU. ``tensor.item()`` on a GPU tensor (also
# ``float(t)``, ``if t:``, ``t.tolist()``, ``t.cpu()``) copies device -> host and then waits for that copy,
# i.e. for every kernel queued before it: a ``cudaMemcpyAsync`` whose GPU side is a DtoH memcpy, followed by
# one of these. On a CPU tensor ``aten::item`` is a plain read and waits for nothing (Adam's ``step``
# counters live on the CPU for this reason), so ``aten::item`` alone does not mean a sync.
SYNC_CALLS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize")

# CUDA runtime / driver calls that launch a kernel (a step's "launches").
LAUNCH_CALLS = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx")

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


_WRAPPED = re.compile(r"^(?:\w+::)*(?:Kernel\d*|device_kernel)<(?:\w+::)*(\w+)")
"""CUTLASS's launch wrappers (``cutlass::Kernel2<cutlass_80_simt_sgemm_128x64_8x5_nt_align1>``): the kernel
is named by the template argument, the wrapper's own name is the same for every GEMM."""


def short_kernel_name(name: str) -> str:
    """``void at::native::(anonymous namespace)::embedding_backward_kernel<float, long>(long const*, ...)``
    → ``embedding_backward_kernel``: no return type, namespaces, template or argument list; a CUTLASS wrapper
    (``void cutlass::Kernel2<cutlass_80_simt_sgemm_128x64_8x5_nt_align1>(Params)``) → the kernel it wraps
    (``cutlass_80_simt_sgemm_128x64_8x5_nt_align1``). Names with nothing to strip
    (``triton_poi_fused_relu_0``, ``aten::mm``, ``Memcpy DtoH ...``) come back unchanged."""
    if "::" not in name or name.startswith("aten::"):
        return name
    base = name.removeprefix("void ").replace("(anonymous namespace)::", "")
    wrapped = _WRAPPED.match(base)
    if wrapped:
        return wrapped.group(1)
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


def range_share(events: pd.DataFrame, prefix: str) -> float:
    """Share of the host's ``ProfilerStep#k`` time spent inside ``record_function`` ranges whose name starts
    with ``prefix``, e.g. ``"Optimizer.step#"`` (the optimizer's step; nested ranges counted once)."""
    steps = step_ranges(events)
    if steps.empty:
        raise ValueError("no ProfilerStep#k ranges in this trace: profile with a schedule and prof.step()")
    ranges = events[(events["cat"] == "user_annotation") & events["name"].str.startswith(prefix)]
    return busy_time(ranges) / float(steps["dur"].sum())


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


def window_gpu_work(events: pd.DataFrame) -> pd.DataFrame:
    """The GPU events (kernels, copies, memsets) that the profiled steps *queued*, with their full durations.

    A GPU event belongs to the window when the host call that queued it (the ``cuda_runtime`` event with the
    same ``correlation`` id: ``cudaLaunchKernel``, ``cudaMemcpyAsync``, ...) starts inside
    :func:`profiled_window`, however late the GPU ran it: when the GPU runs behind the host (big,
    bandwidth-bound steps), the work of step ``k`` runs after the host's ``ProfilerStep#k`` has ended, and
    counting only GPU time inside the host's ranges would cut it off. Work queued before the window (still
    running at its start) is left out. A GPU event without a correlation id (a hand-made trace) counts when
    it starts inside the window.
    """
    gpu = gpu_events(events)
    if gpu.empty:
        return gpu
    start, end = profiled_window(events)
    if "correlation" not in events.columns:
        return gpu[(gpu["ts"] >= start) & (gpu["ts"] < end)]
    runtime = events[events["cat"].isin(HOST_CUDA_CATEGORIES) & events["correlation"].notna()]
    queued = runtime[(runtime["ts"] >= start) & (runtime["ts"] < end)]["correlation"]
    has_id = gpu["correlation"].notna()
    by_launch = has_id & gpu["correlation"].isin(queued)
    by_time = ~has_id & (gpu["ts"] >= start) & (gpu["ts"] < end)
    return gpu[by_launch | by_time]


def gpu_window(events: pd.DataFrame) -> tuple[float, float, float] | None:
    """``(busy, span, idle)`` of the work the profiled steps queued (:func:`window_gpu_work`), in µs and as
    a fraction; ``None`` when no GPU work was queued.

    ``busy`` is the union of those events' intervals (two streams at once count once). ``span`` runs from
    the start of the first of them to the later of the window's end and the last one's end: the time the
    GPU had this work to do. It does not start at the window's start, because a GPU that runs behind is
    still busy then with work queued before the window (not idle). ``idle = 1 - busy / span``: near 0 when
    the GPU runs behind the host (GPU-bound), ``1 - GPU work / host time`` when it waits for the host.
    """
    work = window_gpu_work(events)
    if work.empty:
        return None
    _, end = profiled_window(events)
    first = float(work["ts"].min())
    span = max(end, float((work["ts"] + work["dur"]).max())) - first
    busy = busy_time(work)
    return busy, span, (1.0 - busy / span if span > 0 else 0.0)


def gpu_idle_fraction(events: pd.DataFrame) -> float | None:
    """Share of the GPU's time on the profiled steps' work in which it ran nothing (``None`` without GPU
    work): ``1 - busy / span`` of :func:`gpu_window`, counting every GPU event the steps queued (kernels,
    copies, memsets), also the ones that ran after the host's ``ProfilerStep`` ranges ended. A high value
    means the GPU waits for the host: launch overhead, data loading, synchronizations (see
    :func:`host_syncs`).
    """
    window = gpu_window(events)
    return None if window is None else window[2]


def host_syncs(events: pd.DataFrame) -> pd.DataFrame:
    """Where the host waited for the GPU: a row per (``caused_by``, ``call``) with ``calls`` and ``total_us``.

    A wait is a :data:`SYNC_CALLS` runtime call, or a ``cudaMemcpy*`` runtime call whose GPU copy went
    device -> host (matched through ``correlation``). ``caused_by`` is the outermost ATen op around it on the
    same host thread (``aten::item`` for ``loss.item()``, ``aten::to`` for ``.cpu()``, ``aten::nonzero`` for
    a data-dependent shape), or ``"(no op)"`` for a direct call such as ``torch.cuda.synchronize()``.
    ``total_us`` is host time spent in the call: the time the host sat idle while the GPU caught up.
    Empty on a CPU-only trace: there is no device to wait for.
    """
    table = (
        sync_waits(events).groupby(["caused_by", "call"]).agg(calls=("dur", "size"), total_us=("dur", "sum"))
    )
    return table.sort_values("total_us", ascending=False)


def sync_waits(events: pd.DataFrame) -> pd.DataFrame:
    """Every host wait of :func:`host_syncs`, one row each: ``ts, dur, call, caused_by``."""
    dtoh = events[(events["cat"] == "gpu_memcpy") & events["name"].str.contains("DtoH")]
    is_runtime = events["cat"] == "cuda_runtime"
    is_dtoh_copy = events["name"].str.startswith("cudaMemcpy") & events["correlation"].isin(
        dtoh["correlation"].dropna()
    )
    waits = events[is_runtime & (events["name"].isin(SYNC_CALLS) | is_dtoh_copy)]
    ops = events[events["cat"] == "cpu_op"]
    callers = [_outermost_op(ops, w.tid, w.ts, w.ts + w.dur) for w in waits.itertuples()]
    return pd.DataFrame(
        {"ts": waits["ts"], "dur": waits["dur"], "call": waits["name"], "caused_by": callers},
        columns=["ts", "dur", "call", "caused_by"],
    )


def step_breakdown(events: pd.DataFrame) -> dict:
    """Where a profiled step's time goes, averaged over its ``ProfilerStep#k`` ranges.

    ``steps``; ``step_ms`` (host time per step: the ranges' length). GPU side, from the work the steps
    queued (:func:`window_gpu_work`: kernels, copies and memsets matched to their launch by
    ``correlation``, at their full length even when they ran after the host's ranges): ``gpu_busy_ms``
    (union of that work, per step), ``gpu_span_ms`` (:func:`gpu_window`'s span per step: from the first
    such event's start to the later of the window's end and the last one's end) and ``gpu_idle_fraction``
    (``1 - busy / span``; all three ``None`` without a GPU); ``kernels_per_step`` (those GPU events) and
    ``launches_per_step`` (:data:`LAUNCH_CALLS` on the host); ``syncs_per_step`` and ``host_wait_ms`` (the
    host waits of :func:`host_syncs` inside the ranges, per step) and ``sync_causes`` (``{op: waits per
    step}``).
    """
    steps = step_ranges(events)
    if steps.empty:
        raise ValueError("no ProfilerStep#k ranges in this trace: profile with a schedule and prof.step()")
    n = len(steps)
    start, end = profiled_window(events)
    inside = events[(events["ts"] >= start) & (events["ts"] < end)]
    window = gpu_window(events)
    waits = sync_waits(inside)
    causes = waits["caused_by"].value_counts()
    return {
        "steps": n,
        "step_ms": float(steps["dur"].sum()) / n / 1e3,
        "gpu_busy_ms": None if window is None else window[0] / n / 1e3,
        "gpu_span_ms": None if window is None else window[1] / n / 1e3,
        "gpu_idle_fraction": None if window is None else window[2],
        "kernels_per_step": len(window_gpu_work(events)) / n,
        "launches_per_step": int(inside["name"].isin(LAUNCH_CALLS).sum()) / n,
        "syncs_per_step": len(waits) / n,
        "host_wait_ms": float(waits["dur"].sum()) / n / 1e3,
        "sync_causes": {str(op): count / n for op, count in causes.items()},
    }


def _outermost_op(ops: pd.DataFrame, tid, start: float, end: float) -> str:
    around = ops[(ops["tid"] == tid) & (ops["ts"] <= start) & (ops["ts"] + ops["dur"] >= end)]
    return str(around["name"].iloc[0]) if len(around) else "(no op)"  # ops are sorted by start time
