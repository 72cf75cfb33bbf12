"""Data-parallel DLRM training (`benchmarks/bench_ddp.py`): samples/s per backend and world size."""

from __future__ import annotations

from lecture_code.results.goals import goals_for
from lecture_code.results.section import NOT_MEASURED, GoalCheck, Headline, Section, Table, num, pct
from lecture_code.results.sources import ResultFile

OURS = "fused-graph"  # the fused step, row exchange and all-reduce captured in one CUDA graph per rank


def _value(row: dict, key: str) -> float | None:
    return float(row[key]) if row.get(key) else None


def build(result: ResultFile) -> Section:
    rows = result.rows
    worlds = sorted({int(r["world_size"]) for r in rows})
    backends = list(dict.fromkeys(r["backend"] for r in rows))
    by = {(r["backend"], int(r["world_size"])): r for r in rows}

    def cell(backend: str, n: int) -> str:
        r = by.get((backend, n))
        if r is None or not r["samples_per_s"]:
            return (r or {}).get("error") or NOT_MEASURED
        eff = _value(r, "scaling_efficiency")
        scaling = f", {pct(100 * eff)} scaling" if n > 1 and eff is not None else ""
        return f"{num(float(r['samples_per_s']) / 1e6)}M ({num(float(r['ms_per_step']))} ms{scaling})"

    preset, batch = rows[0].get("preset", "?"), rows[0]["batch_per_rank"]
    table = Table(
        f"samples/s of the whole job (ms per step{', scaling efficiency' if len(worlds) > 1 else ''}), "
        f"{preset} preset, batch {batch} per rank",
        ["backend", *[f"{n} rank{'s' if n > 1 else ''}" for n in worlds]],
        [[b, *[cell(b, n) for n in worlds]] for b in backends],
    )
    most = worlds[-1]
    ours = by.get((OURS, most)) if preset == "kaggle" and most > 1 else None
    measured = {
        f"{most} ranks, scaling": _value(ours, "scaling_efficiency") if ours else None,
        f"{most} ranks, samples/s": _value(ours, "samples_per_s") if ours else None,
    }
    goals = []
    for goal in goals_for("ddp"):
        value = measured.get(goal.key)
        if value is not None and goal.key.endswith("scaling"):
            value *= 100
        shown = (
            NOT_MEASURED
            if value is None
            else (pct(value) if "scaling" in goal.key else f"{num(value / 1e6)}M")
        )
        goals.append(GoalCheck(goal, value, shown if value is None else f"{shown} ({OURS}, {most} ranks)"))
    headline = Headline(
        f"DLRM data-parallel, {OURS}, 1 → {most} ranks ({preset}, batch {batch}/rank)",
        f"{cell(OURS, 1)} → {cell(OURS, most)}",
    )
    return Section(
        workload="ddp",
        title="The DLRM step on several GPUs: data-parallel, touched rows exchanged",
        command="python -m benchmarks.bench_ddp",
        what="Each world size in its own processes, as torchrun starts them: `eager` under DDP (every "
        "gradient all-reduced, the tables' too), `fused` with replicated tables and only the rows a batch "
        "touched exchanged, `fused-graph` the same step with its collectives in one CUDA graph per rank. "
        "Scaling efficiency = samples/s on N ranks / (N × the same backend's samples/s on one).",
        result=result,
        tables=[table],
        goals=goals,
        headlines=[headline],
    )
