"""Several-GPU DLRM training: samples/s on 1, 2, 4 … GPUs, eager (DDP), fused, captured, sharded; scaling.

Kaggle preset (bottom 13-512-256-64-16, top 367-512-256-1, D = 16) with the 26 Kaggle table sizes (33.8M rows,
2 GiB of fp32 embeddings), SGD, uniform random ids, batch 2048 per GPU. Each world size runs in its own
processes, started the way ``torchrun`` starts them (:mod:`lecture_code.training.launch`), every backend in
turn, each rank building the model as ``python -m lecture_code.training`` does under ``torchrun``:

- ``eager`` wrapped in DDP (:mod:`lecture_code.training.distributed`);
- ``fused`` with its tables replicated and only the touched rows exchanged
  (:mod:`lecture_code.training.data_parallel`);
- ``fused-graph`` the same step, row exchange and all-reduce included, replayed from one CUDA graph per rank
  (:mod:`lecture_code.training.graphs`);
- ``sharded`` the fused step with the tables sharded over the ranks (``--shard-tables``,
  :mod:`lecture_code.training.sharded_training`; not captured: each lookup reads its split sizes on the
  host). On one rank it is the ``fused`` step: one rank holds every table, nothing moves.

``--preset terabyte``: MLPerf's DLRM (D = 128, bottom 13-512-256-128, top 1024-1024-512-256-1) on the 26
tables of Criteo 1TB (177.9M rows, 91 GB of fp32 embeddings; on 4 ranks 23 GB each). A rank times ``steps``
training steps between two barriers; the slowest rank's time counts; the median over ``repeats`` such windows
is reported.

    samples/s  = N · B · steps / seconds            scaling efficiency = samples/s(N) / (N · samples/s(1))

    python -m benchmarks.bench_ddp             # GPU: 1, 2, 4 … up to every visible GPU (NCCL)
    python -m benchmarks.bench_ddp --preset terabyte --backends sharded --world-sizes 1 4
    python -m benchmarks.bench_ddp --quick     # CPU: 1 and 2 processes (gloo), tiny tables, batch 16: seconds

Prints a table; saves CSV + PNG under benchmarks/results/ddp/ (``--results-dir`` elsewhere), stamped.
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import torch

import kernels  # noqa: F401  (decides the runtime mode first: TRITON_INTERPRET=1 before triton loads, on a CPU)
from lecture_code import bench as bu
from lecture_code.data.schema import criteo_table_rows
from lecture_code.model import DLRM, DLRMConfig
from lecture_code.perf.dlrm_step import make_batches
from lecture_code.perf.kaggle_tables import kaggle_tables
from lecture_code.training import distributed, make_optimizers, make_train_step, sharded_training
from lecture_code.training.data_parallel import make_fused_data_parallel
from lecture_code.training.graphs import make_graphed_train_step, release_graphs
from lecture_code.training.launch import spawn

BACKENDS = ("eager", "fused", "fused-graph", "sharded")
COLUMNS = [
    "backend", "world_size", "batch_per_rank", "global_batch", "ms_per_step", "samples_per_s",
    "scaling_efficiency", "error",
]  # fmt: skip


@dataclass(frozen=True)
class Spec:
    """One measurement: what every rank builds and times."""

    backend: str  # one of BACKENDS
    config: DLRMConfig
    batch: int
    device: str  # "cuda" or "cpu"; under several ranks cuda means cuda:LOCAL_RANK
    steps: int
    warmup: int
    repeats: int
    lr: float = 0.01


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    distributed.barrier()


def _build(spec: Spec, info, device: torch.device):
    """``(step, batches)`` of ``spec`` on this rank, made data-parallel or sharded over several ranks."""
    backend, graph = spec.backend.removesuffix("-graph"), spec.backend.endswith("-graph")
    sharded = backend == "sharded" and info.enabled  # on one rank: the fused step, nothing to shard
    torch.manual_seed(0)
    with device:  # the tables are allocated and initialised on the device (sharded: only this rank's)
        model = DLRM(
            spec.config, backend="eager" if backend == "eager" else "fused", embedding_optimizer="sgd",
            embedding_lr=spec.lr, table_device="meta" if sharded else None,
        )  # fmt: skip
    if sharded:
        plan = sharded_training.plan_for_training(model, device, row_wise_above_mb=None)
        sharded_training.shard_tables(model, plan, device=device)
    optimizers = [o for o in make_optimizers(model, "sgd", spec.lr) if o is not None]
    batches = make_batches(spec.config, spec.batch, 4, device, ids="uniform", seed=1 + info.rank)
    after = None
    if sharded:
        after = sharded_training.replicate_mlps(model)
    elif info.enabled and backend == "fused":
        after = make_fused_data_parallel(model)
    if graph:
        return make_graphed_train_step(model, optimizers, batches[0], after_backward=after), batches
    wrapped = distributed.wrap_model(model, device) if info.enabled and backend == "eager" else model
    return make_train_step(wrapped, optimizers, after_backward=after), batches


def _time(spec: Spec, step, batches, info, device: torch.device) -> dict:
    """Median over ``repeats`` windows of ``steps`` steps, each between two barriers; the slowest rank's."""
    for i in range(spec.warmup):
        step(batches[i % len(batches)])
    seconds = []
    for _ in range(spec.repeats):
        _sync(device)
        t0 = time.perf_counter()
        for i in range(spec.steps):
            step(batches[i % len(batches)])
        _sync(device)
        elapsed = torch.tensor([time.perf_counter() - t0], dtype=torch.float64, device=device)
        if info.enabled:  # the slowest rank's time: a step is done when every rank is
            torch.distributed.all_reduce(elapsed, op=torch.distributed.ReduceOp.MAX)
        seconds.append(float(elapsed.item()))
    s = statistics.median(seconds)
    return {
        "ms_per_step": 1e3 * s / spec.steps,
        "samples_per_s": info.world_size * spec.batch * spec.steps / s,
    }


