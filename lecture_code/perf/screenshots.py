"""Redraw every picture in ``perf_screenshots/`` from real runs: ``python -m lecture_code.perf.screenshots``.

==========================  ====================================================================  ==========
picture                     what it shows                                                         from
==========================  ====================================================================  ==========
``dlrm_timeline.png``       3 profiled training steps: GPU kernels per stream (host ops on a CPU)  profiler
``dlrm_op_breakdown.png``   ops by self time (GPU time on a GPU, host time on a CPU)              profiler
``host_sync.png``           finding 1: ``loss.item()`` every step vs loss kept on the device      timing
``host_sync_timeline.png``  finding 1 in a trace: the host waits in ``aten::item``                profiler
``hash_cost.png``           finding 2: index hash vs searchsorted vs modulus as V grows           timing
``hashing_stages.png``      finding 3: step time at each stage of fixing the lookup               timing
``eager_vs_compiled.png``   step time and memory per step, eager vs ``torch.compile``             timing
``netron_dlrm.png``         the exported ONNX graph in Netron (needs Chromium + Playwright)       export
==========================  ====================================================================  ==========

Every PNG gets a JSON sidecar (same name, ``.json``): the command, device, versions, date, the settings and
the measured rows. Settings by machine: ``gpu`` (kaggle preset, batch 2048), ``cpu`` (small preset, batch
512) and ``--tiny`` (seconds; for tests). The committed set comes from a GPU run; CPU and tiny runs write to
the git-ignored ``runs/perf_screenshots_cpu`` or ``runs/perf_screenshots_tiny`` (unless ``--out`` says
otherwise), so they never overwrite it.

    python -m lecture_code.perf.screenshots                     # everything this machine can draw
    python -m lecture_code.perf.screenshots --only hash_cost    # one picture
    python -m lecture_code.perf.screenshots --tiny --data DIR --out DIR
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import shlex
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from lecture_code.environment import REPO_ROOT, describe
from lecture_code.environment import device as default_device

__all__ = ["PICTURES", "SETTINGS", "Settings", "committed", "main", "write_sidecar"]


@dataclass(frozen=True)
class Settings:
    preset: str
    batch_size: int
    steps: int  # timed steps per repeat
    warmup: int
    repeats: int
    hash_vocab_sizes: tuple[int, ...]
    hash_batch: int
    host_sync_batches: tuple[int, ...]  # finding 1 is timed at each of these batch sizes


SETTINGS = {
    "gpu": Settings("kaggle", 2048, 50, 5, 5, (1_000, 10_000, 100_000, 1_000_000), 4096, (2048, 8192, 32768)),
    "cpu": Settings("small", 512, 8, 2, 3, (1_000, 10_000, 100_000), 1024, (512,)),
    "tiny": Settings("small", 64, 2, 1, 1, (100, 1_000), 256, (64,)),
}


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


def committed(name: str, folder: Path | None = None) -> tuple[Path, dict]:
    """A picture of ``perf_screenshots/`` and its sidecar: ``(png path, sidecar dict)`` (for notebooks)."""
    png = (folder or REPO_ROOT / "perf_screenshots") / f"{name}.png"
    return png, json.loads(png.with_suffix(".json").read_text(encoding="utf-8"))


def write_sidecar(png: Path, ctx: Context, results: list[dict], **extra) -> Path:
    """``<png>.json``: what made the picture and what it measured."""
    info = {
        "picture": png.name,
        "command": ctx.command,
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        **describe(),
        "settings": asdict(ctx.settings),
        **extra,
        "results": results,
    }
    sidecar = png.with_suffix(".json")
    sidecar.write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    return sidecar


def _rows(timings) -> list[dict]:
    return [t.as_row() for t in timings]


def draw_profile(ctx: Context) -> list[Path]:
    from lecture_code.perf.workload import profile_training_steps
    from lecture_code.trace_analysis import gpu_idle_fraction, host_syncs, top_kernels, top_ops
    from lecture_code.trace_plots import plot_op_breakdown, plot_timeline

    prof, events = profile_training_steps(ctx.workload, ctx.run_dir / "profile")
    idle = gpu_idle_fraction(events)
    if idle is None:  # a CPU run: where the host's time goes, by op
        ops, what = top_ops(prof, n=12), "self host time by ATen op (key_averages)"
    else:  # a GPU run: where the GPU's time goes, by kernel
        ops, what = (
            top_kernels(events, n=12),
            f"GPU time by kernel; the GPU idles {100 * idle:.0f}% of the steps",
        )
    timeline = plot_timeline(
        events, ctx.out / "dlrm_timeline.png", f"DLRM training, 3 profiled steps\n{ctx.device_line}"
    )
    breakdown = plot_op_breakdown(
        ops, ctx.out / "dlrm_op_breakdown.png", f"DLRM training step: {what}\n{ctx.subtitle}"
    )
    extra = {"gpu_idle_fraction": idle, "host_syncs": host_syncs(events).reset_index().to_dict("records")}
    write_sidecar(timeline, ctx, [], **extra)
    write_sidecar(breakdown, ctx, ops.to_dict("records"), ranked_by=what)
    return [timeline, breakdown]


def draw_host_sync(ctx: Context) -> list[Path]:
    from lecture_code.perf.charts import bar_chart
    from lecture_code.perf.host_sync import measure_host_sync, measure_launch_blocking
    from lecture_code.perf.workload import profile_training_steps
    from lecture_code.trace_analysis import gpu_idle_fraction, host_syncs
    from lecture_code.trace_plots import plot_timeline

    s = ctx.settings
    rows = []
    for batch_size in s.host_sync_batches:
        for timing in measure_host_sync(ctx.workload_at(batch_size), **ctx.timing_kwargs()):
            rows.append(
                {**timing.as_row(), "label": f"B={batch_size}: {timing.label}", "batch_size": batch_size}
            )
    note = "CUDA_LAUNCH_BLOCKING=1 is measured on a GPU only (it changes nothing on a CPU)"
    if ctx.workload.device.type == "cuda":
        timing = measure_launch_blocking(ctx.data_dir, s.preset, s.batch_size, s.steps, s.warmup, s.repeats)
        rows.append(
            {**timing.as_row(), "label": f"B={s.batch_size}: {timing.label}", "batch_size": s.batch_size}
        )
        note = "CUDA_LAUNCH_BLOCKING=1 measured in a child process (the variable is read when CUDA starts)"
    subtitle = f"{ctx.device_line}\nDLRM preset {s.preset}"
    png = bar_chart(
        rows, ctx.out / "host_sync.png", "Finding 1: a host sync in every training step", subtitle
    )
    write_sidecar(png, ctx, rows, note=note)

    middle = s.host_sync_batches[len(s.host_sync_batches) // 2]
    _, events = profile_training_steps(
        ctx.workload_at(middle), ctx.run_dir / "profile_item", read_loss_every_step=True
    )
    title = f"DLRM training with loss.item() every step, batch {middle}: 3 profiled steps\n{ctx.device_line}"
    timeline = plot_timeline(events, ctx.out / "host_sync_timeline.png", title)
    syncs = host_syncs(events).reset_index().to_dict("records")
    write_sidecar(timeline, ctx, [], gpu_idle_fraction=gpu_idle_fraction(events), host_syncs=syncs)
    return [png, timeline]


def draw_hash_cost(ctx: Context) -> list[Path]:
    from lecture_code.perf.charts import hash_cost_chart
    from lecture_code.perf.hash_cost import time_hashes

    s = ctx.settings
    device = default_device()
    rows = time_hashes(s.hash_vocab_sizes, s.hash_batch, device)
    png = hash_cost_chart(rows, ctx.out / "hash_cost.png", ctx.device_line)
    write_sidecar(png, ctx, rows)
    return [png]


def draw_hashing_stages(ctx: Context) -> list[Path]:
    from lecture_code.perf.charts import bar_chart
    from lecture_code.perf.hashing_stages import measure_hashing_stages

    rows = _rows(measure_hashing_stages(ctx.workload, **ctx.timing_kwargs()))
    png = bar_chart(
        rows,
        ctx.out / "hashing_stages.png",
        "Finding 3: fixing the id → row lookup, stage by stage",
        ctx.subtitle,
    )
    write_sidecar(png, ctx, rows)
    return [png]


def draw_eager_vs_compiled(ctx: Context) -> list[Path]:
    from lecture_code.perf.charts import bar_chart
    from lecture_code.perf.eager_vs_compiled import measure_eager_vs_compiled

    rows = _rows(measure_eager_vs_compiled(ctx.workload, **ctx.timing_kwargs()))
    metrics = (
        ("ms_per_step", "time per training step (ms)"),
        ("peak_step_mb", "memory one step allocates (MB)"),
    )
    png = bar_chart(
        rows,
        ctx.out / "eager_vs_compiled.png",
        "DLRM training step: eager vs torch.compile",
        ctx.subtitle,
        metrics,
    )
    write_sidecar(png, ctx, rows)
    return [png]


def draw_netron(ctx: Context) -> list[Path]:
    from lecture_code import export_cli

    png = ctx.out / "netron_dlrm.png"
    onnx_path = REPO_ROOT / "data" / "dlrm_modulus.onnx"
    export_cli.main(["--hashing", "modulus", "--out", str(onnx_path), "--screenshot", str(png)])
    return [png]


def netron_available() -> tuple[bool, str]:
    from importlib.util import find_spec

    from lecture_code.netron_view import find_chromium

    missing = [m for m in ("netron", "playwright", "onnx") if find_spec(m) is None]
    if missing:
        return False, f"not installed: {', '.join(missing)}"
    if find_chromium() is None:
        return False, "no Chromium found"
    return True, ""


PICTURES: dict[str, Callable[[Context], list[Path]]] = {
    "profile": draw_profile,
    "host_sync": draw_host_sync,
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
    for name in names:
        if name == "netron":
            ok, why = netron_available()
            if not ok:
                print(f"[skip] netron: {why}")
                continue
        print(f"[draw] {name} ...", flush=True)
        for png in PICTURES[name](ctx):
            print(f"       {png}")
            made.append(png)
    return made


if __name__ == "__main__":
    main()
