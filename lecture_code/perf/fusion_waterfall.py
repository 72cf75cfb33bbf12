"""Notebook 05's waterfall: the training step after each fusion, in the order the lecture applies them.

:func:`~lecture_code.perf.dlrm_step.measure` times the implementations of :mod:`.dlrm_step`; here they become
*steps* of one story, each with what it does (:data:`STEPS`) and the step it changes one thing over
(:data:`BUILDS_ON`), which is not always the row above it: ``compile, dense grads`` builds on ``eager, dense
grads``, ``fused`` on ``packed + index_add_`` (our kernels for torch's, both without a graph). So a step is
judged against the step it builds on (``vs_base``), never against a row that differs in two things.
:func:`waterfall_rows` orders the measured rows and adds the factors; :func:`lever_table` sets the two
levers of the middle rows apart, {torch ops, our kernels} × {no graph, CUDA graph}; :func:`waterfall_chart`
draws the rows; :func:`waterfall_sentences` states what the numbers say (which step helped, by how much,
which lever earned what, whether the fastest step's GPU or host time bounds it, and the goal), so the
notebook's prose never cites a number that no cell printed. The goal (:data:`GOAL_MS`) is RESULTS.md's, for
the Kaggle preset at batch 2048 on an H100.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from matplotlib.figure import Figure

from lecture_code.perf.dlrm_step import StepResult
from lecture_code.profiling.trace_plots import save_figure
from lecture_code.results.goals import goals_for
from lecture_code.results.workloads.dlrm_step import precision

__all__ = [
    "BUILDS_ON",
    "GOAL_MS",
    "STEPS",
    "gpu_idle",
    "lever_table",
    "precision",
    "waterfall_chart",
    "waterfall_rows",
    "waterfall_sentences",
]

GOAL_MS = next(g.bound for g in goals_for("dlrm_step") if g.key == "kaggle, batch 2048")  # one source
"""The goal (RESULTS.md): ms per training step, Kaggle preset, batch 2048, one H100."""

STEPS: dict[str, str] = {
    "eager, dense grads": "the model of notebook 01: 26 nn.Embedding, a dense gradient per table",
    "eager, sparse grads": "nn.Embedding(sparse=True): gradients of the touched rows only",
    "compile, dense grads": "torch.compile on the model's forward (backward by AOTAutograd; notebook 03)",
    "packed + index_add_": "one packed table, one gather; SGD by index_add_ inside the backward",
    "packed + index_add_, CUDA graph": "the same step captured once, replayed: one launch per step",
    "fused": "our kernels: table-batched embedding with SGD in its backward, fused dot interaction",
    "fused, CUDA graph": "the fused step captured once, replayed",
    "fused + compiled MLPs, CUDA graph": "and the two MLPs and their SGD step through torch.compile",
    "fused + compiled MLPs, atomic SGD, CUDA graph": (
        "and the tables' SGD by atomic adds: no sort, not bit-reproducible"
    ),
    "fused + MLP SGD in backward, atomic SGD, CUDA graph": (
        "MLPs eager again, each layer's SGD inside its backward beside the dX chain; loss and hash compiled"
    ),
    "fused + compiled MLPs, atomic SGD, TF32, CUDA graph": (
        "the compiled-MLP step again, its MLP matmuls on TF32 tensor cores: a precision change"
    ),
    "fused + MLP SGD in backward, atomic SGD, TF32, CUDA graph": "the SGD-in-backward step on TF32",
    "fused + MLP SGD in backward, atomic SGD, bf16 MLPs, CUDA graph": (
        "the SGD-in-backward step with bf16 MLPs: bf16 GEMMs on copies of fp32 masters, fp32 tables and loss"
    ),
}
"""Each implementation of :data:`~lecture_code.perf.dlrm_step.IMPLEMENTATIONS`, in the lecture's order, with
what it does over the step it builds on (:data:`BUILDS_ON`)."""

BUILDS_ON: dict[str, str | None] = {
    "eager, dense grads": None,
    "eager, sparse grads": "eager, dense grads",
    "compile, dense grads": "eager, dense grads",
    "packed + index_add_": "eager, sparse grads",
    "packed + index_add_, CUDA graph": "packed + index_add_",
    "fused": "packed + index_add_",
    "fused, CUDA graph": "fused",
    "fused + compiled MLPs, CUDA graph": "fused, CUDA graph",
    "fused + compiled MLPs, atomic SGD, CUDA graph": "fused + compiled MLPs, CUDA graph",
    "fused + MLP SGD in backward, atomic SGD, CUDA graph": "fused + compiled MLPs, atomic SGD, CUDA graph",
    "fused + compiled MLPs, atomic SGD, TF32, CUDA graph": "fused + compiled MLPs, atomic SGD, CUDA graph",
    "fused + MLP SGD in backward, atomic SGD, TF32, CUDA graph": (
        "fused + MLP SGD in backward, atomic SGD, CUDA graph"
    ),
    "fused + MLP SGD in backward, atomic SGD, bf16 MLPs, CUDA graph": (
        "fused + MLP SGD in backward, atomic SGD, CUDA graph"
    ),
}
"""The step each one changes one thing over (``None``: the first). Its ``vs_base`` is measured against it."""

LEVERS = {  # (ops, graph) -> implementation: the two levers of the middle rows, one at a time
    ("torch ops", "no graph"): "packed + index_add_",
    ("torch ops", "CUDA graph"): "packed + index_add_, CUDA graph",
    ("our kernels", "no graph"): "fused",
    ("our kernels", "CUDA graph"): "fused, CUDA graph",
}


def waterfall_rows(results: Sequence[StepResult], ids: str = "uniform") -> list[dict]:
    """The measured rows of id distribution ``ids`` in :data:`STEPS` order (failed or unmeasured ones left
    out), each with ``change`` (what it does), ``builds_on`` (:data:`BUILDS_ON`), and the speed-up factors
    ``vs_base`` (over the step it builds on; NaN where that one was not measured), ``vs_previous`` (over the
    row above, which may differ in more than one thing) and ``vs_first``; ``gpu_idle`` (:func:`gpu_idle`,
    without a profiler), and where the result carries them (a ``StepMeasurement``) ``syncs_per_step``,
    ``sync_sites``, ``host_clean`` and ``host_timer``."""
    by_name = {r.implementation: r for r in results if r.ids == ids and not r.error}
    rows: list[dict] = []
    for name, change in STEPS.items():
        r = by_name.get(name)
        if r is None or not math.isfinite(r.ms_per_step):
            continue
        first = rows[0]["ms_per_step"] if rows else r.ms_per_step
        previous = rows[-1]["ms_per_step"] if rows else r.ms_per_step
        base = next((row for row in rows if row["implementation"] == BUILDS_ON[name]), None)
        rows.append(
            {
                "implementation": name,
                "change": change,
                "builds_on": BUILDS_ON[name],
                "vs_base": base["ms_per_step"] / r.ms_per_step if base else math.nan,
                "ms_per_step": r.ms_per_step,
                "ms_min": r.ms_min,
                "ms_max": r.ms_max,
                "gpu_ms": r.gpu_ms,
                "host_ms": r.host_ms,
                "gpu_idle": gpu_idle(r.gpu_ms, r.ms_per_step),
                "syncs_per_step": getattr(r, "syncs_per_step", math.nan),
                "host_clean": getattr(r, "host_clean", None),
                "host_timer": getattr(r, "host_timer", ""),
                "sync_sites": getattr(r, "sync_sites", ""),
                "samples_per_s": r.samples_per_s,
                "peak_mib": r.peak_mib,
                "vs_previous": previous / r.ms_per_step,
                "vs_first": first / r.ms_per_step,
            }
        )
    return rows


def gpu_idle(gpu_ms: float | None, ms_per_step: float) -> float | None:
    """The GPU's idle share of a step without a profiler: ``1 − gpu_ms / ms_per_step`` (the GPU's time of one
    step, host hidden, over the wall time per step of the loop), 0 where the GPU's work fills the step;
    ``None`` without a GPU time. A profiled run's idle share is larger: the profiler slows the host
    (notebook 02)."""
    if gpu_ms is None or not math.isfinite(gpu_ms) or not ms_per_step > 0:
        return None
    return max(0.0, 1.0 - gpu_ms / ms_per_step)


def lever_table(rows: Sequence[dict]) -> list[dict]:
    """The middle of the waterfall as two levers: ms per step of {torch ops, our kernels} × {no graph,
    CUDA graph} (:data:`LEVERS`; ``None`` where not measured), one row per kind of ops, with the graph's
    factor in each row; the kernels' factor at each graph setting is in :func:`waterfall_sentences`."""
    ms = {r["implementation"]: r["ms_per_step"] for r in rows}
    table = []
    for ops in ("torch ops", "our kernels"):
        plain, graph = (ms.get(LEVERS[(ops, g)]) for g in ("no graph", "CUDA graph"))
        factor = plain / graph if plain and graph else None
        table.append({"ops": ops, "no graph ms": plain, "CUDA graph ms": graph, "graph ×": factor})
    return table


