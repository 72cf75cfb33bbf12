"""The QLoRA linear (``benchmarks/bench_qlora.py``): W frozen in NF4, LoRA in 16 bits, per provider.

Reads one row per (shape, pass, provider): median device time ``ms``, ``overhead %`` over the 16-bit base
linear of the same pass (its ``(graph)`` rows over the graphed base), host and wall µs per call. Ours is
``qlora_linear``: its NF4 GEMM (provider :data:`OURS`, ``version="pairs"``; :data:`OURS_BY_ELEMENT`) and its
default version through a 16-bit copy (:data:`OURS_VIA_16`), whose rows the goals read (:data:`DEFAULT`);
:data:`DEQUANT` is the usual order (W dequantized by a kernel of its own, forward and backward, then torch
ops).
"""

from __future__ import annotations

from lecture_code.bench import csv_number
from lecture_code.results.goals import goals_for
from lecture_code.results.section import NOT_MEASURED, GoalCheck, Headline, Section, Table, num, pct
from lecture_code.results.sources import ResultFile

__all__ = [
    "BASE",
    "DEFAULT",
    "DEQUANT",
    "GRAPH",
    "OURS",
    "OURS_BY_ELEMENT",
    "OURS_VIA_16",
    "build",
    "goal_checks",
]

BASE, DEQUANT, OURS, GRAPH = "16-bit base linear", "dequantize + torch LoRA", "ours (NF4 fused)", " (graph)"
OURS_BY_ELEMENT = "ours (NF4 fused, by element)"  # version="elements": a byte load per value
OURS_VIA_16 = "ours (via a 16-bit copy)"  # kernels.qlora.via_16_bits: the pass, then our fused LoRA ops
DEFAULT = OURS_VIA_16  # qlora_linear's default version: the goals read its rows
VERSUS = " vs dequantize"  # a goal key ending so: the usual order's time over ours (a speed-up)


def goal_checks(rows: list[dict]) -> list[GoalCheck]:
    """Each QLoRA goal (keys ``"<shape> <pass>"``, ``… graph`` for the graphed rows, ``… vs dequantize``)
    read from ``rows`` (CSV rows or the benchmark's own dicts)."""
    at = {(r["shape"], r["pass"], r["provider"]): r for r in rows}
    checks = []
    for goal in goals_for("qlora"):
        key, graph = goal.key.removesuffix(VERSUS), goal.key.endswith(" graph")
        shape, pass_ = key.removesuffix(" graph").rsplit(" ", 1)
        ours = at.get((shape, pass_, DEFAULT + (GRAPH if graph else "")))
        if goal.key.endswith(VERSUS):
            theirs = at.get((shape, pass_, DEQUANT))
            value = (
                None if ours is None or theirs is None else csv_number(theirs["ms"]) / csv_number(ours["ms"])
            )
            shown = NOT_MEASURED if value is None else f"{num(value)}× ({DEQUANT} / ours, {shape} {pass_})"
        else:
            value = None if ours is None else csv_number(ours["overhead %"])
            shown = (
                NOT_MEASURED
                if value is None
                else f"{pct(value, signed=True)} ({DEFAULT}{GRAPH if graph else ''})"
            )
        checks.append(GoalCheck(goal, value, shown))
    return checks


def build(result: ResultFile) -> Section:
    rows = result.rows
    dtype = rows[0].get("dtype", "not recorded")
    providers = [p for p in dict.fromkeys(r["provider"] for r in rows) if p != BASE]
    keys = list(dict.fromkeys((r["shape"], r["pass"]) for r in rows))
    at = {(r["shape"], r["pass"], r["provider"]): r for r in rows}

    def cell(shape, pass_, provider):
        row = at.get((shape, pass_, provider))
        return pct(csv_number(row["overhead %"]), signed=True) if row else NOT_MEASURED

    table = Table(
        f"Overhead over the 16-bit base linear (median device time), {dtype}; `(graph)` rows over the "
        "graphed base",
        ["shape", "pass", f"{BASE} ms", *providers],
        [[s, p, num(csv_number(at[(s, p, BASE)]["ms"])) if (s, p, BASE) in at else NOT_MEASURED,
          *[cell(s, p, name) for name in providers]] for s, p in keys],
    )  # fmt: skip
    checks = goal_checks(rows)
    parts = [f"{c.goal.key}: {c.reached}" for c in checks if c.value is not None]
    return Section(
        workload="qlora",
        title=TITLE,
        command=COMMAND,
        what="`x Wᵀ + s·(x Aᵀ) Bᵀ` with W frozen in NF4 (4-bit codes, double-quantized absmaxes), every "
        "provider checked against the fp32 reference on the dequantized weight before it is timed: ours "
        "(`kernels.qlora.linear.qlora_linear`: its NF4 GEMM versions, W dequantized inside the GEMM, "
        "forward and dX; its default version, the dequantize pass and then our fused LoRA kernels on the "
        "16-bit copy: the goals read its rows), the usual order (dequantize + torch LoRA), our bf16 LoRA on "
        "the 16-bit weight, bitsandbytes + PEFT where it imports.",
        result=result,
        tables=[table],
        goals=checks,
        headlines=[Headline(f"QLoRA linear, {dtype}", "; ".join(parts) or NOT_MEASURED)],
    )


TITLE = "QLoRA linear: a 4-bit (NF4) base with fused LoRA kernels"
COMMAND = "python -m benchmarks.bench_qlora"
