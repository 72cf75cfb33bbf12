"""Benchmark the LoRA linear ``y = x Wᵀ + s·(x Aᵀ) Bᵀ``: overhead over the frozen base linear, per provider.

Reproduces RESULTS.md's LoRA table (H100, bf16). Overhead = time of the LoRA linear / time of the frozen base
linear on the same inputs − 1; ``fwd`` is the forward alone, ``fwd+bwd`` adds the backward with dX, dA, dB
(base: ``F.linear`` forward and its dX, W frozen). Providers:

- ``eager``: ``kernels.reference.lora_linear`` under autograd (PEFT's formula);
- ``torch.compile``: the same function compiled (default mode);
- ``peft``: ``peft``'s LoRA ``Linear`` layer (dropout 0), where peft is importable;
- ``NeMo's fused Triton LoRA``: NeMo Automodel's ``TritonLinearLoRA`` (its ``use_triton`` layer, dropout 0):
  its own Triton kernels forward and backward, from the files ``python -m benchmarks.fetch_peers`` extracts
  from the pinned wheel into ``build/peers/`` (:mod:`benchmarks.peer_nemo`; on a GPU machine without a
  package registry, fetch elsewhere and carry ``build/peers`` along). Where they are missing or do not run,
  the printout's ``[skipped]`` lines say why;
- ``unsloth-style``: ``kernels.reference.lora_linear_unsloth_order`` (``out.addmm_``, hand-written backward);
- ``v0`` … ``v3``: the ladder of ``kernels.lora.linear.lora_linear`` (see that module); ``small`` at M ≤ 64:
  ``version="small"``, the whole layer in one kernel each way (``kernels.lora.small_m``);
- ``ours, reduce-overhead`` (GPU, with ``torch.compile``): ``lora_linear`` (its default version) compiled
  with ``fullgraph=True, mode="reduce-overhead"``: the custom op inside inductor's CUDA graphs, forward and
  backward, as a model compiled that way runs it (the 16- and 512-row shapes are host-bound without a graph).

Columns: median device time (``lecture_code.bench.median_ms``: CUDA events, L2 flushed, host hidden), the
overhead, the peak memory the call allocates beyond its inputs (MB), the host µs per call
(``lecture_code.bench.host_us``: enqueued back to back, no wait) and the wall µs per call in a loop
(``lecture_code.bench.wall_us``: synchronized before and after, so the slower of host and device sets it).

At ``GRAPH_SHAPES`` (the 512- and 16-row shapes, where every call spends longer on the host than on the
GPU) and in ``--quick`` runs on a GPU, every provider but the two compiled ones (``COMPILED``), NeMo's too, is
also captured in a CUDA graph (``lecture_code.bench.graphed``) and replayed: rows ``<provider> (graph)``,
their overhead against the graphed base. :func:`verdicts` compares the ladder with the other providers by
device time, by wall time per call without graphs, and by wall time per call among the graphed rows.

    python -m benchmarks.fetch_peers              # once, where pip reaches a registry: NeMo's kernel files
    python -m benchmarks.bench_lora               # GPU: the five shapes of RESULTS.md's LoRA table
    python -m benchmarks.bench_lora --quick       # tiny sizes (CPU: Triton runs in the interpreter)
    python -m benchmarks.bench_lora --results-dir benchmarks/results/tmp   # a trial run (git-ignored)

Prints a table; saves CSV + PNG under benchmarks/results/lora/, stamped with device, versions, date.
"""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path

import torch

import kernels  # noqa: F401  (decides the runtime mode first)
from benchmarks import peer_nemo, peers
from kernels import reference, runtime
from kernels.lora.linear import SMALL, lora_linear
from kernels.lora.small_m import MAX_M
from lecture_code import bench as bu
from lecture_code.results.workloads.lora import BASE, REDUCE_OVERHEAD  # the providers' names RESULTS.md reads

