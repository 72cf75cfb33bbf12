"""The DLRM training step, fusion by fusion (notebook 05): ms per step per implementation, uniform + Zipf ids.

Reads ``benchmarks/bench_dlrm_step.py``'s CSV (one row per implementation and id distribution: ``ms_per_step``
with ``ms_min``/``ms_max`` over repeated runs, ``gpu_ms`` and ``host_ms`` of one step measured apart,
``peak_mib``, and ``error`` for an implementation that failed or was skipped). Ours are the ``fused*``
implementations; for a goal the best of them at torch's default fp32 precision counts (every baseline runs
there), and the worse of the two id distributions (the goals hold for both); a TF32 row (its name says
``TF32``) is reported beside it, never in its place. The bf16-MLP rows (``bf16``) have goals of their own:
their speed-up over the two-tricks step, and ``auc_gap``, the largest |holdout AUC − fp32 eager's| over a
training run of ``auc_steps`` steps (both id rows carry the same run's). The goals are about the Kaggle preset
at batch 2048: a file of another size says so.
"""

from __future__ import annotations

import math

from lecture_code.results.goals import goals_for
from lecture_code.results.section import NOT_MEASURED, GoalCheck, Headline, Section, Table, num, pct
from lecture_code.results.sources import ResultFile

__all__ = ["BASELINES", "EAGER", "TWO_TRICKS", "build", "is_ours", "precision"]

EAGER = "eager, sparse grads"  # the goals' "eager step"
TWO_TRICKS = "packed + index_add_, CUDA graph"  # the goals' "two-tricks version"
BASELINES = (EAGER, "eager, dense grads", "compile, dense grads", "packed + index_add_", TWO_TRICKS)
GOAL_SIZE = ("kaggle", 2048)  # the preset and batch every goal of RESULTS.md's step is about
GOAL_IDS = ("uniform", "zipf")  # every goal holds for both id distributions
AUC_GOAL_STEPS = 300  # the bf16 AUC goal's training run


def is_ours(implementation: str) -> bool:
    return implementation.startswith("fused")


def is_tf32(implementation: str) -> bool:
    return "TF32" in implementation


def precision(implementation: str) -> str:
    """The MLP matmuls' precision a row's name states: ``"TF32"``, ``"bf16"`` (its MLPs in bf16), else
    ``"fp32"`` (torch's default, every baseline's). Each gets its own verdict: never one for another."""
    for marker in ("TF32", "bf16"):
        if marker in implementation:
            return marker
    return "fp32"


def _value(row: dict | None, column: str) -> float | None:
    if row is None or row.get("error") or row.get(column, "") == "":
        return None
    value = float(row[column])
    return None if math.isnan(value) else value


def _ms_cell(row: dict | None) -> str:
    if row is None:
        return NOT_MEASURED
    if row.get("error"):
        return f"— ({row['error']})"
    ms = _value(row, "ms_per_step")
    lo, hi = _value(row, "ms_min"), _value(row, "ms_max")
    return num(ms) if lo is None or hi is None else f"{num(ms)} ({num(lo)}–{num(hi)})"


