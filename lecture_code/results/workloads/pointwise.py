"""Pointwise kernels (notebook 04): bias+ReLU and add-mul-activation in GB/s against the copy reference."""

from __future__ import annotations

from lecture_code.results.goals import goals_for
from lecture_code.results.section import NOT_MEASURED, GoalCheck, Headline, Section, Table, num, pct, span
from lecture_code.results.sources import ResultFile

OURS = ("triton v1", "cuda")
BASELINES = ("torch.compile", "eager")


def _by(rows: list[dict], *keys: str) -> dict[tuple, dict]:
    return {tuple(r[k] for k in keys): r for r in rows}


def _span(values: list[float | None]) -> str:
    measured = [v for v in values if v is not None]
    return span(measured, pct) if measured else NOT_MEASURED


def build(result: ResultFile) -> Section:
    rows = result.rows
    sizes = sorted({int(r["rows"]) for r in rows})
    largest, smallest = str(sizes[-1]), str(sizes[0])
    cols = rows[0]["cols"]
    panels = list(dict.fromkeys((r["kernel"], r["dtype"]) for r in rows))
    at = _by(rows, "kernel", "dtype", "rows", "provider")

    def cell(kernel, dtype, size, provider, column):
        row = at.get((kernel, dtype, size, provider))
        return None if row is None else float(row[column])

    providers = [*OURS, *BASELINES]
    top = Table(
        f"% of the copy reference at the largest size, {largest} × {cols} (GB/s over measured `y.copy_(x)`)",
        ["kernel", "dtype", *[f"{p}{' (ours)' if p in OURS else ''}" for p in providers], "copy GB/s"],
        [
            [
                k,
                d,
                *[pct(cell(k, d, largest, p, "% of copy")) for p in providers],
                num(cell(k, d, largest, "eager", "copy GB/s")),
            ]
            for k, d in panels
        ],
    )
    speed = Table(
        "Triton v1's speed over torch.compile's (`x compile`: above 1 Triton v1 is faster), rows × " + cols,
        ["kernel", "dtype", *[str(s) for s in sizes]],
        [[k, d, *[num(cell(k, d, str(s), "triton v1", "x compile")) for s in sizes]] for k, d in panels],
    )
    goals = []
    for goal in goals_for("pointwise"):
        size, column = (largest, "% of copy") if goal.key == "largest size" else (smallest, "x compile")
        values = {(k, d): cell(k, d, size, "triton v1", column) for k, d in panels}
        measured = {kd: v for kd, v in values.items() if v is not None}
        if not measured:
            goals.append(GoalCheck(goal, None, NOT_MEASURED))
            continue
        (k, d), worst = min(measured.items(), key=lambda kv: kv[1])
        shown = pct(worst) if column == "% of copy" else num(worst)
        goals.append(
            GoalCheck(
                goal, worst, f"lowest {shown} ({k}, {d}) at {size} rows, over {len(measured)} kernel × dtype"
            )
        )
    v1 = [cell(k, d, largest, "triton v1", "% of copy") for k, d in panels]
    compile_ = [cell(k, d, largest, "torch.compile", "% of copy") for k, d in panels]
    eager = [cell(k, d, largest, "eager", "% of copy") for k, d in panels]
    ratios = [float(r["x compile"]) for r in rows if r["provider"] == "triton v1"]
    headline = Headline(
        f"pointwise kernels (bias+ReLU, add-mul-act), {largest}×{cols}, % of the measured copy reference",
        f"Triton v1 {_span(v1)}; torch.compile {_span(compile_)}; eager {_span(eager)} (effective); "
        f"Triton v1 at {span(ratios)}× torch.compile's speed over {sizes[0]}–{sizes[-1]} rows",
    )
    return Section(
        workload="pointwise",
        title="Pointwise kernels: bias+ReLU and add-mul-activation (notebook 04)",
        command="python -m benchmarks.bench_pointwise",
        what="Forward pass over rows × 4096 columns. GB/s = the bytes a fused kernel reads and writes over "
        "the median device time, for every provider (eager really moves more: its figure is an *effective* "
        "bandwidth); the reference is the measured `y.copy_(x)` bandwidth at the same size.",
        result=result,
        tables=[top, speed],
        goals=goals,
        headlines=[headline],
    )
