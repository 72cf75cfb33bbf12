"""Benchmark the fused QLoRA linear (frozen W in NF4, LoRA adapters in 16 bits) against the usual orders.

Overhead = time of a provider / time of the 16-bit base linear on the same inputs − 1 (``fwd``: the forward;
``fwd+bwd``: with the backward's dX, dA, dB; the base: ``F.linear`` with W dequantized once, and its dX).
Providers, each checked against the fp32 reference on the dequantized weight before it is timed:

- ``bf16 LoRA (ours, bf16 W)``: :func:`kernels.lora.linear.lora_linear` on the 16-bit weight (its default
  version): what the NF4 path gives up against keeping W in 16 bits;
- ``dequantize + torch LoRA``: the order PEFT with bitsandbytes runs: W dequantized to 16 bits in a kernel of
  its own (:mod:`kernels.qlora.dequantize`) in the forward and again in the backward, then cuBLAS and the
  LoRA branch in torch ops (PEFT's formula);
- ``bitsandbytes + PEFT``: PEFT's LoRA layer over a ``bitsandbytes`` ``Linear4bit``, where both import;
- ``ours (NF4 fused)``: :func:`kernels.qlora.linear.qlora_linear` with ``version="pairs"`` (the NF4 GEMM,
  :mod:`kernels.qlora.nf4_gemm`); ``ours (NF4 fused, by element)``: the same with ``version="elements"``;
- ``ours (via a 16-bit copy)``: ``qlora_linear`` with ``version="via_16_bits"``, its default
  (:mod:`kernels.qlora.via_16_bits`): the dequantize pass per call and then our fused LoRA ops on the copy.

At ``GRAPH_SHAPES`` every provider is also captured in a CUDA graph and replayed (``… (graph)`` rows,
overhead against the graphed base): at 512 rows the host would otherwise set the pace. Columns: median
device time (``lecture_code.bench.median_ms``), overhead, host µs and wall µs per call in a loop.

    python -m benchmarks.bench_qlora            # GPU: the shapes below, bf16
    python -m benchmarks.bench_qlora --quick    # tiny sizes (CPU: Triton's interpreter)

Prints a table and the goals; saves CSV + PNG under benchmarks/results/qlora/, stamped.
"""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path

import torch

import kernels  # noqa: F401  (decides the runtime mode first)
from kernels import reference, runtime
from kernels.lora.linear import lora_linear
from kernels.qlora.dequantize import dequantize_nf4_kernel
from kernels.qlora.linear import qlora_linear
from kernels.qlora.nf4 import dequantize_nf4, quantize_nf4, tables_on
from lecture_code import bench as bu
from lecture_code.results.workloads.qlora import (
    BASE,
    DEQUANT,
    GRAPH,
    OURS,
    OURS_BY_ELEMENT,
    OURS_VIA_16,
    goal_checks,
)  # names RESULTS.md reads

SHAPES = [(8192, 4096, 4096, 16), (512, 4096, 4096, 16), (8192, 4096, 4096, 64), (16384, 4096, 14336, 16)]
GRAPH_SHAPES = [(512, 4096, 4096, 16)]
QUICK_SHAPES = [(64, 128, 96, 8)]
ALPHA = 32.0
COLUMNS = ["shape", "pass", "provider", "ms", "overhead %", "host us", "wall us"]


def _to_16_bits(q, dtype: torch.dtype) -> torch.Tensor:
    """The NF4 weight in ``dtype`` by the dequantize kernel: the pass the usual order makes before a GEMM."""
    code = tables_on(q.packed.device)[0]
    return dequantize_nf4_kernel(q.packed, q.absmax(), code, q.shape, q.blocksize, dtype)


class _DequantizeThenLora(torch.autograd.Function):
    """W to 16 bits by its own kernel in the forward and again in the backward; the rest in torch ops."""

    @staticmethod
    def forward(ctx, x, a, b, q, scale):
        w = _to_16_bits(q, x.dtype)
        t = x @ a.t()
        ctx.save_for_backward(x, a, b, t)
        ctx.q, ctx.scale = q, scale
        return torch.addmm(x @ w.t(), t, b.t(), alpha=scale)

    @staticmethod
    def backward(ctx, dy):
        x, a, b, t = ctx.saved_tensors
        w = _to_16_bits(ctx.q, x.dtype)
        u = dy @ b
        return (
            torch.addmm(dy @ w, u, a, alpha=ctx.scale),
            ctx.scale * u.t() @ x,
            ctx.scale * dy.t() @ t,
            None,
            None,
        )