def _refusal(spec: Spec, world_size: int) -> str | None:
    """Why ``spec`` cannot run on ``world_size`` ranks (the training loop's own check), or ``None``."""
    backend, graph = spec.backend.removesuffix("-graph"), spec.backend.endswith("-graph")
    try:
        distributed.check_distributed_config(
            "fused" if backend == "sharded" else backend, graph, world_size, backend == "sharded"
        )
    except ValueError as e:
        return str(e).split(":")[0] + " (refused by lecture_code.training.distributed)"
    return None


def _rank_bench(specs: list[Spec]) -> list[dict]:
    """Runs in each rank's process: every spec in turn (build, time, free) in one process group; rank 0's
    rows are the result. A refused spec is a row with the reason, decided before any group is made."""
    info = distributed.from_environment()
    refusals = [_refusal(spec, info.world_size) for spec in specs]
    rows = [{"error": why} if why else None for why in refusals]
    if all(refusals):
        return rows
    device = distributed.rank_device(info, specs[0].device)
    with distributed.process_group(info, device):
        for i, spec in enumerate(specs):
            if rows[i] is not None:
                continue
            step, batches = _build(spec, info, device)
            rows[i] = _time(spec, step, batches, info, device)
            del step, batches
            if device.type == "cuda":
                release_graphs()  # the captured step's memory (and its collectives) before the next model
                torch.cuda.empty_cache()
    return rows


def measure(specs: list[Spec], world_size: int) -> list[dict]:
    """The rows of ``specs`` on ``world_size`` ranks, one set of processes (error rows if they fail)."""
    try:
        results = spawn(_rank_bench, world_size, specs)[0]
    except Exception as e:  # noqa: BLE001  (a failed world size is rows with its error, never a crash)
        results = [{"error": f"{type(e).__name__}: {e}".splitlines()[0]}] * len(specs)
    rows = []
    for spec, result in zip(specs, results, strict=True):
        row = {"backend": spec.backend, "world_size": world_size, "batch_per_rank": spec.batch}
        row["global_batch"] = world_size * spec.batch
        rows.append({**row, "ms_per_step": None, "samples_per_s": None, "error": "", **result})
    return rows


def with_efficiency(rows: list[dict]) -> list[dict]:
    """Each row's ``scaling_efficiency``: its samples/s over world size × the same backend's 1-rank rate."""
    one = {r["backend"]: r["samples_per_s"] for r in rows if r["world_size"] == 1 and r["samples_per_s"]}
    out = []
    for r in rows:
        base = one.get(r["backend"])
        eff = r["samples_per_s"] / (r["world_size"] * base) if base and r["samples_per_s"] else None
        out.append({**r, "scaling_efficiency": eff})
    return out


