"""Data-parallel DLRM training (`benchmarks/bench_ddp.py`): samples/s per backend and world size."""

from __future__ import annotations

from lecture_code.results.goals import goals_for
from lecture_code.results.section import NOT_MEASURED, GoalCheck, Headline, Section, Table, num, pct
from lecture_code.results.sources import ResultFile

OURS = "fused-graph"  # the fused step, row exchange and all-reduce captured in one CUDA graph per rank


def _value(row: dict, key: str) -> float | None:
    return float(row[key]) if row.get(key) else None


def _preset(goal) -> str:
    return goal.key.split(",")[0]


def _check(goal, by: dict) -> GoalCheck:
    """A goal keyed ``"<preset>, <N> ranks, <backend>, scaling"`` or ``"…, samples/s"``."""
    _, n, backend, what = (part.strip() for part in goal.key.split(","))
    row = by.get((backend, int(n.split()[0])))
    value = _value(row, "scaling_efficiency" if what == "scaling" else "samples_per_s") if row else None
    if value is None:
        return GoalCheck(goal, None, NOT_MEASURED)
    value = 100 * value if what == "scaling" else value
    shown = pct(value) if what == "scaling" else f"{num(value / 1e6)}M"
    return GoalCheck(goal, value, f"{shown} ({backend}, {n})")


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
    most, terabyte = worlds[-1], preset == "terabyte"
    ours = "sharded" if terabyte else OURS  # the 1TB tables are run sharded
    mine = [g for g in goals_for("ddp") if _preset(g) == ("terabyte" if terabyte else "kaggle")]
    goals = [_check(goal, by if _preset(goal) == preset else {}) for goal in mine]
    headline = Headline(
        f"DLRM {'sharded' if terabyte else 'data-parallel'}, {ours}, 1 → {most} ranks ({preset}, "
        f"batch {batch}/rank)",
        f"{cell(ours, 1)} → {cell(ours, most)}",
    )
    if terabyte:
        title = f"The 1TB-size DLRM on several GPUs: tables sharded, batch {batch} per rank"
        command = f"python -m benchmarks.bench_ddp --preset terabyte --backends sharded --batch-size {batch}"
        what = (
            "MLPerf's reference DLRM (D = 128, bottom 13-512-256-128, top 1024-1024-512-256-1) on "
            "Criteo 1TB's 26 tables (177.9M rows, 91 GB in fp32), `sharded`: the fused step with the tables "
            "sharded over the ranks (`--shard-tables`), the MLPs data-parallel; each world size in its own "
            "processes. No one-rank row (on an 80 GB GPU these tables do not fit), so no scaling efficiency."
        )
    else:
        title = "The DLRM step on several GPUs: data-parallel, touched rows exchanged"
        command = "python -m benchmarks.bench_ddp"
        what = (
            "Each world size in its own processes, as torchrun starts them: `eager` under DDP (every "
            "gradient all-reduced, the tables' too), `fused` with replicated tables and only the rows a "
            "batch touched exchanged, `fused-graph` the same step with its collectives in one CUDA graph per "
            "rank, "
            "`sharded` the fused step with the tables sharded over the ranks (on one rank: the fused step). "
            "Scaling efficiency = samples/s on N ranks / (N × the same backend's samples/s on one)."
        )
    return Section(
        workload="ddp",
        title=title,
        command=command,
        what=what,
        result=result,
        tables=[table],
        goals=goals,
        headlines=[headline],
    )