def _bnb_peft(q_source: torch.Tensor, a, b, r):
    """PEFT's LoRA over bitsandbytes' ``Linear4bit`` (NF4, double quantization), or the reason it cannot."""
    try:
        import bitsandbytes as bnb
        from peft.tuners.lora.bnb import Linear4bit as LoraLinear4bit
    except Exception as e:  # noqa: BLE001 — not installed here: the row says why
        return None, f"bitsandbytes + PEFT: not importable ({type(e).__name__}: {e})"
    n, k = q_source.shape
    try:
        base = bnb.nn.Linear4bit(
            k, n, bias=False, compute_dtype=a.dtype, quant_type="nf4", compress_statistics=True
        )
        base.weight = bnb.nn.Params4bit(q_source.cpu(), requires_grad=False, quant_type="nf4").to(a.device)
        layer = LoraLinear4bit(base, "default", r=r, lora_alpha=ALPHA, lora_dropout=0.0)
        with torch.no_grad():
            layer.lora_A["default"].weight.copy_(a)
            layer.lora_B["default"].weight.copy_(b)
    except Exception as e:  # noqa: BLE001 — a layer this bitsandbytes or PEFT cannot build: the row says why
        return None, f"bitsandbytes + PEFT: could not build the layer ({type(e).__name__}: {e})"

    def call(x, a_, b_):  # the layer holds its own A and B: their gradients are the ones asked for
        return layer(x)

    call.adapter = (layer.lora_A["default"].weight, layer.lora_B["default"].weight)
    return call, None


def providers(q, w16, a, b, r) -> tuple[dict, list[str]]:
    s = ALPHA / r
    fns = {
        "bf16 LoRA (ours, bf16 W)": lambda x, a, b: lora_linear(x, w16, a, b, s),
        DEQUANT: lambda x, a, b: _DequantizeThenLora.apply(x, a, b, q, s),
        OURS: lambda x, a, b: qlora_linear(x, q, a, b, s, version="pairs"),
        OURS_BY_ELEMENT: lambda x, a, b: qlora_linear(x, q, a, b, s, version="elements"),
        OURS_VIA_16: lambda x, a, b: qlora_linear(x, q, a, b, s, version="via_16_bits"),
    }
    bnb_fn, why = _bnb_peft(w16, a, b, r) if bu.on_gpu(a.device) else (None, "bitsandbytes + PEFT: GPU only")
    if bnb_fn is not None:
        fns["bitsandbytes + PEFT"] = bnb_fn
    return fns, [why] if why else []


def _row(shape, pass_, name, fn, base_ms, device, ms=None) -> dict:
    ms = bu.median_ms(fn, device) if ms is None else ms
    return {"shape": shape, "pass": pass_, "provider": name, "ms": ms, "overhead %": 100 * (ms / base_ms - 1),
            "host us": bu.host_us(fn, device), "wall us": bu.wall_us(fn, device)}  # fmt: skip


def run_shape(M, K, N, r, dtype, device, graphs: bool) -> tuple[list[dict], list[str]]:
    g = torch.Generator().manual_seed(M + 7 * N + r)
    draw = lambda *s, fan_in=1: (torch.randn(*s, generator=g) / fan_in**0.5).to(device, dtype)  # noqa: E731
    q = quantize_nf4(draw(N, K, fan_in=K))
    w16 = dequantize_nf4(q, dtype)  # the same weight in 16 bits: the base and (c) run on it
    x, a, b, dy = draw(M, K), draw(r, K, fan_in=K), draw(N, r, fan_in=r), draw(M, N)
    xg, ag, bg = (t.clone().requires_grad_() for t in (x, a, b))
    shape = f"{M}x{K}x{N} r{r}"
    passes = {
        "fwd": (lambda f: lambda: f(x, ag, bg), lambda: torch.nn.functional.linear(x, w16)),
        "fwd+bwd": (
            lambda f: lambda: torch.autograd.grad(f(xg, ag, bg), (xg, *getattr(f, "adapter", (ag, bg))), dy),
            lambda: torch.autograd.grad(torch.nn.functional.linear(xg, w16), (xg,), dy),
        ),
    }
    fns, skipped = providers(q, w16, a, b, r)
    ref = reference.lora_linear(x.float(), w16.float(), a.float(), b.float(), ALPHA / r)
    for name, f in list(fns.items()):
        with torch.no_grad():
            err = ((f(x, a, b).float() - ref).norm() / ref.norm()).item()
        if not err < 2e-2:
            skipped.append(f"{shape}: {name}: relative error {err:.3g} against the fp32 reference: not timed")
            del fns[name]
    rows, graph_rows = [], []
    for pass_, (wrap, base_fn) in passes.items():
        base_ms = bu.median_ms(base_fn, device)
        rows.append(_row(shape, pass_, BASE, base_fn, base_ms, device, ms=base_ms))
        calls = [(name, wrap(f)) for name, f in fns.items()]
        rows += [_row(shape, pass_, name, fn, base_ms, device) for name, fn in calls]
        if graphs and bu.on_gpu(device):
            replay = bu.graphed(base_fn, device)
            graph_base = bu.median_ms(replay, device)
            graph_rows.append(_row(shape, pass_, BASE + GRAPH, replay, graph_base, device, ms=graph_base))
            for name, fn in calls:
                try:
                    replay = bu.graphed(fn, device)
                except Exception as e:  # noqa: BLE001 — a provider that cannot be captured: say why, go on
                    skipped.append(
                        f"{shape} {pass_}: {name}{GRAPH}: capture failed ({type(e).__name__}: {e})"
                    )
                    torch.cuda.synchronize(device)
                    continue
                graph_rows.append(_row(shape, pass_, name + GRAPH, replay, graph_base, device))
    return rows + graph_rows, skipped


