"""Redraw every picture in ``perf_screenshots/`` from real runs: ``python -m lecture_code.perf.screenshots``.

===============================  ===============================================================  ==========
picture                          what it shows                                                    from
===============================  ===============================================================  ==========
``dlrm_timeline.png``            3 steps, light profile: host threads above the GPU streams      profiler
``dlrm_op_breakdown.png``        GPU time by kernel (host self time by op on a CPU)               profiler
``host_sync.png``                finding 1: ``loss.item()`` every step vs loss on the device      timing
``host_sync_timeline.png``       finding 1 in a trace: the host waits in ``aten::item``           profiler
``step_anatomy.png``             wall vs GPU busy vs host waits as the batch grows                both
``kaggle_tables.png``            the data's small tables vs the Kaggle tables (2 GiB)             both
``kaggle_tables_timeline.png``   a step with the Kaggle tables, light profile                     profiler
``hash_cost.png``                finding 2: index hash vs searchsorted vs modulus as V grows      timing
``hash_all_features.png``        finding 2: all 26 features, one module each vs one batched       timing
``hashing_stages.png``           finding 3: step time at each stage of fixing the lookup          timing
``eager_vs_compiled.png``        step time and memory per step, eager vs ``torch.compile``        timing
``netron_dlrm.png``              the exported ONNX graph in Netron (needs Chromium + Playwright)  export
===============================  ===============================================================  ==========

Every PNG gets a JSON sidecar (same name, ``.json``, see :mod:`.sidecars`): the command, device, versions,
date, the settings and the measured rows (every timed repeat: repeats are interleaved across the compared
configurations). Settings by machine: ``gpu`` (kaggle preset, batch 2048), ``cpu`` (small preset, batch 512;
the Kaggle tables are skipped: with Adam's state they need ~9 GB) and ``--tiny`` (seconds; for tests; Kaggle
tables capped at 200 rows). The committed set comes from a GPU run; CPU and tiny runs write to the
git-ignored ``runs/perf_screenshots_cpu`` or ``runs/perf_screenshots_tiny`` (unless ``--out`` says
otherwise), so they never overwrite it.

    python -m lecture_code.perf.screenshots --skip netron       # on a GPU: the committed set (a few minutes)
    python -m lecture_code.perf.screenshots --only hash_cost    # one experiment
    python -m lecture_code.perf.screenshots --tiny --data DIR --out DIR
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import shlex
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from lecture_code import bench
from lecture_code.environment import describe
from lecture_code.environment import device as default_device
from lecture_code.paths import REPO_ROOT
from lecture_code.perf.sidecars import committed, current, write_sidecar

__all__ = ["PICTURES", "SETTINGS", "Settings", "Skip", "committed", "current", "main"]


@dataclass(frozen=True)
class Settings:
    preset: str
    batch_size: int
    steps: int  # timed steps per repeat
    warmup: int
    repeats: int  # interleaved across the configurations one picture compares
    hash_vocab_sizes: tuple[int, ...]
    hash_batch: int
    host_sync_batches: tuple[int, ...]  # finding 1 is timed at each of these batch sizes
    anatomy_batches: tuple[int, ...]  # step_anatomy: wall vs GPU busy vs waits at each of these
    kaggle_tables: bool  # measure the Kaggle-size tables at all
    kaggle_cap: int | None  # at most this many rows per Kaggle table (None: the real sizes)


SETTINGS = {
    "gpu": Settings(
        "kaggle", 2048, 50, 5, 5, (1_000, 10_000, 100_000, 1_000_000), 4096, (2048, 8192, 32768),
        (2048, 8192, 32768), True, None,
    ),
    "cpu": Settings("small", 512, 8, 2, 3, (1_000, 10_000, 100_000), 1024, (512,), (256, 1024), False, None),
    "tiny": Settings("small", 64, 2, 1, 2, (100, 1_000), 256, (64,), (64, 128), True, 200),
}  # fmt: skip


class Skip(Exception):
    """Raised by a picture that this machine cannot draw; ``main`` prints the reason and goes on."""


@dataclass
class Context:
    out: Path
    run_dir: Path  # traces go here (git-ignored)
    data_dir: str | None
    settings: Settings
    command: str
    _workload: object = None

    @property
    def workload(self):
        if self._workload is None:
            self._workload = self.workload_at(self.settings.batch_size)
        return self._workload

    def workload_at(self, batch_size: int):
        from lecture_code.perf.workload import load_workload

        if batch_size == self.settings.batch_size and self._workload is not None:
            return self._workload
        return load_workload(self.data_dir, self.settings.preset, batch_size)

    @property
    def device_line(self) -> str:
        env = describe()
        return f"{env['device']} · torch {env['torch']} · triton {env['triton']} · {dt.date.today()}"

    @property
    def subtitle(self) -> str:
        return f"{self.device_line}\nDLRM preset {self.settings.preset}, batch {self.settings.batch_size}"

    def timing_kwargs(self) -> dict:
        s = self.settings
        return {"steps": s.steps, "warmup": s.warmup, "repeats": s.repeats}

    def sidecar(self, png: Path, results: list[dict], **extra) -> Path:
        return write_sidecar(png, self.command, self.settings, results, **extra)


def _rows(timings, samples: bool = True) -> list[dict]:
    return [t.as_row(samples=samples) for t in timings]


def draw_profile(ctx: Context) -> list[Path]:
    from lecture_code.perf.profiler_cost import measure_profiler_cost
    from lecture_code.profiling.trace_analysis import (
        host_syncs,
        range_share,
        top_kernels,
        top_ops,
        window_gpu_work,
    )
    from lecture_code.profiling.trace_plots import plot_op_breakdown, plot_timeline, timeline_lanes

    cost = measure_profiler_cost(ctx.workload, ctx.run_dir / "profile", **ctx.timing_kwargs())
    light, row, events = cost["light"], cost["unprofiled"], cost["light_events"]
    if light["gpu_busy_ms"] is None:  # a CPU run: where the host's time goes, by op
        ops, what = top_ops(cost["light_prof"], n=12), "self host time by ATen op (key_averages)"
    else:  # a GPU run: where the GPU's time goes, by kernel
        busy, wall = light["gpu_busy_ms"], row["ms_per_step"]
        ops = top_kernels(window_gpu_work(events), n=12)  # the kernels the profiled steps launched
        what = f"GPU time by kernel; the GPU works {busy:.1f} ms per {wall:.1f} ms step"
    title = f"DLRM training, 3 steps (light profile: no shapes, memory, stacks)\n{ctx.subtitle}"
    timeline = plot_timeline(events, ctx.out / "dlrm_timeline.png", title)
    breakdown = plot_op_breakdown(
        ops, ctx.out / "dlrm_op_breakdown.png", f"DLRM training step: {what}\n{ctx.subtitle}"
    )
    extra = {
        "gpu_idle_fraction": light["gpu_idle_fraction"],  # the light profile's, as drawn
        "unprofiled": row,
        "light_profile": light,
        "heavy_profile": cost["heavy"],
        "optimizer_share": range_share(events, "Optimizer.step#"),
        "lanes": list(timeline_lanes(events)),
        "host_syncs": host_syncs(events).reset_index().to_dict("records"),
    }
    ctx.sidecar(timeline, [], **extra)
    ctx.sidecar(breakdown, ops.to_dict("records"), ranked_by=what)
    return [timeline, breakdown]


def draw_host_sync(ctx: Context) -> list[Path]:
    from lecture_code.perf.charts import bar_chart
    from lecture_code.perf.host_sync import measure_host_sync, measure_launch_blocking
    from lecture_code.perf.workload import profile_training_steps
    from lecture_code.profiling.trace_analysis import gpu_idle_fraction, host_syncs
    from lecture_code.profiling.trace_plots import plot_timeline

    s = ctx.settings
    rows = []
    for batch_size in s.host_sync_batches:
        for timing in measure_host_sync(ctx.workload_at(batch_size), **ctx.timing_kwargs()):
            row = timing.as_row(samples=True)
            rows.append({**row, "label": f"B={batch_size}: {timing.label}", "batch_size": batch_size})
    note = "CUDA_LAUNCH_BLOCKING=1 is measured on a GPU only (it changes nothing on a CPU)"
    if ctx.workload.device.type == "cuda":
        timing = measure_launch_blocking(ctx.data_dir, s.preset, s.batch_size, s.steps, s.warmup, s.repeats)
        row = timing.as_row(samples=True)
        rows.append({**row, "label": f"B={s.batch_size}: {timing.label}", "batch_size": s.batch_size})
        note = "CUDA_LAUNCH_BLOCKING=1 measured in a child process (the variable is read when CUDA starts)"
    subtitle = (
        f"{ctx.device_line}\nDLRM preset {s.preset}; bars: median, whiskers: min-max of {s.repeats} repeats"
    )
    png = bar_chart(
        rows, ctx.out / "host_sync.png", "Finding 1: a host sync in every training step", subtitle
    )
    ctx.sidecar(png, rows, note=note)

    middle = s.host_sync_batches[len(s.host_sync_batches) // 2]
    _, events = profile_training_steps(
        ctx.workload_at(middle), ctx.run_dir / "profile_item", read_loss_every_step=True, detail=False
    )
    title = f"DLRM training with loss.item() every step, batch {middle}: 3 profiled steps\n{ctx.device_line}"
    timeline = plot_timeline(events, ctx.out / "host_sync_timeline.png", title)
    syncs = host_syncs(events).reset_index().to_dict("records")
    ctx.sidecar(timeline, [], gpu_idle_fraction=gpu_idle_fraction(events), host_syncs=syncs)
    return [png, timeline]


def _bar_metrics(rows, metrics):
    """The metrics every row has a value for (GPU-only columns are ``None`` on a CPU)."""
    return tuple((k, label) for k, label in metrics if all(r.get(k) is not None for r in rows))


def draw_step_anatomy(ctx: Context) -> list[Path]:
    from lecture_code.perf.charts import bar_chart
    from lecture_code.perf.step_anatomy import explain, measure_step_anatomy

    s = ctx.settings
    workloads = [ctx.workload_at(b) for b in s.anatomy_batches]
    rows = measure_step_anatomy(workloads, ctx.run_dir / "anatomy", **ctx.timing_kwargs())
    metrics = _bar_metrics(
        rows,
        (
            ("ms_per_step", "wall per step, no profiler (ms)"),
            ("gpu_busy_ms", "GPU busy per step (ms)"),
            ("host_busy_ms", "host working per step (ms)"),
            ("host_wait_ms", "host waiting for the GPU (ms/step)"),
        ),
    )
    png = bar_chart(
        rows,
        ctx.out / "step_anatomy.png",
        "Where a step's time goes as the batch grows",
        f"{ctx.device_line}\nDLRM preset {s.preset}; GPU busy and waits from a light profile",
        metrics,
    )
    ctx.sidecar(png, rows, explanation=explain(rows))
    return [png]


def draw_kaggle_tables(ctx: Context) -> list[Path]:
    from lecture_code.perf.charts import bar_chart
    from lecture_code.perf.kaggle_tables import measure_table_sizes
    from lecture_code.profiling.trace_analysis import step_breakdown
    from lecture_code.profiling.trace_plots import plot_timeline

    s = ctx.settings
    if not s.kaggle_tables:
        raise Skip("the Kaggle tables (2 GiB, ~9 GB with gradients and Adam's state) are measured on a GPU")
    rows, events = measure_table_sizes(
        ctx.workload, ctx.run_dir / "kaggle_tables", cap=s.kaggle_cap, **ctx.timing_kwargs()
    )
    bars = [{**r, "label": f"{r['label']} ({r['embedding_mb']:,.0f} MB)"} for r in rows]
    metrics = _bar_metrics(
        rows, (("ms_per_step", "wall per step, no profiler (ms)"), ("gpu_busy_ms", "GPU busy per step (ms)"))
    )
    capped = "" if s.kaggle_cap is None else f" (capped at {s.kaggle_cap} rows per table)"
    png = bar_chart(
        bars,
        ctx.out / "kaggle_tables.png",
        f"The same step with the data's tables and with the Kaggle tables{capped}",
        f"{ctx.subtitle}; modulus hash, Adam",
        metrics,
    )
    ctx.sidecar(png, rows, kaggle_cap=s.kaggle_cap)
    title = f"DLRM training with the Kaggle tables{capped}, 3 steps (light profile)\n{ctx.subtitle}"
    timeline = plot_timeline(events, ctx.out / "kaggle_tables_timeline.png", title)
    ctx.sidecar(timeline, [], light_profile=step_breakdown(events), kaggle_cap=s.kaggle_cap)
    return [png, timeline]


def draw_hash_cost(ctx: Context) -> list[Path]:
    from lecture_code.perf.charts import bar_chart, hash_cost_chart
    from lecture_code.perf.hash_cost import time_all_features, time_hashes

    s = ctx.settings
    rows = time_hashes(s.hash_vocab_sizes, s.hash_batch, ctx.workload.device)
    png = hash_cost_chart(rows, ctx.out / "hash_cost.png", ctx.device_line)
    ctx.sidecar(png, rows, timer="lecture_code.bench.median_ms")

    wl = ctx.workload
    rows = time_all_features(wl.metadata, wl.batches[0].sparse)
    for r in rows:
        r["label"] = r["hash"]
    metrics = _bar_metrics(
        rows,
        (
            ("ms", "device time per call (ms)"),
            ("host_us", "host time per call (µs)"),
            ("aten_ops", "ATen ops per call"),
            ("launches", "kernel launches per call"),
        ),
    )
    subtitle = (
        f"{ctx.device_line}\n[B, F] = [{rows[0]['batch']}, {rows[0]['features']}] ids, the data's tables"
    )
    png2 = bar_chart(
        rows, ctx.out / "hash_all_features.png", "Hashing all features of a batch", subtitle, metrics
    )
    ctx.sidecar(png2, rows, timer="lecture_code.bench.median_ms, lecture_code.bench.host_us")
    return [png, png2]


def draw_hashing_stages(ctx: Context) -> list[Path]:
    from lecture_code.perf.charts import bar_chart
    from lecture_code.perf.hashing_stages import measure_hashing_stages

    rows = _rows(measure_hashing_stages(ctx.workload, **ctx.timing_kwargs()))
    png = bar_chart(
        rows,
        ctx.out / "hashing_stages.png",
        "Finding 3: fixing the id → row lookup, stage by stage",
        f"{ctx.subtitle}; whiskers: min-max of {ctx.settings.repeats} interleaved repeats",
    )
    ctx.sidecar(png, rows)
    return [png]


def draw_eager_vs_compiled(ctx: Context) -> list[Path]:
    from lecture_code.perf.charts import bar_chart
    from lecture_code.perf.eager_vs_compiled import measure_eager_vs_compiled

    rows = _rows(measure_eager_vs_compiled(ctx.workload, **ctx.timing_kwargs()), samples=False)
    metrics = (
        ("ms_per_step", "time per training step (ms)"),
        ("peak_step_mib", "memory one step allocates (MiB)"),
    )
    png = bar_chart(
        rows,
        ctx.out / "eager_vs_compiled.png",
        "DLRM training step: eager vs torch.compile",
        ctx.subtitle,
        metrics,
    )
    ctx.sidecar(png, rows)
    return [png]


def draw_netron(ctx: Context) -> list[Path]:
    from importlib.util import find_spec

    from lecture_code.export import cli as export_cli
    from lecture_code.export.netron import find_chromium

    missing = [m for m in ("netron", "playwright", "onnx") if find_spec(m) is None]
    if missing:
        raise Skip(f"not installed: {', '.join(missing)}")
    if find_chromium() is None:
        raise Skip("no Chromium found")
    png = ctx.out / "netron_dlrm.png"
    onnx_path = REPO_ROOT / "data" / "dlrm_modulus.onnx"
    # paths relative to the working directory: the sidecars record the command, and no machine path
    args = ["--hashing", "modulus", "--out", os.path.relpath(onnx_path), "--screenshot", os.path.relpath(png)]
    export_cli.main(args)
    return [png, png.with_name("netron_dlrm_crop.png")]  # the CLI writes the overview and a readable crop


PICTURES: dict[str, Callable[[Context], list[Path]]] = {
    "profile": draw_profile,
    "host_sync": draw_host_sync,
    "step_anatomy": draw_step_anatomy,
    "kaggle_tables": draw_kaggle_tables,
    "hash_cost": draw_hash_cost,
    "hashing_stages": draw_hashing_stages,
    "eager_vs_compiled": draw_eager_vs_compiled,
    "netron": draw_netron,
}


def main(argv: list[str] | None = None) -> list[Path]:
    p = argparse.ArgumentParser(
        prog="python -m lecture_code.perf.screenshots", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--only", nargs="+", choices=list(PICTURES), help="draw only these (default: all)")
    p.add_argument("--skip", nargs="+", choices=list(PICTURES), default=[], help="do not draw these")
    p.add_argument("--tiny", action="store_true", help="seconds-long settings (tests, CI)")
    p.add_argument("--data", help="preprocessed Criteo folder (default: the synthetic default data)")
    p.add_argument("--out", type=Path, help="folder for PNGs + sidecars (default: see above)")
    p.add_argument("--run-dir", type=Path, help="folder for profiler traces (default: runs/perf_screenshots)")
    args = p.parse_args(argv)

    on_gpu = default_device().type == "cuda"
    kind = "tiny" if args.tiny else "gpu" if on_gpu else "cpu"
    out = args.out or REPO_ROOT / ("perf_screenshots" if kind == "gpu" else f"runs/perf_screenshots_{kind}")
    out.mkdir(parents=True, exist_ok=True)
    ctx = Context(
        out=out,
        run_dir=args.run_dir or REPO_ROOT / "runs" / "perf_screenshots",
        data_dir=args.data,
        settings=SETTINGS[kind],
        command=shlex.join(
            ["python", "-m", "lecture_code.perf.screenshots", *(argv if argv is not None else sys.argv[1:])]
        ),
    )
    names = [n for n in (args.only or PICTURES) if n not in args.skip]
    made = []
    threads = torch.get_num_threads()
    bench.setup(default_device())  # on a CPU: one torch thread (timings only show that the code runs)
    try:
        for name in names:
            print(f"[draw] {name} ...", flush=True)
            try:
                pngs = PICTURES[name](ctx)
            except Skip as why:
                print(f"[skip] {name}: {why}")
                continue
            for png in pngs:
                print(f"       {png}")
                made.append(png)
    finally:
        torch.set_num_threads(threads)
    return made


if __name__ == "__main__":
    main()
