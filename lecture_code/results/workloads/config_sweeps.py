"""The config sweeps (``benchmarks/sweep_lora_small_m.py``, ``benchmarks/sweep_multi_lora_decode.py``): per
shape (and path), how many candidates were timed, the rule's time and the fastest candidate's."""

from __future__ import annotations

from lecture_code.bench import csv_number
from lecture_code.results.section import Section, Table, num
from lecture_code.results.sources import ResultFile

SWEEPS = {  # workload: (title, command, the time column, what)
    "lora_small_m": (
        'LoRA at small M: the tiles of `version="small"` (sweep)',
        "python -m benchmarks.sweep_lora_small_m",
        "fwd+bwd us",
        '`lora_linear(version="small")` (`kernels/lora/small_m.py`) forward + backward with every candidate '
        "config, each replayed from a CUDA graph beside the frozen base linear in a graph (`rule`: the "
        "config the rule of that run chose); the candidates whose answer was wrong or that could not be "
        "captured have no time (the CSV's `why`).",
    ),
    "multi_lora_decode": (
        "Multi-LoRA decode: the configs of its paths (sweep)",
        "python -m benchmarks.sweep_multi_lora_decode",
        "us",
        "`add_multi_lora` at decode sizes with every candidate config of each of its paths (at the copy "
        "goals' sizes, where the file has them, the split path alone), each replayed from a CUDA graph "
        "(`rule`: the config the rule of that run chose); the candidates that failed have no time (the "
        "CSV's `why`).",
    ),
}


def build(result: ResultFile) -> Section:
    title, command, column, what = SWEEPS[result.workload]
    rows = []
    for group in dict.fromkeys((r["shape"], r.get("path", "")) for r in result.rows):
        sel = [r for r in result.rows if (r["shape"], r.get("path", "")) == group]
        base = [r for r in sel if r["config"].startswith("base")]
        candidates = [r for r in sel if r not in base]
        timed = sorted(
            (r for r in candidates if csv_number(r[column]) is not None), key=lambda r: float(r[column])
        )
        rule = next((r for r in candidates if r["rule"] == "True"), None)
        rows.append([
            " ".join(filter(None, group)), f"{len(timed)} of {len(candidates)}",
            num(csv_number(base[0][column])) if base else "—",
            f"{rule['config']}: {num(csv_number(rule[column]))}" if rule else "—",
            f"{timed[0]['config']}: {num(csv_number(timed[0][column]))}" if timed else "none timed",
        ])  # fmt: skip
    table = Table(
        f"`{column}` per call (device time of a CUDA-graph replay)",
        ["shape", "timed", "base", "rule", "fastest"],
        rows,
    )
    return Section(
        workload=result.workload, title=title, command=command, what=what, result=result, tables=[table]
    )