def plot(rows: list[dict], path: Path, title: str) -> None:
    """Samples/s per backend and world size; the ideal (N × one rank) as a dashed tick; efficiency as text."""
    from matplotlib.figure import Figure

    backends = list(dict.fromkeys(r["backend"] for r in rows))
    worlds = sorted({r["world_size"] for r in rows})
    fig = Figure(figsize=(7, 4))
    ax = fig.subplots()
    width = 0.8 / len(worlds)
    for k, n in enumerate(worlds):
        for i, backend in enumerate(backends):
            row = next((r for r in rows if r["backend"] == backend and r["world_size"] == n), None)
            x = i + k * width
            if row is None or not row["samples_per_s"]:
                label = "refused" if row and "refused" in row["error"] else "failed"
                ax.text(x, 0, f" {label}", rotation=90, ha="center", va="bottom")
                continue
            ax.bar(
                x, row["samples_per_s"], width=width, color=f"C{k}", label=f"{n} rank(s)" if i == 0 else None
            )
            if row["scaling_efficiency"] is not None and n > 1:
                ax.text(
                    x,
                    row["samples_per_s"],
                    f"{100 * row['scaling_efficiency']:.0f}%",
                    ha="center",
                    va="bottom",
                )
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(backends))], backends)
    ax.set_xlim(-width, len(backends) - 1 + len(worlds) * width)
    ax.set_ylabel("samples/s (whole job)")
    ax.set_title(title, fontsize=9)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv=None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="CPU-sized run (the default on a CPU)")
    p.add_argument("--preset", choices=["kaggle", "terabyte"], default="kaggle", help="GPU: model and tables")
    p.add_argument("--batch-size", type=int, help="per rank; default 2048 (quick: 16)")
    p.add_argument(
        "--world-sizes", type=int, nargs="+", help="default: 1, 2, 4 … up to every GPU (quick: 1 2)"
    )
    p.add_argument("--backends", nargs="+", choices=BACKENDS, help="default: all (quick: no fused-graph)")
    p.add_argument("--results-dir", type=Path, help="where CSV + PNG go (default benchmarks/results)")
    args = p.parse_args(argv)
    start = time.monotonic()
    gpus = torch.cuda.device_count()
    quick = args.quick or gpus == 0
    device = torch.device("cpu" if quick else "cuda")
    preset = "small" if quick else args.preset
    if quick:  # gloo, the interpreter for the fused kernels: tiny tables, a tiny batch
        config = DLRMConfig.preset("small", kaggle_tables(cap=100), hashing="modulus")
        batch, timing, worlds = args.batch_size or 16, dict(steps=4, warmup=2, repeats=3), [1, 2]
    else:
        tables = criteo_table_rows(preset)
        config = DLRMConfig.preset(preset, tables, hashing="modulus")
        timing = dict(steps=20, warmup=5, repeats=5)
        batch, worlds = args.batch_size or 2048, sorted({1, gpus, *(n for n in (2, 4) if n <= gpus)})
    worlds = args.world_sizes or worlds
    if device.type == "cuda" and max(worlds) > gpus:
        raise SystemExit(f"--world-sizes {max(worlds)}: only {gpus} GPU(s) visible")
    backends = args.backends or [b for b in BACKENDS if not (quick and b.endswith("-graph"))]
    rows = []
    for n in worlds:  # every backend in one set of processes per world size
        rows += measure([Spec(b, config, batch, device.type, **timing) for b in backends], n)
        for r in rows[-len(backends) :]:
            print(f"  {r['backend']} on {n}: {r['samples_per_s'] or r['error']}", flush=True)
    order = {b: i for i, b in enumerate(backends)}
    rows = sorted(with_efficiency(rows), key=lambda r: (order[r["backend"]], r["world_size"]))
    rows = [{**r, "preset": preset} for r in rows]
    meta = bu.stamp(device)
    if device.type == "cuda":
        meta["device"] = f"{gpus}x {meta['device']}" if max(worlds) > 1 else meta["device"]
    bu.print_table(rows, COLUMNS)
    name = ("ddp" if preset != "terabyte" else "ddp-terabyte") + (f"-batch{batch}" if batch != 2048 else "")
    csv_path = bu.save(rows, "ddp", name, meta, root=args.results_dir)
    png_path = csv_path.with_suffix(".png")
    title = f"DLRM data-parallel, {preset} preset, batch {batch}/rank · {meta['device']}"
    plot(rows, png_path, f"{title} · torch {meta['torch']} · {meta['date'][:10]}")
    print(f"saved {csv_path} and {png_path.name} in {time.monotonic() - start:.0f} s")
    return rows


if __name__ == "__main__":
    main()
