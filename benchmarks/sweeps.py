"""What the config sweeps (``sweep_lora_small_m``, ``sweep_multi_lora_decode``) share: the command line, the
runtime (bf16 on a GPU; fp32 and tiny sizes in the interpreter), a call's time replayed from a CUDA graph, a
failure as a reason, and the stamped CSV."""

from __future__ import annotations

import argparse
import warnings
from collections.abc import Callable
from pathlib import Path

import torch

import kernels  # noqa: F401  (decides the runtime mode first)
from kernels import runtime
from lecture_code import bench as bu


def graph_us(fn: Callable[[], object], device: torch.device) -> float:
    """µs of ``fn``: on a GPU the device time of the call replayed from a CUDA graph; CPU: a plain call."""
    return 1e3 * bu.median_ms(bu.graphed(fn, device) if bu.on_gpu(device) else fn, device)


def reason(e: Exception) -> str:
    """A candidate that does not compile or answers wrong, as the row's ``why``."""
    return f"{type(e).__name__}: {str(e)[:160]}"


def main(
    doc: str, run_shape, shapes, quick_shapes, folder: str, report, top: int, argv=None, name=None
) -> None:
    """Parse the command line, run ``run_shape(*shape, dtype, device, quick)`` per shape, then
    ``report(rows, top)``, print the reasons of the rows not timed and save the CSV under
    ``<results>/<folder>/`` (named ``name``, default ``<folder>_sweep``)."""
    p = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="tiny sizes (the default on a CPU)")
    p.add_argument("--top", type=int, default=top, help="candidates printed per table (all are saved)")
    p.add_argument("--results-dir", type=Path, help="where the CSV goes (default benchmarks/results)")
    args = p.parse_args(argv)
    device = runtime.default_device()
    bu.setup(device)
    quick = args.quick or not bu.on_gpu(device)
    dtype = torch.bfloat16 if bu.on_gpu(device) else torch.float32
    rows = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        for shape in quick_shapes if quick else shapes:
            rows += run_shape(*shape, dtype, device, quick)
    report(rows, args.top)
    for why in dict.fromkeys(r["why"] for r in rows if r.get("why")):
        print(f"[not timed] {why}")
    meta = {**bu.stamp(device), "dtype": str(dtype).removeprefix("torch.")}
    path = bu.save(rows, folder, name or f"{folder}_sweep", meta, root=args.results_dir)
    print(f"saved {path}")
