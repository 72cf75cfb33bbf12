"""Notebook 05's waterfall: the training step after each fusion, in the order the lecture applies them.

:func:`~lecture_code.perf.dlrm_step.measure` times the implementations of :mod:`.dlrm_step`; here they become
*steps* of one story, each with what it does (:data:`STEPS`). The row above a step is not always the one it
builds on (``compile, dense grads`` builds on ``eager, dense grads``, ``fused`` on ``packed + index_add_``
without the graph), so ``vs_previous`` and the sentences' comparisons with "the step above" can mix two
changes: at ``fused`` the CUDA graph's loss and the kernels' swap. :func:`waterfall_rows`
orders the measured rows and adds the ratio to the previous step and to the first; :func:`waterfall_chart`
draws them; :func:`waterfall_sentences` states what the numbers say (which step helped, by how much, whether
the last step's GPU or host time bounds it, and the goal), so the notebook's prose never cites a number that
no cell printed. The goal (:data:`GOAL_MS`) is RESULTS.md's, for the Kaggle preset at batch 2048 on an H100.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from pathlib import Path

from matplotlib.figure import Figure

from lecture_code.perf.dlrm_step import StepResult
from lecture_code.profiling.trace_plots import save_figure
from lecture_code.results.goals import goals_for

__all__ = ["GOAL_MS", "STEPS", "waterfall_chart", "waterfall_rows", "waterfall_sentences"]

GOAL_MS = next(g.bound for g in goals_for("dlrm_step") if g.key == "kaggle, batch 2048")  # one source
"""The goal (RESULTS.md): ms per training step, Kaggle preset, batch 2048, one H100."""

STEPS: dict[str, str] = {
    "eager, dense grads": "the model of notebook 01: 26 nn.Embedding, a dense gradient per table",
    "eager, sparse grads": "nn.Embedding(sparse=True): gradients of the touched rows only",
    "compile, dense grads": "torch.compile on forward + loss (notebook 03)",
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
}
"""Each implementation of :data:`~lecture_code.perf.dlrm_step.IMPLEMENTATIONS`, in the lecture's order, with
what it does (over the step it builds on, which is not always the one before it: see the module docstring)."""


def waterfall_rows(results: Sequence[StepResult], ids: str = "uniform") -> list[dict]:
    """The measured rows of id distribution ``ids`` in :data:`STEPS` order (failed or unmeasured ones left
    out), each with ``change`` (what it does), ``vs_previous`` and ``vs_first`` (speed-up factors)."""
    by_name = {r.implementation: r for r in results if r.ids == ids and not r.error}
    rows: list[dict] = []
    for name, change in STEPS.items():
        r = by_name.get(name)
        if r is None or not math.isfinite(r.ms_per_step):
            continue
        first = rows[0]["ms_per_step"] if rows else r.ms_per_step
        previous = rows[-1]["ms_per_step"] if rows else r.ms_per_step
        rows.append(
            {
                "implementation": name,
                "change": change,
                "ms_per_step": r.ms_per_step,
                "ms_min": r.ms_min,
                "ms_max": r.ms_max,
                "gpu_ms": r.gpu_ms,
                "host_ms": r.host_ms,
                "samples_per_s": r.samples_per_s,
                "peak_mib": r.peak_mib,
                "vs_previous": previous / r.ms_per_step,
                "vs_first": first / r.ms_per_step,
            }
        )
    return rows


def waterfall_chart(rows: Sequence[dict], png_path: str | Path, title: str, subtitle: str) -> Path:
    """Horizontal bars of ms per step, top to bottom in the lecture's order, whiskers from min to max of the
    repeats, each labelled with its median and its factor over the step above; a dashed line at
    :data:`GOAL_MS` where the axis reaches it."""
    fig = Figure(figsize=(10, 1.5 + 0.55 * len(rows)))
    ax = fig.subplots()
    ys = range(len(rows))
    ms = [r["ms_per_step"] for r in rows]
    lo = [max(m - r["ms_min"], 0.0) for m, r in zip(ms, rows, strict=True)]
    hi = [max(r["ms_max"] - m, 0.0) for m, r in zip(ms, rows, strict=True)]
    ax.barh(ys, ms, xerr=[lo, hi], color="tab:blue", capsize=3, ecolor="0.3")
    for y, r in zip(ys, rows, strict=True):
        factor = "" if y == 0 else f"  (×{r['vs_previous']:.2f} vs above)"
        ax.text(r["ms_max"], y, f" {r['ms_per_step']:.3g} ms{factor}", va="center", fontsize=8)
    right = max(r["ms_max"] for r in rows)
    if GOAL_MS < right:
        ax.axvline(GOAL_MS, color="tab:red", linestyle="--", linewidth=1)
        ax.text(GOAL_MS, len(rows) - 0.5, f" goal {GOAL_MS} ms", color="tab:red", fontsize=8, va="bottom")
    ax.set_xlim(0, right * 1.45)
    ax.set_yticks(list(ys), [r["implementation"] for r in rows])
    ax.invert_yaxis()
    ax.set_xlabel("ms per training step (median of repeated runs; whiskers: min–max)")
    ax.grid(alpha=0.3, axis="x")
    fig.suptitle(f"{title}\n{subtitle}", fontsize=10)
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
    # (step above, step): a step helped or hurt only when their min–max ranges do not overlap
    pairs = list(itertools.pairwise(rows))
    helped = [r for above, r in pairs if r["ms_max"] < above["ms_min"]]
    hurt = [r for above, r in pairs if r["ms_min"] > above["ms_max"]]
    if helped:
        biggest = max(helped, key=lambda r: r["vs_previous"])
        out.append(
            f"The largest step beyond the spread of the repeats: {biggest['implementation']!r}, "
            f"×{biggest['vs_previous']:.2f} over the step above it ({biggest['change']})."
        )
    for r in hurt:
        out.append(
            f"{r['implementation']!r} is slower than the step above it (×{r['vs_previous']:.2f}), beyond "
            f"the spread of the repeats."
        )
    out.append(
        f"Fastest: {best['implementation']!r}, {best['ms_per_step']:.3g} ms per step, "
        f"{best['samples_per_s']:,.0f} samples/s."
    )
    if best["gpu_ms"] is not None and math.isfinite(best["gpu_ms"]):
        bound = "the GPU's work" if best["gpu_ms"] >= best["host_ms"] else "the host issuing it"
        out.append(
            f"Its step is {best['gpu_ms']:.3g} ms of GPU work and {best['host_ms']:.3g} ms of host time to "
            f"issue it: {bound} sets the pace."
        )
    if not on_gpu:
        out.append(
            "These are CPU timings: our kernels ran in Triton's interpreter, one program at a time, so they "
            "only show that the code runs; the ranking on a GPU is the GPU run's."
        )
    elif kaggle_batch_2048:
        out.append(f"RESULTS.md's goal here is ≤ {GOAL_MS} ms per step.")
        for label, chosen in (("at fp32", [r for r in rows if "TF32" not in r["implementation"]]),
                              ("with TF32", [r for r in rows if "TF32" in r["implementation"]])):  # fmt: skip
            if chosen:
                r = min(chosen, key=lambda r: r["ms_per_step"])
                verdict = "meets" if r["ms_per_step"] <= GOAL_MS else "misses"
                out.append(f"The fastest step {label}, {r['implementation']!r} ({r['ms_per_step']:.3g} ms), "
                           f"{verdict} it.")  # fmt: skip
    return out
