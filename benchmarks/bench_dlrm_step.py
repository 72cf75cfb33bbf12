"""Benchmark one DLRM training step (SGD), implementation by implementation: the waterfall's rows.

Kaggle preset (bottom 13-512-256-64-16, top 367-512-256-1, D = 16) with the 26 Kaggle table sizes (33.8M rows,
2 GiB of fp32 embeddings), batch 2048, uniform and Zipf ids. Per implementation
(:data:`lecture_code.perf.dlrm_step.IMPLEMENTATIONS`): ms per step in a loop (median over interleaved repeats,
with min and max), samples/s, the GPU's time of one step and the host's work per step measured apart
(``host_clean``: whether the host's clock can have held a wait), the calls per step that wait for the GPU
(``syncs_per_step``), and memory (what it keeps resident, and its peak during a step).

    python -m benchmarks.bench_dlrm_step            # GPU: the full table (≈ 2–3 min on an H100)
    python -m benchmarks.bench_dlrm_step --quick    # CPU (interpreter), tiny tables, batch 16: seconds

On a GPU each implementation runs in its own process (``--together``: all in one, timed interleaved):
a device-side assert poisons a process's CUDA context, and must cost only its own row. Prints a table; saves
CSV + PNG under benchmarks/results/dlrm_step/, stamped with device, versions, date.
``--time-limit`` (seconds, default 200) stops building further implementations once passed; those rows are
saved with the reason in ``error``. An implementation that fails is a row with its error, never a crash.

A bf16-MLP row (GPU) is also checked for what it learns: after its timing, it and fp32 eager train from one
seed on the synthetic Criteo data for ``--auc-steps`` steps (default 300, evaluated every ``--auc-every``;
:func:`lecture_code.perf.auc_trajectory.auc_gap_vs_eager`), and its rows get ``auc_gap``, the largest
|holdout AUC difference|, and ``auc_steps`` (RESULTS.md's goal: ≤ 1e-3 over 300 steps). ``--auc-steps 0``
skips it.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

import torch

import kernels  # noqa: F401  (decides the runtime mode first: TRITON_INTERPRET=1 before triton loads, on a CPU)
from lecture_code import bench as bu
from lecture_code.model import DLRMConfig
from lecture_code.perf.auc_trajectory import auc_gap_vs_eager, criteo_batches
from lecture_code.perf.dlrm_step import GPU_ONLY, IMPLEMENTATIONS, StepMeasurement, make_batches, measure
from lecture_code.perf.kaggle_tables import kaggle_tables

COLUMNS = [
    "implementation", "ids", "ms_per_step", "ms_min", "ms_max", "gpu_ms", "host_ms", "samples_per_s",
    "state_mib", "peak_mib", "syncs_per_step", "host_clean", "auc_gap", "error",
]  # fmt: skip


def plot(rows: list[dict], path: Path, title: str) -> None:
    """Bars of ms/step per implementation, one colour per id distribution, min–max as error bars."""
    from matplotlib.figure import Figure

    names = list(dict.fromkeys(r["implementation"] for r in rows))
    dists = list(dict.fromkeys(r["ids"] for r in rows))
    fig = Figure(figsize=(9, 0.55 * len(names) + 1.6))
    ax = fig.subplots()
    height = 0.8 / len(dists)
    for k, dist in enumerate(dists):
        sel = {r["implementation"]: r for r in rows if r["ids"] == dist}
        ys = [i + k * height for i in range(len(names))]
        ms = [sel[n]["ms_per_step"] if n in sel else math.nan for n in names]
        lo = [m - sel[n]["ms_min"] if n in sel else 0 for m, n in zip(ms, names, strict=True)]
        hi = [sel[n]["ms_max"] - m if n in sel else 0 for m, n in zip(ms, names, strict=True)]
        ax.barh(ys, ms, height=height, xerr=[lo, hi], label=f"{dist} ids")
        for y, m in zip(ys, ms, strict=True):
            if not math.isnan(m):
                ax.text(m, y, f" {m:.2f}", va="center", fontsize=8)
    ax.set_yticks([i + 0.4 - height / 2 for i in range(len(names))], names)
    ax.invert_yaxis()
    ax.set_xlabel("ms per training step (median of interleaved repeats; bars: min–max)")
    ax.set_title(title, fontsize=9)
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def _isolated(names: list[str], args, device: torch.device, start: float) -> list[dict]:
    """Each implementation in its own process: a device-side assert (an index out of range, say) poisons
    the whole CUDA context, so in one process the first failure would take every later row with it."""
    rows = []
    for name in names:
        left = args.time_limit - (time.monotonic() - start)
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "rows.json"
            cmd = [sys.executable, "-m", "benchmarks.bench_dlrm_step", "--only", name,
                   "--rows-json", str(out), "--time-limit", str(max(left, 1.0))]  # fmt: skip
            if args.batch_size:
                cmd += ["--batch-size", str(args.batch_size)]
            for option in ("auc_steps", "auc_every"):  # the bf16 rows' AUC check, as asked
                if getattr(args, option, None) is not None:
                    cmd += ["--" + option.replace("_", "-"), str(getattr(args, option))]
            done = subprocess.run(cmd, capture_output=True, text=True)
            print(done.stdout, end="")
            if done.returncode == 0 and out.exists():
                rows += json.loads(out.read_text())
                continue
        errors = [ln for ln in done.stderr.splitlines() if "Error" in ln or "Assertion" in ln]
        why = (errors[-1] if errors else f"exit {done.returncode}").strip()[:200]
        print(f"{name!r} failed in its own process: {why}")
        nan = math.nan
        for ids in ("uniform", "zipf"):
            rows.append(asdict(StepMeasurement(name, ids, nan, nan, nan, None, nan, nan, None, None, why)))
    return rows


def add_auc_gaps(rows: list[dict], config: DLRMConfig, device: torch.device, batch: int, args, deadline):
    """Each bf16 row that ran: train it and fp32 eager side by side (module docstring), its ``auc_gap`` and
    ``auc_steps`` set on its rows of both id distributions; past ``deadline`` it is skipped, said so."""
    checked = [n for n in dict.fromkeys(r["implementation"] for r in rows if not r["error"]) if "bf16" in n]
    if not checked or args.auc_steps < 1:
        return
    train, holdout = criteo_batches(batch, device)
    for name in checked:
        if time.monotonic() > deadline:
            print(f"{name!r}: AUC check skipped, past the time limit")
            continue
        t0 = time.monotonic()
        got = auc_gap_vs_eager(
            name, config, device, train, holdout, steps=args.auc_steps, every=args.auc_every
        )
        print(f"{name!r} against fp32 eager, {args.auc_steps} steps: max |Δ AUC| {got['max |Δ AUC|']:.2e} "
              f"(last AUC {got['auc'][-1]:.4f}, eager's {got['reference_auc'][-1]:.4f}) "
              f"in {time.monotonic() - t0:.0f} s")  # fmt: skip
        for r in rows:
            if r["implementation"] == name:
                r.update(auc_gap=got["max |Δ AUC|"], auc_steps=args.auc_steps)


def results_folder(batch: int, quick: bool) -> str:
    """``dlrm_step`` for the goals' batch (2048) and the CPU's quick run, ``dlrm_step_batch<N>`` for any other
    batch: notebook 05 and RESULTS.md read the newest CSV of a folder as that batch's table."""
    return "dlrm_step" if quick or batch == 2048 else f"dlrm_step_batch{batch}"


