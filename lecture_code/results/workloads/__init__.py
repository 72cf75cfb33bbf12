"""One module per workload under ``benchmarks/results/``: how its result file becomes a RESULTS.md section.

To add a workload: a module here with ``build(ResultFile) -> Section``, a line in :data:`BUILDERS`, its
goals in :mod:`lecture_code.results.goals`. A result file with no builder still gets a section
(:func:`unsummarised`: its file, stamp and plot, no numbers), and a workload the issues plan that has no
result yet gets one that says so (:data:`PLANNED`), so neither is silently missing from the page.
"""

from __future__ import annotations

from collections.abc import Callable

from lecture_code.results.goals import goals_for
from lecture_code.results.section import NOT_MEASURED, GoalCheck, Section, Table
from lecture_code.results.sources import ResultFile
from lecture_code.results.workloads import (
    config_sweeps,
    ddp,
    dlrm_step,
    fused_mlp,
    hashing,
    lora,
    lora_adaptation,
    lora_kernels,
    multi_lora,
    pointwise,
    preprocess,
    qlora,
)

__all__ = ["BUILDERS", "ORDER", "PLANNED", "build_section", "planned", "unsummarised"]

BUILDERS: dict[tuple[str, str], Callable[[ResultFile], Section]] = {
    ("preprocess", "preprocess"): preprocess.build,
    ("hashing", "hashing"): hashing.build,
    ("pointwise", "pointwise"): pointwise.build,
    ("fused_mlp", "fused_mlp"): fused_mlp.build,
    ("dlrm_step", "dlrm_step"): dlrm_step.build,
    ("dlrm_step_batch8192", "dlrm_step"): dlrm_step.build,  # the same benchmark with --batch-size 8192
    ("lora", "lora_overhead"): lora.build,
    ("lora_adaptation", "dlrm_adaptation"): lora_adaptation.build,
    ("multi_lora", "multi_lora"): multi_lora.build,
    ("ddp", "ddp"): ddp.build,
    ("ddp", "ddp-terabyte"): ddp.build,  # the same benchmark with --preset terabyte
    ("ddp", "ddp-terabyte-batch16384"): ddp.build,  # and with --batch-size 16384
    ("lora_kernels", "lora_kernels"): lora_kernels.build,
    ("lora_small_m", "lora_small_m_sweep"): config_sweeps.build,
    ("multi_lora_decode", "multi_lora_decode_sweep"): config_sweeps.build,
    ("qlora", "qlora_linear"): qlora.build,
}

# Workloads an issue asks a benchmark for, whose result may not exist yet: (title, command).
PLANNED: dict[str, tuple[str, str]] = {
    "dlrm_step": ("The fused DLRM training step (notebook 05)", "python -m benchmarks.bench_dlrm_step"),
    "multi_lora": (
        "Multi-LoRA serving: shrink + expand (notebook 08)",
        "python -m benchmarks.bench_multi_lora",
    ),
    "qlora": (qlora.TITLE, qlora.COMMAND),
}

# Page order: the lecture's order (data, 02, 04, 05, 06, 07); anything else after, alphabetically.
ORDER = (
    "preprocess",
    "hashing",
    "pointwise",
    "fused_mlp",
    "dlrm_step",
    "dlrm_step_batch8192",
    "lora",
    "lora_kernels",
    "lora_small_m",
    "lora_adaptation",
    "multi_lora",
    "multi_lora_decode",
    "qlora",
    "ddp",
)


def build_section(result: ResultFile) -> Section:
    builder = BUILDERS.get((result.workload, result.name))
    return builder(result) if builder else unsummarised(result)


def unsummarised(result: ResultFile) -> Section:
    """A result file no builder reads: named, stamped and plotted, with no numbers lifted from it."""
    title, command = PLANNED.get(
        result.workload, (f"`{result.workload}/{result.name}`", "see the file's folder")
    )
    columns = ", ".join(f"`{c}`" for c in result.rows[0]) if result.path.suffix == ".csv" else "a JSON object"
    return Section(
        workload=result.workload,
        title=title,
        command=command,
        what="No summary of this file is written yet (no builder in `lecture_code/results/workloads/`): "
        "open the file itself.",
        result=result,
        tables=[Table("What the file holds", ["rows", "columns"], [[str(len(result.rows)), columns]])],
        goals=[GoalCheck(g, None, "not read from this file yet") for g in goals_for(result.workload)],
    )


def planned(workload: str) -> Section:
    """A planned workload with no result file yet: its command and goals, nothing measured."""
    title, command = PLANNED[workload]
    return Section(
        workload=workload,
        title=title,
        command=command,
        what=f"No result under `benchmarks/results/{workload}/` yet: run `{command}` on a GPU.",
        result=None,
        goals=[GoalCheck(g, None, NOT_MEASURED) for g in goals_for(workload)],
    )
