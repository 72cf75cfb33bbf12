"""Data-parallel DLRM training: samples/s on 1 and N GPUs, eager (DDP) and fused, and the scaling efficiency.

Kaggle preset (bottom 13-512-256-64-16, top 367-512-256-1, D = 16) with the 26 Kaggle table sizes (33.8M rows,
2 GiB of fp32 embeddings), SGD, uniform random ids, batch 2048 per GPU. Each world size runs in its own
processes, started the way ``torchrun`` starts them (:mod:`lecture_code.training.launch`), each rank building
the model as ``python -m lecture_code.training`` does under ``torchrun``: ``eager`` wrapped in DDP
(:mod:`lecture_code.training.distributed`), ``fused`` with its tables replicated and only the touched rows
exchanged (:mod:`lecture_code.training.data_parallel`), ``fused-graph`` the same step, row exchange and
all-reduce included, replayed from one CUDA graph per rank (:mod:`lecture_code.training.graphs`). A rank times
``steps`` training steps between two barriers; the slowest rank's time counts; the median over ``repeats``
such windows is reported.

    samples/s  = N · B · steps / seconds            scaling efficiency = samples/s(N) / (N · samples/s(1))

    python -m benchmarks.bench_ddp             # GPU: 1 and all visible GPUs (NCCL)
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
from lecture_code.model import DLRM, DLRMConfig
from lecture_code.perf.dlrm_step import make_batches
from lecture_code.perf.kaggle_tables import kaggle_tables
from lecture_code.training import distributed, make_optimizers, make_train_step
from lecture_code.training.data_parallel import make_fused_data_parallel
from lecture_code.training.graphs import make_graphed_train_step
from lecture_code.training.launch import spawn

BACKENDS = ("eager", "fused", "fused-graph")
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


def _rank_bench(spec: Spec) -> dict:
    """Runs in each rank's process: build, make data-parallel (several ranks), time; rank 0's row is the
    result."""
    info = distributed.from_environment()
    backend, graph = spec.backend.removesuffix("-graph"), spec.backend.endswith("-graph")
    try:
        distributed.check_distributed_config(backend, graph, info.world_size)
    except ValueError as e:
        return {"error": str(e).split(":")[0] + " (refused by lecture_code.training.distributed)"}
    device = distributed.rank_device(info, spec.device)
    with distributed.process_group(info, device):
        torch.manual_seed(0)
        with device:  # the tables are allocated and initialised on the device
            model = DLRM(spec.config, backend=backend, embedding_optimizer="sgd", embedding_lr=spec.lr)
        optimizers = [o for o in make_optimizers(model, "sgd", spec.lr) if o is not None]
        batches = make_batches(spec.config, spec.batch, 4, device, ids="uniform", seed=1 + info.rank)
        after = make_fused_data_parallel(model) if info.enabled and backend == "fused" else None
        if graph:
            step = make_graphed_train_step(model, optimizers, batches[0], after_backward=after)
        else:
            wrapped = distributed.wrap_model(model, device) if info.enabled and after is None else model
            step = make_train_step(wrapped, optimizers, after_backward=after)
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


def measure(spec: Spec, world_size: int) -> dict:
    """The row of ``spec`` on ``world_size`` ranks (an error row if it fails or is refused)."""
    row = {"backend": spec.backend, "world_size": world_size, "batch_per_rank": spec.batch}
    row["global_batch"] = world_size * spec.batch
    try:
        result = spawn(_rank_bench, world_size, spec)[0]
    except Exception as e:  # noqa: BLE001  (a failed configuration is a row with its error, never a crash)
        result = {"error": f"{type(e).__name__}: {e}".splitlines()[0]}
    return {**row, "ms_per_step": None, "samples_per_s": None, "error": "", **result}


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
    p.add_argument("--batch-size", type=int, help="per rank; default 2048 (quick: 16)")
    p.add_argument("--world-sizes", type=int, nargs="+", help="default: 1 and every visible GPU (quick: 1 2)")
    p.add_argument("--backends", nargs="+", choices=BACKENDS, help="default: all (quick: no fused-graph)")
    p.add_argument("--results-dir", type=Path, help="where CSV + PNG go (default benchmarks/results)")
    args = p.parse_args(argv)
    start = time.monotonic()
    gpus = torch.cuda.device_count()
    quick = args.quick or gpus == 0
    device = torch.device("cpu" if quick else "cuda")
    if quick:  # gloo, the interpreter for the fused kernels: tiny tables, a tiny batch
        config = DLRMConfig.preset("small", kaggle_tables(cap=100), hashing="modulus")
        batch, timing, worlds = args.batch_size or 16, dict(steps=4, warmup=2, repeats=3), [1, 2]
    else:
        config = DLRMConfig.preset("kaggle", kaggle_tables(), hashing="modulus")
        batch, timing, worlds = (
            args.batch_size or 2048,
            dict(steps=20, warmup=5, repeats=5),
            sorted({1, gpus}),
        )
    worlds = args.world_sizes or worlds
    backends = args.backends or [b for b in BACKENDS if not (quick and b.endswith("-graph"))]
    rows = []
    for backend in backends:
        for n in worlds:
            if device.type == "cuda" and n > gpus:
                raise SystemExit(f"--world-sizes {n}: only {gpus} GPU(s) visible")
            rows.append(measure(Spec(backend, config, batch, device.type, **timing), n))
            print(f"  {backend} on {n}: {rows[-1]['samples_per_s'] or rows[-1]['error']}", flush=True)
    rows = [{**r, "preset": "small" if quick else "kaggle"} for r in with_efficiency(rows)]
    meta = bu.stamp(device)
    if device.type == "cuda":
        meta["device"] = f"{gpus}x {meta['device']}" if max(worlds) > 1 else meta["device"]
    bu.print_table(rows, COLUMNS)
    csv_path = bu.save(rows, "ddp", "ddp", meta, root=args.results_dir)
    png_path = csv_path.with_suffix(".png")
    title = f"DLRM data-parallel, {rows[0]['preset']} preset, batch {batch}/rank · {meta['device']}"
    plot(rows, png_path, f"{title} · torch {meta['torch']} · {meta['date'][:10]}")
    print(f"saved {csv_path} and {png_path.name} in {time.monotonic() - start:.0f} s")
    return rows


if __name__ == "__main__":
    main()