SHAPES = [
    (8192, 4096, 4096, 16), (8192, 4096, 4096, 64), (16384, 4096, 14336, 16), (512, 4096, 4096, 16),
    (16, 4096, 4096, 16),
]  # fmt: skip
QUICK_SHAPES = [(64, 64, 64, 16)]
GRAPH_SHAPES = [(512, 4096, 4096, 16), (16, 4096, 4096, 16)]  # host-bound without a graph
GRAPH = " (graph)"  # suffix of the graphed providers' names
VERSIONS = ("v0", "v1", "v2", "v3")
OURS = (*VERSIONS, SMALL, REDUCE_OVERHEAD)  # what the verdicts count as ours
COMPILED = ("torch.compile", REDUCE_OVERHEAD)  # compiled providers: never captured in a graph by hand
# NeMo's provider: named as in lecture_code.results.workloads.lora.PUBLIC_KERNELS, the column RESULTS.md fills
NEMO = "NeMo's fused Triton LoRA"
PEERS = (NEMO,)  # loaded from fetched files: one that fails or answers wrong here is a reason, not a crash
ALPHA = 32.0


def _peft_layer(w: torch.Tensor, a: torch.Tensor, b: torch.Tensor, r: int):
    """peft's LoRA ``Linear`` around a frozen ``nn.Linear`` holding w, A and B copied in (None: no peft)."""
    try:
        from peft import LoraConfig, get_peft_model
    except ImportError:
        return None
    holder = torch.nn.Module()  # peft's public path: a model with a target module, wrapped by get_peft_model
    holder.lin = peers.frozen_linear(w)  # on the CPU: peft initialises its A there too (see frozen_linear)
    config = LoraConfig(r=r, lora_alpha=ALPHA, lora_dropout=0.0, target_modules=["lin"])
    layer = get_peft_model(holder, config).base_model.model.lin
    layer.to(device=w.device, dtype=w.dtype)
    layer.lora_A["default"].weight.data.copy_(a)
    layer.lora_B["default"].weight.data.copy_(b)
    return layer


def _nemo_provider(w: torch.Tensor, a: torch.Tensor, b: torch.Tensor):
    """NeMo's ``TritonLinearLoRA`` as f(x, a, b) (its own A, B, copied in: ``f.adapter``), or None and the
    reason it cannot run here."""
    lora, why = peer_nemo.load()
    if lora is None:
        return None, why
    try:
        layer = peer_nemo.layer(lora, w, a, b, ALPHA)
    except Exception as e:  # noqa: BLE001 — a peer that cannot be built here: say why, time the others
        return None, f"NeMo's TritonLinearLoRA cannot be built here ({type(e).__name__}: {e})"

    def call(x, a, b):
        return layer(x)

    call.adapter = [layer.lora_A.weight, layer.lora_B.weight]
    return call, None


def providers(w, a, b, r, compile_: bool) -> tuple[dict, list[str]]:
    """name → f(x, a, b) for the LoRA linear (a, b the trainable adapter tensors; peft and NeMo hold their
    own), and the reasons for providers left out."""
    s = ALPHA / r
    out = {
        "eager": lambda x, a, b: reference.lora_linear(x, w, a, b, s),
        "unsloth-style": lambda x, a, b: reference.lora_linear_unsloth_order(x, w, a, b, s),
    }
    if compile_:
        compiled = bu.compiled(reference.lora_linear)
        out["torch.compile"] = lambda x, a, b: compiled(x, w, a, b, s)
    peft = _peft_layer(w, a, b, r)
    if peft is not None:
        out["peft"] = lambda x, a, b: peft(x)  # its own A, B parameters (same values)
        out["peft"].adapter = [p for p in peft.parameters() if p.requires_grad]
    nemo, why = _nemo_provider(w, a, b)
    if nemo is not None:
        out[NEMO] = nemo
    for v in VERSIONS:
        out[v] = lambda x, a, b, v=v: lora_linear(x, w, a, b, s, version=v)
    if compile_ and w.is_cuda:
        out[REDUCE_OVERHEAD] = _reduce_overhead(lambda x, a, b: lora_linear(x, w, a, b, s))
    return out, [] if nemo is not None else [f"{NEMO}: {why}"]