def _lever_sentence(rows: Sequence[dict]) -> str | None:
    """Which lever earned what, from :func:`lever_table`: the graph's factor for each kind of ops, and our
    kernels' factor over torch ops with and without the graph. ``None`` without all four cells."""
    (torch_ops, ours) = lever_table(rows)
    cells = [torch_ops["no graph ms"], torch_ops["CUDA graph ms"], ours["no graph ms"], ours["CUDA graph ms"]]
    if any(c is None for c in cells):
        return None
    return (
        f"The two levers apart: the CUDA graph ×{torch_ops['graph ×']:.2f} for torch ops and "
        f"×{ours['graph ×']:.2f} for our kernels; our kernels over torch ops ×{cells[0] / cells[2]:.2f} "
        f"without a graph and ×{cells[1] / cells[3]:.2f} in one."
    )


def _axis_end(fig: Figure, ax, labels, end: float) -> float:
    """The x-axis end at which every label (placed at its bar's end, a fixed width in pixels) fits inside."""
    fig.tight_layout()  # as save_figure lays it out, so the axis width measured is the final one
    fig.draw_without_rendering()
    width = ax.get_window_extent().width
    for t in labels:
        w = t.get_window_extent().width
        if w < width:  # x0 + w·(end/width) ≤ end  ⇔  end ≥ x0·width / (width − w)
            end = max(end, t.get_position()[0] * width / (width - w) * 1.02)
    return end