def goals(rows: list[dict], bits: float) -> list[str]:
    """The weight memory (no timing needed), then the goals RESULTS.md checks
    (:mod:`lecture_code.results.goals`), each with what ``rows`` reach."""
    out = [f"weight memory {bits:.3f} bits per parameter (goal ≤ 4.5): {'met' if bits <= 4.5 else 'not met'}"]
    checks = goal_checks(rows)
    return out + [
        f"{c.goal.text}: " + (c.verdict if c.value is None else f"{c.reached}: {c.verdict}") for c in checks
    ]


def plot(rows, path: Path, meta) -> None:
    """Overhead over the 16-bit base per shape and pass, a bar per provider."""
    from matplotlib.figure import Figure

    keys = list(dict.fromkeys((r["shape"], r["pass"]) for r in rows))
    names = [n for n in dict.fromkeys(r["provider"] for r in rows) if n != BASE and not n.endswith("(graph)")]
    fig = Figure(figsize=(13, 4.5))
    ax = fig.subplots()
    width = 0.8 / max(1, len(names))
    for i, name in enumerate(names):
        got = {(r["shape"], r["pass"]): r["overhead %"] for r in rows if r["provider"] == name}
        ax.bar(
            [j + i * width for j in range(len(keys))],
            [got.get(k, float("nan")) for k in keys],
            width,
            label=name,
        )
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(keys))], [f"{s}\n{p}" for s, p in keys], fontsize=7)
    ax.axhline(0, color="k", lw=0.8)
    ax.set_ylabel("% over the 16-bit base linear (device time)")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3, axis="y")
    fig.suptitle(f"QLoRA linear · {meta['device']} · torch {meta['torch']} · triton {meta['triton']} · "
                 f"{meta['date'][:10]} · {meta['dtype']}")  # fmt: skip
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="tiny sizes (the default on a CPU)")
    p.add_argument("--results-dir", type=Path, help="where CSV + PNG go (default benchmarks/results)")
    args = p.parse_args(argv)
    device = runtime.default_device()
    bu.setup(device)
    quick = args.quick or not bu.on_gpu(device)
    dtype = torch.bfloat16 if bu.on_gpu(device) else torch.float32
    rows, skipped = [], []
    meta = {**bu.stamp(device), "dtype": str(dtype).removeprefix("torch.")}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        for shape in QUICK_SHAPES if quick else SHAPES:
            got, why = run_shape(*shape, dtype, device, graphs=quick or shape in GRAPH_SHAPES)
            bu.print_table(got, COLUMNS)  # shape by shape, saved as it goes: a later failure keeps what was
            rows += got  # measured
            skipped += why
            csv_path = bu.save(rows, "qlora", "qlora_linear", meta, root=args.results_dir)
    for line in dict.fromkeys(skipped):
        print(f"[skipped] {line}")
    bits = quantize_nf4(torch.zeros(4096, 4096)).bits_per_parameter()
    for line in goals(rows, bits):
        print(f"[goal] {line}")
    plot(rows, csv_path.with_suffix(".png"), meta)
    print(f"saved {csv_path} and {csv_path.with_suffix('.png').name}")


if __name__ == "__main__":
    main()
