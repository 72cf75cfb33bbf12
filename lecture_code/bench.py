"""The one timer, for benchmarks and notebooks alike, and what a benchmark saves: stamp, table, CSV + PNG.

Two numbers per call on a GPU, because a small kernel has two costs:

- **device time** (:func:`median_ms`): CUDA events around ``fn()``, median of many runs, L2 flushed before
  each. Before each run the GPU is also kept busy by a sleep kernel (≈ 0.5 ms, or twice the host time of one
  call where that is longer), so the host has enqueued all of ``fn``'s launches before the start event fires:
  the time is the GPU's, whatever Python does around it.
  Plain ``triton.testing.do_bench`` hides host overhead only up to the length of its L2 flush (≈ 85 µs on an
  H100); a call that spends longer than that in Python (autotuner dispatch, argument checks, guards) leaks
  the difference into the "kernel" time. That is what made a first H100 run show Triton kernels at 25–60% of
  the copy reference at 1024–4096 rows, while the same kernels launched bare ran at 95–115%.
- **host time** (:func:`host_us`): CPU microseconds per call, enqueueing without waiting. When it exceeds
  the device time, a loop of such calls is launch-bound: the GPU waits for Python (CUDA graphs, or
  ``torch.compile(mode="reduce-overhead")``, take the host out of the loop: :func:`graphed`).
- **wall time per call** (:func:`wall_us`): a loop of calls from first launch to the GPU's last finished
  kernel, divided by the calls — what a loop of such calls takes, host or device, whichever sets the pace.

On a CPU, a ``time.perf_counter`` loop (Triton kernels run in the interpreter there: the numbers only show
that the script works, not how fast anything is).
"""

from __future__ import annotations

import csv
import datetime as dt
import platform
import re
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch
import triton
import triton.testing

from lecture_code.internals import gpu_sleep, gpu_sleep_available
from lecture_code.paths import RESULTS_DIR  # what README and notebooks read


def on_gpu(device: torch.device) -> bool:
    return device.type == "cuda"


def setup(device: torch.device) -> None:
    """On a CPU, one torch thread: CPU timings only show that the script works, and with several OpenMP
    threads on a busy 2-core machine they are dominated by contention (milliseconds for a µs kernel)."""
    if not on_gpu(device):
        torch.set_num_threads(1)


SLEEP_CYCLES = 1_000_000  # ≈ 0.5 ms at the H100's 1.7–2 GHz; _device_ms sleeps longer for a slower call
_flush: dict[torch.device, torch.Tensor] = {}


def median_ms(fn: Callable[[], object], device: torch.device, cpu_reps: int = 5) -> float:
    """Median time of ``fn()`` in milliseconds: device time on a GPU (see the module docstring)."""
    if on_gpu(device):
        if not gpu_sleep_available():  # private but long-lived; without it, the usual do_bench
            return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")
        return _device_ms(fn, device)
    fn()  # warm up (compiles, caches)
    times = []
    for _ in range(cpu_reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times)


def _device_ms(fn: Callable[[], object], device: torch.device, budget_ms: float = 100.0) -> float:
    if device not in _flush:  # 256 MB, five times the H100's 50 MB L2, as do_bench uses
        _flush[device] = torch.empty(256 * 2**20, dtype=torch.int8, device=device)
    flush = _flush[device]
    for _ in range(3):  # warm up: compiles, autotunes, caches
        fn()
    torch.cuda.synchronize(device)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    t0 = time.perf_counter()
    for _ in range(5):
        fn()
    host_s = (time.perf_counter() - t0) / 5
    end.record()
    torch.cuda.synchronize(device)
    reps = int(min(200, max(20, budget_ms / max(start.elapsed_time(end) / 5, 1e-3))))
    # the sleep outlasts the host's enqueueing: twice one call's host time at 2 GHz, at least SLEEP_CYCLES
    sleep = max(SLEEP_CYCLES, int(2 * host_s * 2e9))
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for i in range(reps):
        flush.zero_()
        gpu_sleep(sleep)  # the GPU waits here while the host enqueues fn's launches
        starts[i].record()
        fn()
        ends[i].record()
    torch.cuda.synchronize(device)
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends, strict=True))


def host_us(fn: Callable[[], object], device: torch.device, calls: int = 100) -> float | None:
    """CPU microseconds per ``fn()`` call, enqueued back to back without waiting (GPU only, else None)."""
    if not on_gpu(device):
        return None
    for _ in range(3):
        fn()
    torch.cuda.synchronize(device)
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize(device)
    return 1e6 * (t1 - t0) / calls


def wall_us(
    fn: Callable[[], object], device: torch.device, calls: int = 100, budget_ms: float = 200
) -> float:
    """Wall-clock microseconds per ``fn()`` in a loop of back-to-back calls, the GPU synchronized before and
    after (so the slower of host and device sets it; no L2 flush). ``calls`` of them, fewer (at least 3)
    where they would take longer than ``budget_ms`` (a slow call, or the Triton interpreter on a CPU)."""
    t0 = time.perf_counter()
    for _ in range(2):  # warm up, and size the loop
        fn()
    if on_gpu(device):
        torch.cuda.synchronize(device)
    per_call_ms = 1e3 * (time.perf_counter() - t0) / 2
    calls = max(3, min(calls, int(budget_ms / max(per_call_ms, 1e-6))))
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    if on_gpu(device):
        torch.cuda.synchronize(device)
    return 1e6 * (time.perf_counter() - t0) / calls


