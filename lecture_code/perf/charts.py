"""The charts of the performance findings: bars per configuration, and the hash cost against vocabulary size.

Headless (Agg backend); every function writes one PNG and returns its path. ``subtitle`` names where and with
what the numbers were measured (device, versions, date): a chart without it is not evidence.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from matplotlib.figure import Figure

from lecture_code.profiling.trace_plots import save_figure

__all__ = ["bar_chart", "hash_cost_chart"]


def bar_chart(
    rows: Sequence[dict],
    png_path: str | Path,
    title: str,
    subtitle: str,
    metrics: Sequence[tuple[str, str]] = (("ms_per_step", "time per training step (ms)"),),
) -> Path:
    """One horizontal bar per row (``row["label"]``, top to bottom in row order), one panel per metric.

    Where the rows have ``ms_min`` and ``ms_max`` (the spread of the repeats), the ``ms_per_step`` bars get
    whiskers from the minimum to the maximum, and the value printed is the median.
    """
    labels = [r["label"] for r in rows][::-1]
    fig = Figure(figsize=(5.5 * len(metrics) + 2.5, 1.4 + 0.55 * len(rows)))
    axes = fig.subplots(1, len(metrics))
    axes = [axes] if len(metrics) == 1 else list(axes)
    for ax, (key, xlabel) in zip(axes, metrics, strict=True):
        values = [float(r[key]) for r in rows][::-1]
        spread = key == "ms_per_step" and all("ms_min" in r and "ms_max" in r for r in rows)
        xerr = None
        if spread:
            lo = [v - float(r["ms_min"]) for v, r in zip(values, rows[::-1], strict=True)]
            hi = [float(r["ms_max"]) - v for v, r in zip(values, rows[::-1], strict=True)]
            xerr = [[max(x, 0.0) for x in lo], [max(x, 0.0) for x in hi]]
        ax.barh(range(len(values)), values, color="tab:blue", xerr=xerr, capsize=3, ecolor="0.3")
        right = [float(r["ms_max"]) for r in rows][::-1] if spread else values
        for y, (v, end) in enumerate(zip(values, right, strict=True)):
            ax.text(max(v, end), y, f" {v:.3g}", va="center", fontsize=9)
        ax.set_xlim(0, max(max(right), 1e-9) * 1.25)
        ax.set_xlabel(xlabel)
        ax.set_yticks(range(len(labels)), labels if ax is axes[0] else [""] * len(labels))
        ax.grid(alpha=0.3, axis="x")
    fig.suptitle(f"{title}\n{subtitle}", fontsize=10)
    return save_figure(fig, png_path)


def hash_cost_chart(rows: Sequence[dict], png_path: str | Path, subtitle: str) -> Path:
    """Time per call of each hash (a line each) against the vocabulary size, log-log."""
    fig = Figure(figsize=(6.5, 4.2))
    ax = fig.subplots()
    for name in dict.fromkeys(r["hash"] for r in rows):
        pts = [r for r in rows if r["hash"] == name]
        ax.plot([r["vocabulary"] for r in pts], [r["ms"] for r in pts], marker="o", label=name)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(f"vocabulary size V (batch B = {rows[0]['batch']})")
    ax.set_ylabel("median time per call (ms)")
    ax.set_title(f"id → row hash cost as the vocabulary grows\n{subtitle}", fontsize=10)
    ax.grid(alpha=0.3, which="both")
    ax.legend()
    return save_figure(fig, png_path)
