"""Two pictures of a profile: a timeline of the trace and a bar chart of where the time went.

``plot_timeline(load_trace(path), "timeline.png", title)`` draws the *top-level* ``cpu_op`` events (ops not
nested inside another op, so every instant is drawn once) of each host thread, or on a GPU trace of the main
host thread above one lane per GPU stream (kernels, copies): where the GPU lane is empty while the host lane
is full, the GPU waits for Python. The ``ProfilerStep#k`` ranges are shaded behind.
``plot_op_breakdown(top_ops(prof), "ops.png", title)`` (or a :func:`~lecture_code.trace_analysis.top_kernels`
table) draws each op's share of self time.
Both run headless (Agg backend) and return the PNG path.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from lecture_code.trace_analysis import gpu_events, short_kernel_name, step_ranges  # noqa: E402

MAX_LEGEND = 8  # the most-time ops get a colour and a legend entry; the rest are grey


def top_level(ops: pd.DataFrame) -> pd.DataFrame:
    """Events of one thread that no earlier event on that thread contains (``ops`` sorted by ``ts``)."""
    keep, end = [], float("-inf")
    for ts, dur in zip(ops["ts"], ops["dur"], strict=True):
        keep.append(ts >= end)
        end = max(end, ts + dur) if ts >= end else end
    return ops[keep]


def main_thread(events: pd.DataFrame):
    """The host thread with the most top-level ``cpu_op`` time (the training loop's thread)."""
    ops = events[events["cat"] == "cpu_op"]
    if ops.empty:
        return None
    return max(ops.groupby("tid"), key=lambda item: top_level(item[1])["dur"].sum())[0]


def timeline_lanes(events: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """{lane label: its events}: every host thread's top-level ops on a CPU-only trace; on a GPU trace the
    main host thread's ops above one lane per GPU stream, so host gaps and GPU gaps line up."""
    ops = events[events["cat"] == "cpu_op"]
    gpu = gpu_events(events)
    if gpu.empty:
        return {f"host thread {tid}": top_level(g) for tid, g in ops.groupby("tid")}
    lanes = {}
    tid = main_thread(events)
    if tid is not None:
        lanes["host (ATen ops)"] = top_level(ops[ops["tid"] == tid])
    for (pid, stream), g in gpu.groupby(["pid", "stream"]):
        lanes[f"GPU {pid} stream {int(stream)}"] = g
    return lanes


def save_figure(fig: plt.Figure, png_path: str | Path) -> Path:
    """Lay out ``fig``, write it to ``png_path`` (making its folder), close it; return the path."""
    png_path = Path(png_path)
    png_path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(png_path, dpi=120)
    plt.close(fig)
    return png_path


def plot_timeline(events: pd.DataFrame, png_path: str | Path, title: str) -> Path:
    """Horizontal bars over time (ms from the first event): host ops and GPU streams, one lane each."""
    lanes = timeline_lanes(events)
    if not lanes:
        raise ValueError("no kernels and no cpu_op events in this trace")
    t0 = events["ts"].min()
    drawn = pd.concat(lanes.values())
    names = drawn["name"].map(short_kernel_name)
    by_time = drawn["dur"].groupby(names).sum().sort_values(ascending=False)
    palette = plt.get_cmap("tab10")
    colours = {name: palette(i) for i, name in enumerate(by_time.index[:MAX_LEGEND])}

    fig, ax = plt.subplots(figsize=(13, 1.4 + 0.6 * len(lanes)))
    steps = step_ranges(events)
    for i, (ts, dur, name) in enumerate(zip(steps["ts"], steps["dur"], steps["name"], strict=True)):
        ax.axvspan((ts - t0) / 1e3, (ts + dur - t0) / 1e3, color="0.93" if i % 2 else "0.86", zorder=0)
        ax.text((ts - t0) / 1e3, len(lanes) - 0.35, name.removeprefix("ProfilerStep"), fontsize=7, va="top")
    for row, lane in enumerate(lanes.values()):
        bars = [((ts - t0) / 1e3, dur / 1e3) for ts, dur in zip(lane["ts"], lane["dur"], strict=True)]
        face = [colours.get(short_kernel_name(name), "0.6") for name in lane["name"]]
        ax.broken_barh(bars, (row - 0.35, 0.7), facecolors=face, edgecolor="none", zorder=2)

    ax.set_yticks(range(len(lanes)), list(lanes))
    ax.set_ylim(-0.6, len(lanes) - 0.2)
    ax.invert_yaxis()  # the host on top, its GPU streams below
    ax.set_xlabel("time since first event (ms)")
    ax.set_title(title, fontsize=10)
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in colours.values()]
    labels = [name if len(name) <= 40 else name[:37] + "..." for name in colours]
    ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8, frameon=False)
    return save_figure(fig, png_path)


def plot_op_breakdown(df: pd.DataFrame, png_path: str | Path, title: str) -> Path:
    """Horizontal bars of ``share_pct`` per op (a :func:`~lecture_code.trace_analysis.top_ops` table)."""
    df = df.iloc[::-1]  # largest at the top
    fig, ax = plt.subplots(figsize=(9, 1.0 + 0.35 * len(df)))
    short = [short_kernel_name(name) for name in df["name"]]
    labels = [name if len(name) <= 48 else name[:45] + "..." for name in short]
    ax.barh(range(len(df)), df["share_pct"], color="tab:blue")
    ax.set_yticks(range(len(df)), labels, fontsize=8)
    for y, (share, calls) in enumerate(zip(df["share_pct"], df["calls"], strict=True)):
        ax.text(share, y, f" {share:.1f}% ({calls} calls)", va="center", fontsize=8)
    ax.set_xlim(0, max(df["share_pct"].max(), 1.0) * 1.25)
    ax.set_xlabel("share of self time (%)")
    ax.set_title(title)
    return save_figure(fig, png_path)