def graphed(fn: Callable[[], object], device: torch.device) -> Callable[[], None]:
    """``fn`` captured in a CUDA graph (after a warm-up on a side stream, which also compiles and autotunes);
    returns the graph's replay. Tensors ``fn`` allocates are the graph's own: a replay rewrites them.

    A capture that raises (``fn`` syncs, allocates outside the pool, …) is left half-done in torch's CUDA
    generator: in that process every later random draw on the device then raises "Offset increment outside
    graph capture encountered unexpectedly" (seen on the H200 with torch 2.11 in ``bench_lora``, and reported
    by others). The benchmarks that capture draw their inputs with a seeded CPU generator."""
    s = torch.cuda.Stream(device)
    s.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(s):
        for _ in range(2):
            fn()
    torch.cuda.current_stream(device).wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph.replay


def copy_gbps(numel: int, dtype: torch.dtype, device: torch.device) -> float:
    """Measured ``y.copy_(x)`` bandwidth in GB/s (bytes read + written): the copy *reference* for memory-bound
    kernels. Not a ceiling: sizes that stay in L2 (50 MB on an H100), or a kernel that reads more than it
    writes, can exceed it."""
    x = torch.randn(numel, device=device).to(dtype)
    y = torch.empty_like(x)
    ms = median_ms(lambda: y.copy_(x), device)
    return 2 * numel * x.element_size() / (ms * 1e6)


def compiled(fn: Callable, **options) -> Callable:
    """A fresh ``torch.compile`` of ``fn`` specialised to the next shapes it sees (dynamo cache reset, so a
    long sweep never hits the recompile limit and silently falls back to eager); ``options`` go to
    ``torch.compile`` (``mode=``, ``fullgraph=``)."""
    torch.compiler.reset()
    return torch.compile(fn, dynamic=False, **options)


def stamp(device: torch.device) -> dict[str, str]:
    """Where and with what a result was measured."""
    name = torch.cuda.get_device_name(device) if on_gpu(device) else f"CPU ({platform.processor() or 'cpu'})"
    return {
        "device": name,
        "torch": torch.__version__,
        "triton": triton.__version__,
        "date": dt.datetime.now().isoformat(timespec="seconds"),
    }


def csv_number(v) -> float | None:
    """A CSV cell as a float; None where it is empty, NaN or not a number (a column an older CSV lacks)."""
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return None if f != f else f


def print_table(rows: list[dict], columns: list[str]) -> None:
    widths = {c: max(len(c), *(len(_fmt(r.get(c))) for r in rows)) for c in columns}
    print("  ".join(c.rjust(widths[c]) for c in columns))
    for r in rows:
        print("  ".join(_fmt(r.get(c)).rjust(widths[c]) for c in columns))


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.1f}" if abs(v) >= 10 else f"{v:.3g}"
    return "" if v is None else str(v)


def save(rows: list[dict], folder: str, name: str, meta: dict[str, str], root: Path | None = None) -> Path:
    """Write ``rows`` stamped with ``meta`` to <root>/<folder>/<name>_<device>_<date>.csv; return it.

    ``root`` defaults to ``benchmarks/results`` (the committed results); pass e.g. ``benchmarks/results/tmp``
    (git-ignored) for trial runs."""
    out_dir = (root or RESULTS_DIR) / folder
    out_dir.mkdir(parents=True, exist_ok=True)
    slug = re.sub(r"[^A-Za-z0-9]+", "-", meta["device"]).strip("-").lower()
    path = out_dir / f"{name}_{slug}_{meta['date'][:10]}.csv"
    rows = [{**r, **meta} for r in rows]
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


def plot(rows, panels: list[tuple[str, str]], x: str, y: str, reference: str, path: Path, meta, xlabel=None):
    """A panel per (kernel, dtype), a line per provider, the copy reference dashed; writes ``path``."""
    from matplotlib.figure import Figure

    kernels, dtypes = list(dict.fromkeys(k for k, _ in panels)), list(dict.fromkeys(d for _, d in panels))
    fig = Figure(figsize=(5.5 * len(dtypes), 4 * len(kernels)))
    axes = fig.subplots(len(kernels), len(dtypes), squeeze=False)
    for kernel, dtype in panels:
        ax = axes[kernels.index(kernel)][dtypes.index(dtype)]
        sel = [r for r in rows if r["kernel"] == kernel and r["dtype"] == dtype]
        for provider in dict.fromkeys(r["provider"] for r in sel):
            pts = [r for r in sel if r["provider"] == provider]
            ax.plot([r[x] for r in pts], [r[y] for r in pts], marker="o", label=provider)
        ref = {r[x]: r[reference] for r in sel}
        ax.plot(list(ref), list(ref.values()), "k--", label="copy reference (y.copy_(x))")
        ax.set_xscale("log", base=2)
        ax.set_xlabel(xlabel or x)
        ax.set_ylabel(y)
        ax.set_title(f"{kernel}, {dtype}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"{meta['device']} · torch {meta['torch']} · triton {meta['triton']} · {meta['date'][:10]}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
