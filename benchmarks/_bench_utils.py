"""Small helpers shared by the benchmark scripts: timing, copy ceiling, stamp, table, CSV + PNG.

Timing is the median of many runs: ``triton.testing.do_bench`` on a GPU (CUDA events, L2 flushed between
runs), a ``time.perf_counter`` loop on a CPU (where Triton kernels run in the interpreter and only show that
the script works, not how fast anything is).
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

RESULTS = Path(__file__).resolve().parent / "results"


def on_gpu(device: torch.device) -> bool:
    return device.type == "cuda"


def setup(device: torch.device) -> None:
    """On a CPU, one torch thread: CPU timings only show that the script works, and with several OpenMP
    threads on a busy 2-core machine they are dominated by contention (milliseconds for a µs kernel)."""
    if not on_gpu(device):
        torch.set_num_threads(1)


def median_ms(fn: Callable[[], object], device: torch.device, cpu_reps: int = 5) -> float:
    """Median wall time of ``fn()`` in milliseconds on ``device``."""
    if on_gpu(device):
        return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")
    fn()  # warm up (compiles, caches)
    times = []
    for _ in range(cpu_reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times)


def copy_gbps(numel: int, dtype: torch.dtype, device: torch.device) -> float:
    """Measured ``y.copy_(x)`` bandwidth in GB/s (bytes read + written): the memory-bound ceiling."""
    x = torch.randn(numel, device=device).to(dtype)
    y = torch.empty_like(x)
    ms = median_ms(lambda: y.copy_(x), device)
    return 2 * numel * x.element_size() / (ms * 1e6)


def compiled(fn: Callable) -> Callable:
    """A fresh ``torch.compile`` of ``fn`` specialised to the next shapes it sees (dynamo cache reset, so a
    long sweep never hits the recompile limit and silently falls back to eager)."""
    torch._dynamo.reset()
    return torch.compile(fn, dynamic=False)


def stamp(device: torch.device) -> dict[str, str]:
    """Where and with what a result was measured."""
    name = torch.cuda.get_device_name(device) if on_gpu(device) else f"CPU ({platform.processor() or 'cpu'})"
    return {
        "device": name,
        "torch": torch.__version__,
        "triton": triton.__version__,
        "date": dt.datetime.now().isoformat(timespec="seconds"),
    }


def print_table(rows: list[dict], columns: list[str]) -> None:
    widths = {c: max(len(c), *(len(_fmt(r.get(c))) for r in rows)) for c in columns}
    print("  ".join(c.rjust(widths[c]) for c in columns))
    for r in rows:
        print("  ".join(_fmt(r.get(c)).rjust(widths[c]) for c in columns))


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.1f}" if abs(v) >= 10 else f"{v:.3g}"
    return "" if v is None else str(v)


def save(rows: list[dict], folder: str, name: str, meta: dict[str, str]) -> Path:
    """Write ``rows`` stamped with ``meta`` to results/<folder>/<name>_<device>_<date>.csv; return it."""
    out_dir = RESULTS / folder
    out_dir.mkdir(parents=True, exist_ok=True)
    slug = re.sub(r"[^A-Za-z0-9]+", "-", meta["device"]).strip("-").lower()
    path = out_dir / f"{name}_{slug}_{meta['date'][:10]}.csv"
    rows = [{**r, **meta} for r in rows]
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


def plot(rows, panels: list[tuple[str, str]], x: str, y: str, ceiling: str, path: Path, meta, xlabel=None):
    """A panel per (kernel, dtype), a line per provider, the measured copy ceiling dashed; saves ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    kernels, dtypes = list(dict.fromkeys(k for k, _ in panels)), list(dict.fromkeys(d for _, d in panels))
    fig, axes = plt.subplots(
        len(kernels), len(dtypes), figsize=(5.5 * len(dtypes), 4 * len(kernels)), squeeze=False
    )
    for kernel, dtype in panels:
        ax = axes[kernels.index(kernel)][dtypes.index(dtype)]
        sel = [r for r in rows if r["kernel"] == kernel and r["dtype"] == dtype]
        for provider in dict.fromkeys(r["provider"] for r in sel):
            pts = [r for r in sel if r["provider"] == provider]
            ax.plot([r[x] for r in pts], [r[y] for r in pts], marker="o", label=provider)
        ceil = {r[x]: r[ceiling] for r in sel}
        ax.plot(list(ceil), list(ceil.values()), "k--", label="copy ceiling (y.copy_(x))")
        ax.set_xscale("log", base=2)
        ax.set_xlabel(xlabel or x)
        ax.set_ylabel(y)
        ax.set_title(f"{kernel}, {dtype}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"{meta['device']} · torch {meta['torch']} · triton {meta['triton']} · {meta['date'][:10]}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