def build(result: ResultFile) -> Section:
    rows = result.rows
    dists = list(dict.fromkeys(r["ids"] for r in rows))
    names = list(dict.fromkeys(r["implementation"] for r in rows))
    at = {(r["implementation"], r["ids"]): r for r in rows}
    preset, batch = rows[0]["preset"], int(rows[0]["batch"])
    ms = {key: _value(r, "ms_per_step") for key, r in at.items()}

    def best_ours(dist: str, kind: str = "fp32") -> tuple[str | None, float | None]:
        """The fastest of ours at ``kind`` (:func:`precision`): ``"fp32"``, ``"TF32"`` or ``"bf16"``."""
        ours = {
            n: ms[(n, dist)]
            for n in names
            if is_ours(n) and precision(n) == kind and ms.get((n, dist)) is not None
        }
        return min(ours.items(), key=lambda kv: kv[1]) if ours else (None, None)

    first = dists[0]
    step_table = Table(
        f"ms per step, median over repeated runs (min–max), {preset} preset, batch {batch}; the other "
        f"columns for {first} ids",
        [
            "implementation",
            *[f"{d} ids ms" for d in dists],
            "samples/s",
            "GPU ms",
            "host ms",
            "peak MiB",
        ],
        [
            [
                n + (" (ours)" if is_ours(n) else ""),
                *[_ms_cell(at.get((n, d))) for d in dists],
                *[
                    num(_value(at.get((n, first)), c))
                    for c in ("samples_per_s", "gpu_ms", "host_ms", "peak_mib")
                ],
            ]
            for n in names
        ],
    )
    goals = _goal_checks(at, ms, dists, best_ours, preset, batch)
    parts = []
    for dist in dists:
        version, best = best_ours(dist)
        text = f"{dist} ids: ours {num(best)} ms" + (f" ({version})" if version else "")
        tf32_version, tf32_best = best_ours(dist, "TF32")
        if tf32_version:
            text += f", with TF32 MLP matmuls {num(tf32_best)} ms"
        bf16_version, bf16_best = best_ours(dist, "bf16")
        if bf16_version:
            text += f", with bf16 MLPs {num(bf16_best)} ms"
        others = [f"{b} {num(ms[(b, dist)])}" for b in (EAGER, TWO_TRICKS) if ms.get((b, dist)) is not None]
        parts.append(text + (", " + ", ".join(others) + " ms" if others else ""))
    return Section(
        workload=result.workload,
        title="The fused DLRM training step (notebook 05)"
        + ("" if (preset, batch) == GOAL_SIZE else f", {preset} preset, batch {batch}"),
        command="python -m benchmarks.bench_dlrm_step",
        what="One SGD training step of DLRM, implementation by implementation in the order the lecture "
        "applies the fusions: eager (sparse or dense embedding gradients), torch.compile, one packed table "
        "with SGD by `index_add_`, and ours (`fused*`: the table-batched embedding, SGD in its backward, + "
        "the fused dot interaction), each also replayed from a CUDA graph. Wall ms per step in a loop; the "
        "GPU's and the host's time of one step measured apart; peak memory: what the step keeps on the GPU "
        "(a CUDA graph's pool counted whole, side streams' cuBLAS workspaces included) plus the most one "
        "step allocates on top.",
        result=result,
        tables=[step_table],
        goals=goals,
        headlines=[Headline(f"DLRM training step, {preset} preset, batch {batch}", "; ".join(parts))],
    )


def _goal_checks(at, ms, dists, best_ours, preset, batch) -> list[GoalCheck]:
    """Each goal against the worse id distribution; another preset or batch: not measured."""
    checks = []
    for goal in goals_for("dlrm_step"):
        if (preset, batch) != GOAL_SIZE:
            reached = f"{NOT_MEASURED} (this file: {preset} preset, batch {batch})"
            checks.append(GoalCheck(goal, None, reached))
            continue
        per_dist = {}
        for dist in dists:
            version, best = best_ours(dist, "bf16" if "bf16" in goal.key else "fp32")
            if version is None:
                continue
            if goal.key.endswith("AUC gap"):
                gap, steps = _value(at[(version, dist)], "auc_gap"), _value(at[(version, dist)], "auc_steps")
                if gap is None or steps is None or steps < AUC_GOAL_STEPS:
                    continue
                value, shown = gap, f"AUC within {gap:.1e} of fp32 eager's over {steps:.0f} steps"
            elif goal.key == "kaggle, batch 2048":
                value, shown = best, f"{num(best)} ms"
                tf32_version, tf32_best = best_ours(dist, "TF32")
                if tf32_version:
                    shown += f" (with TF32 MLP matmuls, not counted: {num(tf32_best)} ms, {tf32_version})"
            elif goal.key.endswith("× eager") or goal.key.endswith("× two tricks"):
                base = EAGER if goal.key.endswith("× eager") else TWO_TRICKS
                if ms.get((base, dist)) is None:
                    continue
                value = ms[(base, dist)] / best
                shown = f"{num(value)}× ({num(ms[(base, dist)])} / {num(best)} ms)"
            else:  # peak memory, % of eager's
                ours_peak, eager_peak = (
                    _value(at[(version, dist)], "peak_mib"),
                    _value(at.get((EAGER, dist)), "peak_mib"),
                )
                if ours_peak is None or eager_peak is None:
                    continue
                value = 100 * ours_peak / eager_peak
                shown = f"{pct(value)} ({num(ours_peak)} / {num(eager_peak)} MiB)"
            per_dist[dist] = (value, f"{shown}, {dist} ids, {version}")
        if not per_dist:
            checks.append(GoalCheck(goal, None, NOT_MEASURED))
            continue
        worse = max if goal.op == "<=" else min
        dist = worse(per_dist, key=lambda d: per_dist[d][0])
        value, shown = per_dist[dist]
        missing = [d for d in GOAL_IDS if d not in per_dist]
        if missing:  # the goal is for every distribution: one unmeasured leaves it unmeasured
            value, shown = None, f"{shown}; {', '.join(missing)} ids: {NOT_MEASURED}"
        checks.append(GoalCheck(goal, value, shown))
    return checks
