"""Benchmark multi-LoRA serving: ``y[t] += s · x[t] A[id]ᵀ B[id]ᵀ`` for a batch of tokens on many adapters.

Times the shapes of RESULTS.md's goals (H100, bf16; 8 adapters, r = 16, K = N = 4096, one slice,
T = 16 … 16384) and sweeps adapters, rank and slices around it. Providers (every one checked against
``kernels.reference.multi_lora`` before it is timed):

- ``ours`` (``kernels.multi_lora.shrink_expand.add_multi_lora``, default path and deterministic mode,
  metadata built once per step and reused, as a model's layers would), ``ours fused``, ``ours split``,
  ``ours one launch``, ``ours split atomic`` (the paths; the cost of determinism is the split row
  against the atomic one); ``ours + meta`` builds the metadata in the call; ``meta`` is that build alone;
- ``ours (graph)``: metadata + kernels captured in a CUDA graph, replayed (no host time); ``ours, meta given
  (graph)``: the kernels alone in the graph, the metadata built once outside it, as ``vllm (graph)`` runs;
- ``torch loop``: one pass per adapter (``kernels.reference.multi_lora_loop_``, a host sync per adapter);
- ``torch gather+bmm``: every token's weights gathered, two ``bmm`` (``multi_lora_gather_bmm_``), eager and
  in a CUDA graph; skipped where the gathered weights exceed ``GATHER_LIMIT_MB``;
- ``vllm``, ``vllm (graph)``: vLLM's ``lora_shrink`` + ``lora_expand``, eager and in a CUDA graph
  (:mod:`benchmarks.peer_vllm`: vLLM where installed, else the kernel files fetched into ``build/peers/``:
  carry that folder to a GPU machine without a registry); where they cannot run, a printed reason says why.

Columns: median device time in µs (``lecture_code.bench.median_ms``: host hidden, L2 flushed), host µs per
call, effective GB/s on the bytes that must move (x read, y read and written, the weights of adapters that
have tokens) and that as % of the measured copy reference for the same bytes; RESULTS.md's goal and
whether ``ours`` met it.

    python -m benchmarks.fetch_peers                 # once, where pip reaches a registry: vLLM's kernel files
    python -m benchmarks.bench_multi_lora            # GPU: the goals' table + the sweep
    python -m benchmarks.bench_multi_lora --quick    # tiny sizes (CPU: Triton runs in the interpreter)
    python -m benchmarks.bench_multi_lora --results-dir benchmarks/results/tmp   # a trial run (git-ignored)

Prints a table; saves CSV + PNG under benchmarks/results/multi_lora/, stamped with device, versions, date.
"""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path

import torch

import kernels  # noqa: F401  (decides the runtime mode first)
from kernels import reference, runtime
from kernels.multi_lora.metadata import build_meta
from kernels.multi_lora.shrink_expand import add_multi_lora
from lecture_code import bench as bu
from lecture_code.results.goals import goals_for

# (T, L, r, slice widths, K). The first four rows are the shapes of RESULTS.md's goals.
GOAL_SHAPES = [(T, 8, 16, (4096,), 4096) for T in (16, 256, 4096, 16384)]
SWEEP = [
    (256, 1, 16, (4096,), 4096),
    (256, 32, 16, (4096,), 4096),
    (256, 8, 64, (4096,), 4096),
    (256, 8, 128, (4096,), 4096),
    (16, 8, 16, (4096, 1024, 1024), 4096),  # Q, K, V of a GQA layer
    (4096, 8, 16, (4096, 1024, 1024), 4096),
    (16, 32, 16, (14336, 14336), 4096),  # gate, up of an MLP
]
QUICK = [(4, 3, 8, (64,), 64), (33, 3, 8, (64,), 64), (17, 4, 8, (32, 16, 16), 64)]
GATHER_LIMIT_MB = 2048
SCALE = 2.0
ONE, ONE_GRAPH = "ours one launch", "ours one launch, meta given (graph)"  # path="one_launch"


def goal_bounds() -> dict[int, tuple[float | None, float | None]]:
    """``{T: (µs bound, % of copy bound)}`` for the goals' rows, read from the one goals table
    (:mod:`lecture_code.results.goals`: keys ``"T=16 µs"``, ``"T=4096 % copy"`` …); ``None``: no goal."""
    goals: dict[int, tuple[float | None, float | None]] = {}
    for goal in goals_for("multi_lora"):
        tokens, measure = goal.key.removeprefix("T=").split(" ", 1)
        us, pct = goals.get(int(tokens), (None, None))
        goals[int(tokens)] = (goal.bound, pct) if measure == "µs" else (us, goal.bound)
    return goals


GOALS = goal_bounds()