def waterfall_chart(rows: Sequence[dict], png_path: str | Path, title: str, subtitle: str) -> Path:
    """Horizontal bars of ms per step, top to bottom in the lecture's order, whiskers from min to max of the
    repeats, each labelled with its median and its factor over the step it builds on; a dashed line at
    :data:`GOAL_MS` where the axis reaches it."""
    fig = Figure(figsize=(10, 1.5 + 0.55 * len(rows)))
    ax = fig.subplots()
    ys = range(len(rows))
    ms = [r["ms_per_step"] for r in rows]
    lo = [max(m - r["ms_min"], 0.0) for m, r in zip(ms, rows, strict=True)]
    hi = [max(r["ms_max"] - m, 0.0) for m, r in zip(ms, rows, strict=True)]
    ax.barh(ys, ms, xerr=[lo, hi], color="tab:blue", capsize=3, ecolor="0.3")
    labels = []
    for y, r in zip(ys, rows, strict=True):
        factor = "" if not math.isfinite(r["vs_base"]) else f"  (×{r['vs_base']:.2f} vs {r['builds_on']!r})"
        label = ax.text(r["ms_max"], y, f" {r['ms_per_step']:.3g} ms{factor}", va="center", fontsize=8)
        labels.append(label)
        label.set_in_layout(False)  # the axis is widened to hold it (_axis_end), not the layout squeezed
    right = max(r["ms_max"] for r in rows)
    if GOAL_MS < right:
        ax.axvline(GOAL_MS, color="tab:red", linestyle="--", linewidth=1)
        ax.text(GOAL_MS, len(rows) - 0.5, f" goal {GOAL_MS} ms", color="tab:red", fontsize=8, va="bottom")
    ax.set_yticks(list(ys), [r["implementation"] for r in rows])
    ax.invert_yaxis()
    ax.set_xlabel("ms per training step (median of repeated runs; whiskers: min–max)")
    ax.grid(alpha=0.3, axis="x")
    fig.suptitle(f"{title}\n{subtitle}", fontsize=10)
    ax.set_xlim(0, _axis_end(fig, ax, labels, right * 1.45))  # last: the layout it measures is the final one
    return save_figure(fig, png_path)


