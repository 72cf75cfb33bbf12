"""Multi-LoRA serving (notebook 08): shrink + expand for a batch of tokens on many adapters, per provider.

Reads ``benchmarks/bench_multi_lora.py``'s CSV: one row per shape (``T``, ``L`` adapters, rank ``r``,
``slices``; the label in ``shape`` names the widths) and provider, with the median device time ``us``, the
host time per call, GB/s on the bytes that must move and ``% copy`` (that over the measured copy reference).
Ours is ``add_multi_lora``'s default path (provider ``ours``, metadata built once per step); the other ``ours
…`` rows are its paths, the atomic split-K, and the CUDA-graph replay. The goals' table is the four shapes
with 8 adapters, r = 16, one slice of N = K = 4096.
"""

from __future__ import annotations

from lecture_code.results.goals import goals_for
from lecture_code.results.section import NOT_MEASURED, GoalCheck, Headline, Section, Table, num, pct
from lecture_code.results.sources import ResultFile

__all__ = ["BASELINES", "GOAL_SHAPES", "OURS", "build"]

OURS = "ours"
BASELINES = ("vllm", "vllm (graph)", "torch gather+bmm", "torch gather+bmm (graph)", "torch loop")
GOAL_SHAPES = {T: f"T={T} L=8 r=16 N=4096" for T in (16, 256, 4096, 16384)}  # bench_multi_lora.GOAL_SHAPES
_COLUMN = {"µs": "us", "% copy": "% copy"}


def _float(row: dict | None, column: str) -> float | None:
    if row is None or row.get(column, "") == "":
        return None
    return float(row[column])


def build(result: ResultFile) -> Section:
    rows = result.rows
    at = {(r["shape"], r["provider"]): r for r in rows}
    shapes = list(dict.fromkeys(r["shape"] for r in rows))
    providers = list(dict.fromkeys(r["provider"] for r in rows))
    dtype = rows[0].get("dtype", "not recorded")

    def us(shape, provider):
        return _float(at.get((shape, provider)), "us")

    goal_table = Table(
        f"The goals' shapes: µs per call (median, device), 8 adapters, r 16, K = N = 4096, one slice, "
        f"{dtype}; ours also as % of the copy reference on the bytes that must move",
        ["tokens T", "ours µs", "ours % copy", "ours (graph) µs", *[f"{b} µs" for b in BASELINES]],
        [
            [
                str(T),
                num(us(shape, OURS)),
                pct(_float(at.get((shape, OURS)), "% copy")),
                num(us(shape, "ours (graph)")),
                *[num(us(shape, b)) for b in BASELINES],
            ]
            for T, shape in GOAL_SHAPES.items()
        ],
    )
    sweep_table = Table(
        "Every shape in the file: µs per call (median, device) per provider; `meta` is building the token → "
        "adapter metadata alone; the last column is what determinism costs (split-K in a fixed order against "
        "atomics)",
        ["shape", *providers, "deterministic vs atomic split"],
        [
            [
                shape,
                *[num(us(shape, p)) for p in providers],
                _determinism(us(shape, "ours split"), us(shape, "ours split atomic")),
            ]
            for shape in shapes
        ],
    )
    goals = []
    for goal in goals_for("multi_lora"):
        T, metric = goal.key.split(" ", 1)
        shape = GOAL_SHAPES[int(T.removeprefix("T="))]
        value = _float(at.get((shape, OURS)), _COLUMN[metric])
        shown = NOT_MEASURED if value is None else (f"{num(value)} µs" if metric == "µs" else pct(value))
        goals.append(GoalCheck(goal, value, shown if value is None else f"{shown} ({OURS}, {shape})"))
    return Section(
        workload="multi_lora",
        title="Multi-LoRA serving: shrink + expand (notebook 08)",
        command="python -m benchmarks.bench_multi_lora",
        what="`y[t] += s · x[t] A[id(t)]ᵀ B[id(t)]ᵀ` for a batch of T tokens, each on its own adapter or "
        "none (id −1), every provider checked against the reference before it is timed: ours "
        "(`add_multi_lora`, metadata built once per step; each of its paths; a CUDA graph), vLLM's "
        "Triton ops where importable, the torch per-adapter loop and gather + bmm.",
        result=result,
        tables=[goal_table, sweep_table],
        goals=goals,
        headlines=[_headline(shapes, us, dtype)],
    )


def _determinism(split: float | None, atomic: float | None) -> str:
    if split is None or atomic is None:
        return NOT_MEASURED
    return pct(100 * (split / atomic - 1), signed=True)


def _headline(shapes: list[str], us, dtype: str) -> Headline:
    """The goals' shapes when the file has them, else every shape in it: ours against the baselines."""
    measured = [s for s in GOAL_SHAPES.values() if us(s, OURS) is not None] or shapes
    parts = []
    for shape in measured:
        others = [f"{b} {num(us(shape, b))}" for b in BASELINES if us(shape, b) is not None]
        parts.append(
            f"{shape}: ours {num(us(shape, OURS))}" + (", " + ", ".join(others) if others else "") + " µs"
        )
    return Headline(f"multi-LoRA shrink + expand, {dtype}, µs per call", "; ".join(parts))