def _vllm_provider(x, a, b, ids):
    """vLLM's shrink + expand as one call (:func:`benchmarks.peer_vllm.add_lora`), or the reason it cannot run
    here (not installed nor fetched, a dtype its kernels refuse, an API that moved)."""
    from benchmarks import peer_vllm

    ops, why = peer_vllm.installed_or_fetched()
    if ops is None:
        return None, why
    if x.dtype not in (torch.float16, torch.bfloat16):
        return None, f"vLLM's kernels take float16 or bfloat16, not {str(x.dtype).removeprefix('torch.')}"
    try:
        return peer_vllm.add_lora(ops, x, list(a), list(b), ids, SCALE), None
    except Exception as e:  # noqa: BLE001 — an API that moved: report, do not guess
        return None, f"vLLM's API differs here ({ops.source}; {type(e).__name__}: {e})"


def providers(y, x, a, b, ids, widths, device) -> tuple[dict, list[str]]:
    """name → fn() (in place on y) and the reasons for providers skipped."""
    L = a[0].shape[0]
    meta = build_meta(ids, L)
    one = len(widths) == 1
    A, B = (a[0], b[0]) if one else (a, b)
    skipped = []

    def ours(**kw):
        return lambda: add_multi_lora(y, x, A, B, ids, SCALE, meta=meta, **kw)

    out = {
        "ours": ours(),
        "ours fused": ours(path="fused"),
        "ours split": ours(path="split"),
        "ours split atomic": ours(path="split", deterministic=False),
        ONE: ours(path="one_launch"),
        "ours + meta": lambda: add_multi_lora(y, x, A, B, ids, SCALE),
        "meta": lambda: build_meta(ids, L),
        "torch loop": lambda: reference.multi_lora_loop_(y, x, A, B, ids, SCALE),
    }
    gather_mb = x.shape[0] * a[0].shape[1] * (x.shape[1] + sum(widths)) * x.element_size() / 2**20
    if gather_mb <= GATHER_LIMIT_MB:
        out["torch gather+bmm"] = lambda: reference.multi_lora_gather_bmm_(y, x, A, B, ids, SCALE)
    else:
        skipped.append(f"torch gather+bmm: {gather_mb:.0f} MB of gathered weights > {GATHER_LIMIT_MB} MB")
    if bu.on_gpu(device):
        out["ours (graph)"] = bu.graphed(
            lambda: add_multi_lora(y, x, A, B, ids, SCALE, meta=build_meta(ids, L)), device
        )
        out["ours, meta given (graph)"] = bu.graphed(out["ours"], device)  # as vllm (graph): meta outside
        try:  # the newest path: a failure here is a reason, not the end of the run
            out[ONE_GRAPH] = bu.graphed(out[ONE], device)
        except Exception as e:  # noqa: BLE001
            skipped.append(f"{ONE_GRAPH}: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
        if "torch gather+bmm" in out:
            out["torch gather+bmm (graph)"] = bu.graphed(out["torch gather+bmm"], device)
    run, why = _vllm_provider(x, a, b, ids)
    if run is not None:
        name = "vllm"
        try:  # a peer: checked here, so a failure or a wrong answer is a reason to leave it out, not a crash
            _check(name, lambda: run(y), y, y.clone(), x, a, b, ids, one)
            out[name] = lambda: run(y)
            if bu.on_gpu(device):
                name = "vllm (graph)"
                out[name] = bu.graphed(out["vllm"], device)
        except Exception as e:  # noqa: BLE001
            skipped.append(f"{name}: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
    else:
        skipped.append(f"vllm: {why}")
    return out, skipped


def _check(name, fn, y, y0, x, a, b, ids, one) -> None:
    """Never time a wrong answer: one call (y holding y0) against the fp32 reference; y is y0 again after."""
    if name in ("meta",) or "(graph)" in name:
        return  # the graphs replay the checked calls
    A, B = (a[0], b[0]) if one else (a, b)
    want = reference.multi_lora(y0.float(), x.float(), _f32(A), _f32(B), ids, SCALE) - y0.float()
    fn()
    got = y.float() - y0.float()
    y.copy_(y0)
    err = ((got - want).norm() / want.norm().clamp(min=1e-12)).item()
    if not err < 3e-2:
        raise AssertionError(f"{name}: relative error {err:.3g} against the fp32 reference")


def _f32(t):
    return t.float() if isinstance(t, torch.Tensor) else [s.float() for s in t]


def bytes_moved(T, K, widths, r, n_active, e) -> int:
    """x read, y read and written, A and B of the adapters that have tokens (ids: negligible)."""
    N = sum(widths)
    return T * K * e + 2 * T * N * e + n_active * r * (len(widths) * K + N) * e


def run_shape(T, L, r, widths, K, dtype, device, copy_cache: dict) -> tuple[list[dict], list[str]]:
    # Inputs from a seeded CPU generator, moved: the device's generator is never drawn from after a capture
    # (a failed one leaves it refusing every draw: lecture_code.bench.graphed).
    g = torch.Generator().manual_seed(T * 31 + L * 7 + r + sum(widths))

    def randn(*shape, scale=1.0):
        return (torch.randn(*shape, generator=g) * scale).to(device, dtype)

    x, y = randn(T, K), randn(T, sum(widths))
    a = [randn(L, r, K, scale=K**-0.5) for _ in widths]
    b = [randn(L, n, r, scale=r**-0.5) for n in widths]
    ids = torch.randint(-1, L, (T,), generator=g).to(device)  # about 1 in L + 1 tokens without an adapter
    n_active = int((torch.bincount(ids.clamp(min=0)[ids >= 0], minlength=L) > 0).sum())
    moved = bytes_moved(T, K, widths, r, n_active, x.element_size())
    numel = moved // (2 * x.element_size())
    if numel not in copy_cache:
        copy_cache[numel] = bu.copy_gbps(numel, dtype, device)
    copy = copy_cache[numel]
    label = f"T={T} L={L} r={r} N={'+'.join(map(str, widths))}"
    fns, skipped = providers(y, x, a, b, ids, widths, device)
    rows, y_start = [], y.clone()
    for name, fn in fns.items():
        y.copy_(y_start)  # the previous provider's timing loop kept adding into y: a bf16 y that large
        try:  # would round the small update away
            _check(name, fn, y, y_start, x, a, b, ids, len(widths) == 1)
        except Exception as e:  # noqa: BLE001 — the newest path's failure is a reason; any other stops the run
            if name not in (ONE, ONE_GRAPH):
                raise
            skipped.append(f"{type(e).__name__}: {str(e).splitlines()[0][:200]}")  # the message names it
            continue
        ms = bu.median_ms(fn, device)
        gbps = moved / (ms * 1e6) if name != "meta" else None
        rows.append({"shape": label, "T": T, "L": L, "r": r, "slices": len(widths), "provider": name,
                     "us": 1e3 * ms, "host us": bu.host_us(fn, device), "GB/s": gbps,
                     "% copy": None if gbps is None else 100 * gbps / copy, "MB moved": moved / 1e6,
                     "goal": None, "met": None})  # fmt: skip
    goal = GOALS.get(T) if (L, r, widths, K) == (8, 16, (4096,), 4096) else None
    if goal is not None:
        ours = next(r for r in rows if r["provider"] == "ours")
        us_goal, pct_goal = goal
        met = (us_goal is None or ours["us"] <= us_goal) and (pct_goal is None or ours["% copy"] >= pct_goal)
        text = " and ".join(
            s for s in (us_goal and f"≤ {us_goal:g} µs", pct_goal and f"≥ {pct_goal:g}% copy") if s
        )
        ours["goal"] = text
        ours["met"] = "yes" if met else "no"
    return rows, [f"{label}: {s}" for s in skipped]


RIVALS = ("torch loop", "torch gather+bmm", "vllm")  # the other providers without a graph


def _versus(by: dict, mine: str, rivals, prefix: str) -> dict:
    """``mine`` against the fastest of ``rivals`` (device µs), both with their host µs per call."""
    timed = {p: bu.csv_number(by[p]["us"]) for p in rivals if p in by}
    timed = {p: us for p, us in timed.items() if us is not None}
    ours = by.get(mine, {})
    line = {
        f"{prefix}ours us": bu.csv_number(ours.get("us")),
        f"{prefix}ours host us": bu.csv_number(ours.get("host us")),
    }
    best = min(timed, key=timed.get) if timed else None
    line[f"{prefix}best other"] = best or "not measured"
    line[f"{prefix}its us"] = timed.get(best)
    line[f"{prefix}its host us"] = bu.csv_number(by[best]["host us"]) if best else None
    mine_us = line[f"{prefix}ours us"]
    line[f"{prefix}its us / ours"] = timed[best] / mine_us if best and mine_us else None
    return line


def summary(rows: list[dict]) -> list[dict]:
    """Per shape (rows as the CSV holds them): ``ours`` against the fastest provider without a graph
    (:data:`RIVALS`), and ours in a graph (``ours, meta given (graph)`` where the CSV has it, as the peers'
    graphs hold no metadata step; else ``ours (graph)``) against the fastest other graphed provider, each by
    device µs (``us``) with the host µs per call (``host us``) beside it; ``ours``'s % of the copy
    reference, goal and whether it was met; the determinism cost (the split path against its atomic mode,
    in device time)."""
    out = []
    for shape in dict.fromkeys(r["shape"] for r in rows):
        by = {r["provider"]: r for r in rows if r["shape"] == shape}
        graphed = [p for p in by if p.endswith("(graph)") and not p.startswith("ours")]
        ours_graph = "ours, meta given (graph)" if "ours, meta given (graph)" in by else "ours (graph)"
        line = {
            "shape": shape,
            **_versus(by, "ours", RIVALS, ""),
            **_versus(by, ours_graph, graphed, "graph: "),
        }
        goal = by["ours"].get("goal")
        line["% copy"] = bu.csv_number(by["ours"].get("% copy"))
        line["goal"] = goal if isinstance(goal, str) and goal else "no goal"
        line["met"] = by["ours"].get("met") if line["goal"] != "no goal" else ""
        split, atomic = (bu.csv_number(by.get(p, {}).get("us")) for p in ("ours split", "ours split atomic"))
        line["determinism %"] = 100 * (split / atomic - 1) if split and atomic else None
        out.append(line)
    return out


def plot(rows, path: Path, meta) -> None:
    """The goals' sweep over T: µs per provider (left) and % of the copy reference (right)."""
    import matplotlib
    from matplotlib.figure import Figure

    first = rows[0]  # the goals' sweep over T comes first (8 adapters, r 16, one slice; quick: its own)
    sel = [
        r
        for r in rows
        if (r["L"], r["r"], r["slices"]) == (first["L"], first["r"], first["slices"])
        and r["provider"] != "meta"
    ]
    fig = Figure(figsize=(13, 4.5))
    left, right = fig.subplots(1, 2)
    colors = matplotlib.colormaps["tab20"].colors  # 20 colours: one per provider (the default cycle has 10)
    for i, name in enumerate(dict.fromkeys(r["provider"] for r in sel)):
        pts = [r for r in sel if r["provider"] == name]
        style = dict(marker="o", label=name, color=colors[i % 20], ls="--" if "(graph)" in name else "-")
        left.plot([r["T"] for r in pts], [r["us"] for r in pts], **style)
        right.plot([r["T"] for r in pts], [r["% copy"] for r in pts], **style)
    right.axhline(100, color="k", ls="--", label="copy reference (y.copy_(x), same bytes)")
    for ax, ylabel in ((left, "µs (median, device)"), (right, "% of the copy reference")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("tokens T")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    left.set_yscale("log")
    left.legend(fontsize=7)
    fig.suptitle(
        f"multi-LoRA, {first['L']} adapters, r {first['r']} · {meta['device']} · torch {meta['torch']} · "
        f"triton {meta['triton']} · {meta['date'][:10]} · {meta['dtype']}"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="tiny sizes (the default on a CPU)")
    p.add_argument("--goals-only", action="store_true", help="only the four rows of RESULTS.md's goals")
    p.add_argument(
        "--dtype", default=None, choices=["bfloat16", "float16", "float32"], help="default bf16 (fp32 on CPU)"
    )
    p.add_argument("--results-dir", type=Path, help="where CSV + PNG go (default benchmarks/results)")
    args = p.parse_args(argv)
    device = runtime.default_device()
    bu.setup(device)
    quick = args.quick or not bu.on_gpu(device)
    dtype = (
        getattr(torch, args.dtype) if args.dtype else (torch.bfloat16 if bu.on_gpu(device) else torch.float32)
    )
    shapes = QUICK if quick else GOAL_SHAPES + ([] if args.goals_only else SWEEP)
    rows, skipped, copy_cache = [], [], {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        for shape in shapes:
            got, why = run_shape(*shape, dtype, device, copy_cache)
            rows += got
            skipped += why
            torch.cuda.empty_cache() if bu.on_gpu(device) else None
    meta = {**bu.stamp(device), "dtype": str(dtype).removeprefix("torch.")}
    bu.print_table(rows, ["shape", "provider", "us", "host us", "GB/s", "% copy", "goal", "met"])
    for line in dict.fromkeys(skipped):
        print(f"[skipped] {line}")
    for label in dict.fromkeys(r["shape"] for r in rows):
        by = {r["provider"]: r["us"] for r in rows if r["shape"] == label}
        det, atomic = by["ours split"], by["ours split atomic"]
        print(
            f"determinism cost at {label}: split {det:.1f} µs vs atomic {atomic:.1f} µs "
            f"({100 * (det / atomic - 1):+.0f}%)"
        )
    csv_path = bu.save(rows, "multi_lora", "multi_lora", meta, root=args.results_dir)
    plot(rows, csv_path.with_suffix(".png"), meta)
    print(f"saved {csv_path} and {csv_path.with_suffix('.png').name}")


if __name__ == "__main__":
    main()
