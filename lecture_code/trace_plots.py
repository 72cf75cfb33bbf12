"""Two pictures of a profile: a timeline of the trace and a bar chart of where the time went.

``plot_timeline(load_trace(path), "timeline.png", title)`` draws one lane per GPU stream (kernels, copies)
when the trace has GPU events, else one lane per host thread with its *top-level* ``cpu_op`` events (ops not
nested inside another op, so every instant is drawn once). The ``ProfilerStep#k`` ranges are shaded behind.
``plot_op_breakdown(top_ops(prof), "ops.png", title)`` draws each op's share of self time.
Both run headless (Agg backend) and return the PNG path.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from lecture_code.trace_analysis import gpu_events  # noqa: E402

MAX_LEGEND = 8  # the most-time ops get a colour and a legend entry; the rest are grey


def top_level(ops: pd.DataFrame) -> pd.DataFrame:
    """Events of one thread that no earlier event on that thread contains (``ops`` sorted by ``ts``)."""
    keep, end = [], float("-inf")
    for ts, dur in zip(ops["ts"], ops["dur"], strict=True):
        keep.append(ts >= end)
        end = max(end, ts + dur) if ts >= end else end
    return ops[keep]


def timeline_lanes(events: pd.DataFrame) -> tuple[dict[str, pd.DataFrame], str]:
    """{lane label: its events} and what the lanes are ("GPU stream" or "host thread")."""
    gpu = gpu_events(events)
    if not gpu.empty:
        return {f"GPU {pid} stream {s}": g for (pid, s), g in gpu.groupby(["pid", "stream"])}, "GPU stream"
    ops = events[events["cat"] == "cpu_op"]
    return {f"thread {tid}": top_level(g) for tid, g in ops.groupby("tid")}, "host thread"


def save_figure(fig: plt.Figure, png_path: str | Path) -> Path:
    """Lay out ``fig``, write it to ``png_path`` (making its folder), close it; return the path."""
    png_path = Path(png_path)
    png_path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(png_path, dpi=120)
    plt.close(fig)
    return png_path


def plot_timeline(events: pd.DataFrame, png_path: str | Path, title: str) -> Path:
    """Horizontal bars over time (ms from the first event): one lane per GPU stream or host thread."""
    lanes, kind = timeline_lanes(events)
    if not lanes:
        raise ValueError("no kernels and no cpu_op events in this trace")
    t0 = events["ts"].min()
    drawn = pd.concat(lanes.values())
    by_time = drawn.groupby("name")["dur"].sum().sort_values(ascending=False)
    palette = plt.get_cmap("tab10")
    colours = {name: palette(i) for i, name in enumerate(by_time.index[:MAX_LEGEND])}

    fig, ax = plt.subplots(figsize=(12, 1.2 + 0.6 * len(lanes)))
    steps = events[events["name"].str.startswith("ProfilerStep#")]
    for i, (ts, dur, name) in enumerate(zip(steps["ts"], steps["dur"], steps["name"], strict=True)):
        ax.axvspan((ts - t0) / 1e3, (ts + dur - t0) / 1e3, color="0.93" if i % 2 else "0.86", zorder=0)
        ax.text((ts - t0) / 1e3, len(lanes) - 0.35, name.removeprefix("ProfilerStep"), fontsize=7, va="top")
    for row, lane in enumerate(lanes.values()):
        bars = [((ts - t0) / 1e3, dur / 1e3) for ts, dur in zip(lane["ts"], lane["dur"], strict=True)]
        face = [colours.get(name, "0.6") for name in lane["name"]]
        ax.broken_barh(bars, (row - 0.35, 0.7), facecolors=face, edgecolor="none", zorder=2)

    ax.set_yticks(range(len(lanes)), list(lanes))
    ax.set_ylim(-0.6, len(lanes) - 0.2)
    ax.set_xlabel("time since first event (ms)")
    ax.set_title(f"{title} — one lane per {kind}")
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in colours.values()]
    ax.legend(handles, list(colours), loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8, frameon=False)
    return save_figure(fig, png_path)


def plot_op_breakdown(df: pd.DataFrame, png_path: str | Path, title: str) -> Path:
    """Horizontal bars of ``share_pct`` per op (a :func:`~lecture_code.trace_analysis.top_ops` table)."""
    df = df.iloc[::-1]  # largest at the top
    fig, ax = plt.subplots(figsize=(9, 1.0 + 0.35 * len(df)))
    labels = [name if len(name) <= 48 else name[:45] + "..." for name in df["name"]]
    ax.barh(range(len(df)), df["share_pct"], color="tab:blue")
    ax.set_yticks(range(len(df)), labels, fontsize=8)
    for y, (share, calls) in enumerate(zip(df["share_pct"], df["calls"], strict=True)):
        ax.text(share, y, f" {share:.1f}% ({calls} calls)", va="center", fontsize=8)
    ax.set_xlim(0, max(df["share_pct"].max(), 1.0) * 1.25)
    ax.set_xlabel("share of self time (%)")
    ax.set_title(title)
    return save_figure(fig, png_path)
