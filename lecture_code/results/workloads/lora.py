"""The LoRA linear (notebook 07): its overhead over the frozen base linear, per provider, shape and pass."""

from __future__ import annotations

from lecture_code.bench import csv_number
from lecture_code.results.goals import goals_for
from lecture_code.results.section import NOT_MEASURED, GoalCheck, Headline, Section, Table, num, pct
from lecture_code.results.sources import ResultFile

BASE = "base (frozen linear)"
# the Triton rungs of kernels.lora.linear's ladder (v0 is its plain-PyTorch rung), and its small-M kernels
OURS = ("v1", "v2", "v3", "small")
REDUCE_OVERHEAD = "ours, reduce-overhead"  # the op under torch.compile(mode="reduce-overhead"), bench_lora
GRAPH = " (graph)"  # bench_lora.GRAPH: the suffix of a provider replayed from a CUDA graph
WALL_RIVAL = "unsloth-style"  # the wall-time goals' reference: the fastest eager order, no graph
BASELINES = ("eager", "torch.compile", "peft", "unsloth-style", "v0")
PUBLIC_KERNELS = ("NeMo's fused Triton LoRA",)  # bench_lora.NEMO; a CSV without its rows says "not measured"


def build(result: ResultFile) -> Section:
    rows = result.rows
    cases = list(dict.fromkeys((r["shape"], r["pass"]) for r in rows))
    overhead = {(r["shape"], r["pass"], r["provider"]): float(r["overhead %"]) for r in rows}
    base_ms = {(r["shape"], r["pass"]): float(r["ms"]) for r in rows if r["provider"] == BASE}

    def best_ours(shape, pass_, suffix=""):  # suffix GRAPH: the versions replayed from CUDA graphs
        ours = {
            v: overhead[(shape, pass_, v + suffix)] for v in OURS if (shape, pass_, v + suffix) in overhead
        }
        return min(ours.items(), key=lambda kv: kv[1]) if ours else (None, None)

    in_file = {r["provider"] for r in rows}
    columns = [p for p in (*OURS, *BASELINES) if p in in_file]  # e.g. "small" only in a CSV that has it
    table_rows = []
    for shape, pass_ in cases:
        version, best = best_ours(shape, pass_)
        table_rows.append(
            [
                shape,
                pass_,
                num(base_ms.get((shape, pass_))),
                f"{pct(best, signed=True)} ({version})" if version else NOT_MEASURED,
                *[pct(overhead.get((shape, pass_, b)), signed=True) for b in columns],
                *[pct(overhead.get((shape, pass_, p)), signed=True) for p in PUBLIC_KERNELS],
            ]
        )
    table = Table(
        "Overhead over the frozen base linear (time of the LoRA linear / time of the base − 1); base in ms",
        ["shape (M×K×N, rank)", "pass", "base ms", "ours: best", *columns, *PUBLIC_KERNELS],
        table_rows,
    )
    goals = []
    for goal in goals_for("lora"):
        if goal.key.endswith(" wall"):
            goals.append(_wall_goal(goal, rows))
            continue
        graph = goal.key.endswith(" graph")
        shape, pass_ = goal.key.removesuffix(" graph").rsplit(" ", 1)
        version, best = best_ours(shape, pass_, GRAPH if graph else "")
        where = f"{version}, graph" if graph else version
        reached = f"best of ours {pct(best, signed=True)} ({where})" if version else NOT_MEASURED
        goals.append(GoalCheck(goal, best, reached))
    headlines = []
    first = cases[0][0]
    parts = []
    for shape, pass_ in cases:
        if shape != first:
            continue
        version, best = best_ours(shape, pass_)
        others = {b: overhead[(shape, pass_, b)] for b in BASELINES[:-1] if (shape, pass_, b) in overhead}
        text = f"{pass_}: ours {pct(best, signed=True)} ({version})"
        if others:
            text += ", " + ", ".join(f"{b} {pct(v, signed=True)}" for b, v in others.items())
        parts.append(text)
    headlines.append(Headline(f"LoRA linear overhead over the frozen base, {first}", "; ".join(parts)))
    return Section(
        workload="lora",
        title="LoRA linear: overhead over the frozen base (notebook 07)",
        command="python -m benchmarks.bench_lora",
        what="`y = x Wᵀ + b + s·(x Aᵀ) Bᵀ` against the frozen base linear on the same inputs, forward "
        "(`fwd`) and forward + backward with dX, dA, dB (`fwd+bwd`; the base computes its dX). Ours: the "
        "Triton versions v1–v3 of `kernels.lora.linear` and, at M ≤ 64, its `small` version (the whole "
        "layer in one kernel each way); v0 is its plain-PyTorch rung.",
        result=result,
        tables=[table],
        goals=goals,
        headlines=headlines,
    )


def _wall_goal(goal, rows: list[dict]) -> GoalCheck:
    """Ours' best wall µs per call (v1–v3, small and the reduce-overhead row) over the unsloth-style order's
    (its loop without a graph); "not measured" where a row or its wall column is missing."""
    shape, pass_ = goal.key.removesuffix(" wall").rsplit(" ", 1)
    wall = {
        r["provider"]: csv_number(r.get("wall us")) for r in rows if (r["shape"], r["pass"]) == (shape, pass_)
    }
    ours = {p: wall[p] for p in (*OURS, REDUCE_OVERHEAD) if wall.get(p) is not None}
    theirs = wall.get(WALL_RIVAL)
    if not ours or theirs is None:
        return GoalCheck(goal, None, NOT_MEASURED)
    best = min(ours, key=ours.get)
    ratio = ours[best] / theirs
    return GoalCheck(
        goal, ratio, f"{num(ratio)}× ({best} {num(ours[best])} µs, {WALL_RIVAL} {num(theirs)} µs)"
    )
