"""The one-kernel MLP (notebook 04) against eager PyTorch and torch.compile, per precision and row count."""

from __future__ import annotations

from lecture_code.results.section import Headline, Section, Table, num, span
from lecture_code.results.sources import ResultFile

OURS = "triton fused"
BASELINES = ("torch.compile", "eager")


def build(result: ResultFile) -> Section:
    rows = result.rows
    ms = {(r["kernel"], r["matmuls"], int(r["rows"]), r["provider"]): float(r["ms"]) for r in rows}
    panels = list(dict.fromkeys((r["kernel"], r["matmuls"]) for r in rows))
    sizes = sorted({int(r["rows"]) for r in rows})

    def ratios(kernel, matmuls, baseline):
        out = []
        for m in sizes:
            ours, base = ms.get((kernel, matmuls, m, OURS)), ms.get((kernel, matmuls, m, baseline))
            if ours is not None and base is not None:
                out.append(ours / base)
        return out

    table_rows, headlines = [], []
    largest = sizes[-1]
    for kernel, matmuls in panels:
        vs = {b: ratios(kernel, matmuls, b) for b in BASELINES}
        cells = [span(vs[b]) + "×" if vs[b] else "not measured" for b in BASELINES]
        at_largest = [num(ms.get((kernel, matmuls, largest, p))) for p in (OURS, *BASELINES)]
        table_rows.append([kernel, matmuls, *cells, *at_largest])
        if vs["torch.compile"]:
            headlines.append((kernel, matmuls, span(vs["torch.compile"])))
    table = Table(
        f"Fused kernel's time over each baseline's (below 1×: the fused kernel is faster), range over M = "
        f"{sizes[0]}…{sizes[-1]} rows; then the times in ms at M = {largest}",
        ["shape", "matmuls", *[f"vs {b}" for b in BASELINES], f"{OURS} ms", *[f"{b} ms" for b in BASELINES]],
        table_rows,
    )
    by_kernel: dict[str, list[str]] = {}
    for kernel, matmuls, text in headlines:
        by_kernel.setdefault(kernel, []).append(f"{matmuls}: {text}×")
    return Section(
        workload="fused_mlp",
        title="Fused MLP: `act(relu(x W1ᵀ + b1) W2ᵀ + b2)` in one kernel (notebook 04)",
        command="python -m benchmarks.bench_fused_mlp",
        what="Two shapes of the kind the kernel is for (a small hidden layer that stays on chip), swept over "
        "the row count M, in three precisions that every provider shares (named in the `matmuls` column).",
        result=result,
        tables=[table],
        headlines=[
            Headline(f"fused MLP {k}, time over torch.compile's", "; ".join(v)) for k, v in by_kernel.items()
        ],
    )