def _reduce_overhead(fn):
    """``fn`` compiled with ``fullgraph=True, mode="reduce-overhead"``; each call first tells the CUDA-graph
    trees a new step begins (``torch.compiler.cudagraph_mark_step_begin``), as a training loop would, so a
    replay may reuse the last call's output memory."""
    graphed = bu.compiled(fn, fullgraph=True, mode="reduce-overhead")

    def call(x, a, b):
        torch.compiler.cudagraph_mark_step_begin()
        return graphed(x, a, b)

    return call


def _peak_mb(fn, device) -> float | None:
    if not bu.on_gpu(device):
        return None
    torch.cuda.synchronize(device)
    before = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    fn()
    torch.cuda.synchronize(device)
    return (torch.cuda.max_memory_allocated(device) - before) / 2**20


def _graph_rows(timed: list[tuple[str, str, object]], shape: str, device) -> tuple[list[dict], list[str]]:
    """``timed``: (pass, provider, fn) with the base first per pass; each captured in a CUDA graph and timed
    replaying (rows named ``<provider> (graph)``), or the reason it could not be captured."""
    if not bu.on_gpu(device):
        return [], [f"{shape}: CUDA-graph rows: CUDA graphs need a GPU"]
    rows, skipped, base = [], [], {}
    for pass_, name, fn in timed:
        try:
            replay = bu.graphed(fn, device)
        except Exception as e:  # noqa: BLE001 — a provider that cannot be captured: say why, time the others
            skipped.append(f"{shape} {pass_}: {name}{GRAPH}: capture failed ({type(e).__name__}: {e})")
            torch.cuda.synchronize(device)
            continue
        ms = bu.median_ms(replay, device)
        base.setdefault(pass_, ms)  # the base comes first in each pass
        rows.append({"shape": shape, "pass": pass_, "provider": name + GRAPH, "ms": ms,
                     "overhead %": 100 * (ms / base[pass_] - 1), "peak MB": None,
                     "host us": bu.host_us(replay, device),
                     "wall us": bu.wall_us(replay, device)})  # fmt: skip
    return rows, skipped


def inputs(M, K, N, r, dtype, device) -> tuple[torch.Tensor, ...]:
    """x, W, A, B (nonzero: a trained adapter, not LoRA's init) and dY, drawn by a seeded CPU generator and
    moved. The CUDA generator is left alone: after a failed graph capture it refuses every later draw in the
    process (``lecture_code.bench.graphed``), which stopped a run on the H200."""
    g = torch.Generator().manual_seed(M * 31 + N * 7 + r)

    def draw(*shape, fan_in=1):
        return (torch.randn(*shape, generator=g) / fan_in**0.5).to(device, dtype)

    return draw(M, K), draw(N, K, fan_in=K), draw(r, K, fan_in=K), draw(N, r, fan_in=r), draw(M, N)


