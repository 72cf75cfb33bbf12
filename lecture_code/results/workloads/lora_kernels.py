"""Where the fused LoRA linear's time goes, launch by launch (``benchmarks/probe_lora_kernels.py``): each v2
and v3 launch beside the cuBLAS products it replaces or adds."""

from __future__ import annotations

from lecture_code.bench import csv_number
from lecture_code.results.section import Section, Table, num, pct
from lecture_code.results.sources import ResultFile


def _versus(row: dict) -> str:
    """A launch's time over its cuBLAS GEMM's, or why it has no time, or — for the cuBLAS rows."""
    vs = csv_number(row["vs floor %"])
    return pct(vs, signed=True) if vs is not None else (row["why"] or "—")


def build(result: ResultFile) -> Section:
    tables = []
    for shape in dict.fromkeys(r["shape"] for r in result.rows):
        sel = [r for r in result.rows if r["shape"] == shape]
        rows = [
            [r["pass"], r["launch"], num(csv_number(r["us"])), _versus(r)]
            for r in sel
        ]  # fmt: skip
        tables.append(
            Table(f"{shape}: device µs per launch", ["pass", "launch", "µs", "vs its cuBLAS GEMM"], rows)
        )
    return Section(
        workload="lora_kernels",
        title="LoRA linear, launch by launch (notebook 07)",
        command="python -m benchmarks.probe_lora_kernels",
        what="Each launch timed alone (median device time, L2 flushed), checked against torch first: the "
        "forward GEMM with the expand in its epilogue (v2: s·t given; v3: s·t by producer programs) against "
        "x Wᵀ on cuBLAS, the dX GEMM likewise against dY W, and the cuBLAS passes v2 and v3 still make "
        "(x Aᵀ, dA, dB). `vs its cuBLAS GEMM`: a launch's time over the GEMM it fuses into − 1.",
        result=result,
        tables=tables,
    )