def main(argv=None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="CPU-sized run (the default on a CPU)")
    p.add_argument("--batch-size", type=int, help="default 2048 (quick: 16)")
    p.add_argument("--only", nargs="+", choices=IMPLEMENTATIONS, help="a subset of the implementations")
    p.add_argument("--time-limit", type=float, default=200.0, help="seconds before skipping the rest")
    p.add_argument("--results-dir", type=Path, help="where CSV + PNG go (default benchmarks/results)")
    p.add_argument(
        "--together", action="store_true", help="GPU: all implementations in this process (interleaved)"
    )
    p.add_argument("--auc-steps", type=int, default=300, help="bf16 rows: steps of the AUC check (0: none)")
    p.add_argument("--auc-every", type=int, default=50, help="bf16 rows: evaluate the AUC every N steps")
    p.add_argument("--rows-json", type=Path, help=argparse.SUPPRESS)  # a child of _isolated: rows go here
    args = p.parse_args(argv)
    start = time.monotonic()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    bu.setup(device)
    quick = args.quick or not bu.on_gpu(device)
    names = list(args.only or IMPLEMENTATIONS)
    if quick:  # the interpreter runs Triton programs one by one: tiny tables, a tiny batch, one repeat
        config = DLRMConfig.preset("small", kaggle_tables(cap=100), hashing="modulus")
        batch, timing = args.batch_size or 16, dict(steps=1, warmup=1, repeats=1, hidden_reps=1)
        names = [n for n in names if n not in GPU_ONLY and not n.startswith("compile")]
    else:
        config = DLRMConfig.preset("kaggle", kaggle_tables(), hashing="modulus")
        batch, timing = args.batch_size or 2048, dict(steps=20, warmup=3, repeats=5, hidden_reps=5)
        if not bu.on_gpu(device):
            names = [n for n in names if n not in GPU_ONLY]
    preset = "small" if quick else "kaggle"
    if bu.on_gpu(device) and not quick and not args.together and args.rows_json is None and len(names) > 1:
        rows = _isolated(names, args, device, start)
    else:
        batches = {ids: make_batches(config, batch, 4, device, ids=ids) for ids in ("uniform", "zipf")}
        results = measure(names, config, device, batches, deadline=start + args.time_limit, **timing)
        rows = [asdict(r) for r in results]
        add_auc_gaps(rows, config, device, batch, args, deadline=start + args.time_limit)
    rows = [{**r, "batch": batch, "preset": preset} for r in rows]
    if args.rows_json is not None:
        args.rows_json.write_text(json.dumps(rows))
        return rows
    meta = bu.stamp(device)
    bu.print_table(rows, COLUMNS)
    csv_path = bu.save(rows, results_folder(batch, quick), "dlrm_step", meta, root=args.results_dir)
    png_path = csv_path.with_suffix(".png")
    title = f"DLRM step, {preset} preset, batch {batch}\n{meta['device']} · torch {meta['torch']}"
    plot([r for r in rows if not r["error"]], png_path, f"{title} · {meta['date'][:10]}")
    print(f"saved {csv_path} and {png_path.name} in {time.monotonic() - start:.0f} s")
    return rows


if __name__ == "__main__":
    main()