def run_shape(M, K, N, r, dtype, device, compile_: bool, graphs: bool = False) -> tuple[list, list[str]]:
    """Rows of (shape, pass, provider) timings, and the reasons for rows not measured (a compiled provider
    that failed to compile or run; a peer missing, failing or wrong here; graphs: also the CUDA-graph
    rows)."""
    x, w, a, b, dy = inputs(M, K, N, r, dtype, device)
    xg, ag, bg = (t.clone().requires_grad_() for t in (x, a, b))

    def base_fwd():
        return torch.nn.functional.linear(x, w)

    def base_fwd_bwd():
        return torch.autograd.grad(torch.nn.functional.linear(xg, w), (xg,), dy)

    rows, timed, shape = [], [], f"{M}x{K}x{N} r{r}"
    fns, skipped = providers(w, a, b, r, compile_)
    if M <= MAX_M:  # the whole layer in one kernel each way (kernels.lora.small_m): every row in one block
        fns[SMALL] = lambda x, a, b: lora_linear(x, w, a, b, ALPHA / r, version=SMALL)
    failed = [f"{shape}: {why}" for why in skipped]
    base = {"fwd": bu.median_ms(base_fwd, device), "fwd+bwd": bu.median_ms(base_fwd_bwd, device)}
    for pass_, fn in (("fwd", base_fwd), ("fwd+bwd", base_fwd_bwd)):
        rows.append({"shape": shape, "pass": pass_, "provider": BASE, "ms": base[pass_],
                     "overhead %": 0.0, "peak MB": _peak_mb(fn, device),
                     "host us": bu.host_us(fn, device), "wall us": bu.wall_us(fn, device)})  # fmt: skip
        timed.append((pass_, BASE, fn))

    def measure(name, f) -> None:  # checked against the reference, then timed forward and forward + backward
        with torch.no_grad():
            ref = reference.lora_linear(x.float(), w.float(), a.float(), b.float(), ALPHA / r)
            try:
                got = f(x, a, b).float()
            except Exception as e:  # noqa: BLE001 — a compiler or a peer that cannot take it: say why
                if name not in COMPILED + PEERS:
                    raise
                failed.append(f"{shape}: {name}: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
                return
        err = ((got - ref).norm() / ref.norm()).item()
        if not err < 2e-2 and name in PEERS:  # never time a wrong answer; a peer's is reported
            failed.append(f"{shape}: {name}: relative error {err:.3g} against the fp32 reference: not timed")
            return
        if not err < 2e-2:
            raise AssertionError(f"{name} at {shape}: relative error {err:.3g} against the fp32 reference")

        def fwd():
            return f(x, ag, bg)

        def fwd_bwd():
            y = f(xg, ag, bg)
            return torch.autograd.grad(y, (xg, *getattr(f, "adapter", (ag, bg))), dy)

        for pass_, fn in (("fwd", fwd), ("fwd+bwd", fwd_bwd)):
            try:
                ms = bu.median_ms(fn, device)
            except Exception as e:  # noqa: BLE001 — a peer's backward that fails here: say why
                if name not in PEERS:
                    raise
                failed.append(f"{shape} {pass_}: {name}: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
                return
            rows.append({"shape": shape, "pass": pass_, "provider": name, "ms": ms,
                         "overhead %": 100 * (ms / base[pass_] - 1), "peak MB": _peak_mb(fn, device),
                         "host us": bu.host_us(fn, device), "wall us": bu.wall_us(fn, device)})  # fmt: skip
            timed.append((pass_, name, fn))

    # The compiled providers last, after the graphs captured by hand: on the H200 (torch 2.11), once
    # mode="reduce-overhead" (torch.compile's own CUDA graphs) had run a forward + backward, every later
    # capture of a forward + backward by hand at that shape failed ("operation failed due to a previous error
    # during capture"); with that provider not run, every one was captured.
    for name, f in fns.items():
        if name not in COMPILED:
            measure(name, f)
    graph_rows, skipped = [], []
    if graphs:
        timed.sort(key=lambda t: t[0])  # per pass, the base first (a stable sort keeps the providers' order)
        graph_rows, skipped = _graph_rows(timed, shape, device)
    hand = len(timed)
    for name, f in fns.items():
        if name in COMPILED:
            measure(name, f)
    if graphs and bu.on_gpu(device):
        why = "not captured by hand (torch.compile has its own graphs: mode='reduce-overhead')"
        skipped += [f"{shape} {pass_}: {name}{GRAPH}: {why}" for pass_, name, _ in timed[hand:]]
    return rows + graph_rows, failed + skipped


def _graphed(provider: str) -> bool:
    """A row replayed from CUDA graphs: captured by hand (``… (graph)``) or by inductor (reduce-overhead)."""
    return provider.endswith(GRAPH) or provider == REDUCE_OVERHEAD


def _best(rows: list[dict], names, column: str, graph: bool) -> tuple[str, float] | None:
    sel = [r for r in rows if _graphed(r["provider"]) == graph]
    got = [(r["provider"].removesuffix(GRAPH), bu.csv_number(r.get(column))) for r in sel]
    got = [(n, v) for n, v in got if n in names and v is not None]
    return min(got, key=lambda nv: nv[1]) if got else None


def verdicts(rows: list[dict]) -> list[dict]:
    """Per (shape, pass): the ladder's best version against the best other provider (eager, torch.compile,
    peft, unsloth-style, NeMo's), three ways: by device time (overhead %), by wall µs per call in a loop
    without graphs, and by wall µs per call among the CUDA-graph rows (captured by hand, or by inductor: ours,
    reduce-overhead). "not measured" where a row or column is missing (an older CSV, a shape without graph
    rows)."""
    out = []
    for shape, pass_ in dict.fromkeys((r["shape"], r["pass"]) for r in rows):
        sel = [r for r in rows if (r["shape"], r["pass"]) == (shape, pass_)]
        names = {r["provider"].removesuffix(GRAPH) for r in sel} - {BASE}
        others = names - set(OURS)
        line = {"shape": shape, "pass": pass_}
        for label, column, graph, unit in (
            ("device", "overhead %", False, "%"),
            ("wall/call", "wall us", False, " µs"),
            ("graph wall/call", "wall us", True, " µs"),
        ):
            ours, rival = _best(sel, OURS, column, graph), _best(sel, others, column, graph)
            if ours is None or rival is None:
                line[f"{label}: ladder"] = line[f"{label}: others"] = ""
                line[label] = "not measured"
                continue
            sign = "+" if unit == "%" else ""
            line[f"{label}: ladder"] = f"{ours[0]} {ours[1]:{sign}.1f}{unit}"
            line[f"{label}: others"] = f"{rival[0]} {rival[1]:{sign}.1f}{unit}"
            line[label] = "ladder wins" if ours[1] < rival[1] else "ladder loses"
        out.append(line)
    return out


def plot(rows, path: Path, meta) -> None:
    """One panel per (shape, pass): a bar per provider, its overhead over the frozen base linear."""
    from matplotlib.figure import Figure

    panels = list(dict.fromkeys((r["shape"], r["pass"]) for r in rows))
    fig = Figure(figsize=(6.5 * 2, 3.2 * ((len(panels) + 1) // 2)))
    axes = fig.subplots((len(panels) + 1) // 2, 2, squeeze=False).ravel()
    for ax, (shape, pass_) in zip(axes, panels, strict=False):
        sel = [
            r
            for r in rows
            if r["shape"] == shape and r["pass"] == pass_ and not r["provider"].startswith("base")
        ]
        ax.barh([r["provider"] for r in sel], [r["overhead %"] for r in sel])
        ax.axvline(0, color="k", lw=0.8)
        ax.set_xlabel("overhead over the frozen base linear (%)")
        ax.set_title(f"{shape}, {pass_}")
        ax.grid(axis="x", alpha=0.3)
    fig.suptitle(
        f"LoRA linear · {meta['device']} · torch {meta['torch']} · triton {meta['triton']} · "
        f"{meta['date'][:10]} · {meta['dtype']}"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="tiny sizes (the default on a CPU)")
    p.add_argument("--no-compile", action="store_true", help="skip torch.compile (slow to compile on CPU)")
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
    rows, skipped = [], []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        for shape in QUICK_SHAPES if quick else SHAPES:
            graphs = quick or shape in GRAPH_SHAPES
            got, why = run_shape(*shape, dtype, device, compile_=not args.no_compile, graphs=graphs)
            rows += got
            skipped += why
            torch.cuda.empty_cache() if bu.on_gpu(device) else None
    meta = {**bu.stamp(device), "dtype": str(dtype).removeprefix("torch.")}
    bu.print_table(rows, ["shape", "pass", "provider", "ms", "overhead %", "peak MB", "host us", "wall us"])
    for line in skipped:
        print(f"[skipped] {line}")
    csv_path = bu.save(rows, "lora", "lora_overhead", meta, root=args.results_dir)
    plot(rows, csv_path.with_suffix(".png"), meta)
    print(f"saved {csv_path} and {csv_path.with_suffix('.png').name}")


if __name__ == "__main__":
    main()