def waterfall_sentences(rows: Sequence[dict], on_gpu: bool, kaggle_batch_2048: bool) -> list[str]:
    """What the waterfall shows, as sentences built from its numbers.

    ``on_gpu``: timings from a GPU (on a CPU the kernels run in Triton's interpreter, one program at a time,
    and the numbers only show that the code runs). ``kaggle_batch_2048``: RESULTS.md's setting, where
    :data:`GOAL_MS` applies."""
    if not rows:
        return ["No implementation was measured."]
    first, last = rows[0], rows[-1]
    best = min(rows, key=lambda r: r["ms_per_step"])
    out = [
        f"From {first['implementation']!r} ({first['ms_per_step']:.3g} ms) to {last['implementation']!r} "
        f"({last['ms_per_step']:.3g} ms): ×{last['vs_first']:.2f}."
    ]
    # (base, step): a step helped or hurt only when their min–max ranges do not overlap
    by_name = {r["implementation"]: r for r in rows}
    pairs = [(by_name[r["builds_on"]], r) for r in rows if r["builds_on"] in by_name]
    helped = [r for base, r in pairs if r["ms_max"] < base["ms_min"]]
    hurt = [r for base, r in pairs if r["ms_min"] > base["ms_max"]]
    if helped:
        biggest = max(helped, key=lambda r: r["vs_base"])
        out.append(
            f"The largest step beyond the spread of the repeats: {biggest['implementation']!r}, "
            f"×{biggest['vs_base']:.2f} over {biggest['builds_on']!r}, the step it builds on "
            f"({biggest['change']})."
        )
    for r in hurt:
        out.append(
            f"{r['implementation']!r} is slower than {r['builds_on']!r}, the step it builds on "
            f"(×{r['vs_base']:.2f}), beyond the spread of the repeats."
        )
    levers = _lever_sentence(rows)
    if levers:
        out.append(levers)
    out.append(
        f"Fastest: {best['implementation']!r}, {best['ms_per_step']:.3g} ms per step, "
        f"{best['samples_per_s']:,.0f} samples/s."
    )
    if best["gpu_ms"] is not None and math.isfinite(best["gpu_ms"]):
        bound = "the GPU's work" if best["gpu_ms"] >= best["host_ms"] else "the host issuing it"
        if best.get("host_clean") is False:  # the host's clock may hold waits: only an upper bound
            out.append(
                f"Its step is {best['gpu_ms']:.3g} ms of GPU work; the host's time to issue it, "
                f"{best['host_ms']:.3g} ms, may include waits for the GPU (an upper bound)."
            )
        else:
            out.append(
                f"Its step is {best['gpu_ms']:.3g} ms of GPU work and {best['host_ms']:.3g} ms of host time "
                f"to issue it: {bound} sets the pace."
            )
    if not on_gpu:
        out.append(
            "These are CPU timings: our kernels ran in Triton's interpreter, one program at a time, so they "
            "only show that the code runs; the ranking on a GPU is the GPU run's."
        )
    elif kaggle_batch_2048:
        out.append(f"RESULTS.md's goal here is ≤ {GOAL_MS} ms per step.")
        for label, kind in (("at fp32", "fp32"), ("with TF32", "TF32"), ("with bf16 MLPs", "bf16")):
            chosen = [r for r in rows if precision(r["implementation"]) == kind]
            if chosen:
                r = min(chosen, key=lambda r: r["ms_per_step"])
                verdict = "meets" if r["ms_per_step"] <= GOAL_MS else "misses"
                out.append(f"The fastest step {label}, {r['implementation']!r} ({r['ms_per_step']:.3g} ms), "
                           f"{verdict} it.")  # fmt: skip
    return out
