"""Two pictures of a profile: a timeline of the trace and a bar chart of where the time went.

``plot_timeline(load_trace(path), "timeline.png", title)`` draws the *top-level* ``cpu_op`` events (ops not
nested inside another op, so every instant is drawn once) of each host thread that ran ops, the training
loop's thread first, and on a GPU trace one lane per GPU stream (kernels, copies) below them: where the GPU
lane is empty while a host lane is full, the GPU waits for Python. The ``ProfilerStep#k`` ranges are shaded
behind.

Why more than one host lane: on a GPU, ``loss.backward()`` does not run the backward ops on the calling
thread. PyTorch's autograd engine runs them on a worker thread of its own per CUDA device, while the forward
and the optimizer run on the training loop's thread. A timeline that keeps one host thread shows either the
forward and the optimizer, or only the backward (the thread with the most op time, which is what this
module drew before). On a CPU the engine runs the backward on the calling thread: one lane has all three.
``plot_op_breakdown(top_ops(prof), "ops.png", title)`` (or a :func:`~lecture_code.profiling.top_kernels`
table) draws each op's share of self time.
Both run headless (Agg backend) and return the PNG path.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pandas as pd
from matplotlib import colormaps
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from lecture_code.profiling.trace_analysis import gpu_events, short_kernel_name, step_ranges

MAX_LEGEND = 8  # the most-time ops get a colour and a legend entry; the rest are grey
OTHER_COLOUR = "0.6"  # the ops without a legend entry
# tab10 without its grey (index 7), which looked like OTHER_COLOUR: each legend entry has a colour of its own.
LEGEND_COLOURS = [colormaps["tab10"](i) for i in range(10) if i != 7]


def legend_colours(names) -> dict:
    """{name: colour} for the first :data:`MAX_LEGEND` of ``names`` (most time first): distinct, none grey."""
    return {name: LEGEND_COLOURS[i] for i, name in enumerate(list(names)[:MAX_LEGEND])}


def top_level(ops: pd.DataFrame) -> pd.DataFrame:
    """Events of one thread that no earlier event on that thread contains (``ops`` sorted by ``ts``)."""
    keep, end = [], float("-inf")
    for ts, dur in zip(ops["ts"], ops["dur"], strict=True):
        keep.append(ts >= end)
        end = max(end, ts + dur) if ts >= end else end
    return ops[keep]


def main_thread(events: pd.DataFrame):
    """The training loop's host thread: the one that recorded the ``ProfilerStep#k`` ranges, else the
    thread with the most top-level ``cpu_op`` time; ``None`` without ops."""
    steps = step_ranges(events)
    if len(steps):
        return steps["tid"].iloc[0]
    ops = events[events["cat"] == "cpu_op"]
    if ops.empty:
        return None
    return max(ops.groupby("tid"), key=lambda item: top_level(item[1])["dur"].sum())[0]


def host_lanes(events: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """{label: top-level ops} for every host thread that ran ops: the training loop's thread first, then the
    others by op time. A thread that runs ``autograd::engine`` ops is labelled as the backward's."""
    ops = events[events["cat"] == "cpu_op"]
    if ops.empty:
        return {}
    main = main_thread(events)
    per_thread = {tid: top_level(g) for tid, g in ops.groupby("tid")}
    order = sorted(per_thread, key=lambda tid: (tid != main, -per_thread[tid]["dur"].sum()))
    lanes = {}
    for tid in order:
        lane = per_thread[tid]
        backward = ops[ops["tid"] == tid]["name"].str.startswith("autograd::engine").any()
        role = "training loop" if tid == main else "autograd (backward)" if backward else "other"
        lanes[f"host: {role}, thread {tid}"] = lane
    return lanes


def timeline_lanes(events: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """{lane label: its events}: the host lanes of :func:`host_lanes`, then on a GPU trace one lane per GPU
    stream, so host gaps and GPU gaps line up."""
    lanes = host_lanes(events)
    for (pid, stream), g in gpu_events(events).groupby(["pid", "stream"]):
        lanes[f"GPU {pid} stream {int(stream)}"] = g
    return lanes


def save_figure(fig: Figure, png_path: str | Path) -> Path:
    """Lay out ``fig``, write it to ``png_path`` (making its folder), close it; return the path."""
    png_path = Path(png_path)
    png_path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(png_path, dpi=120)
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
    colours = legend_colours(by_time.index)

    fig = Figure(figsize=(13, 1.4 + 0.6 * len(lanes)))
    ax = fig.subplots()
    steps = step_ranges(events)
    for i, (ts, dur, name) in enumerate(zip(steps["ts"], steps["dur"], steps["name"], strict=True)):
        ax.axvspan((ts - t0) / 1e3, (ts + dur - t0) / 1e3, color="0.93" if i % 2 else "0.86", zorder=0)
        ax.text((ts - t0) / 1e3, len(lanes) - 0.35, name.removeprefix("ProfilerStep"), fontsize=7, va="top")
    for row, lane in enumerate(lanes.values()):
        bars = [((ts - t0) / 1e3, dur / 1e3) for ts, dur in zip(lane["ts"], lane["dur"], strict=True)]
        face = [colours.get(short_kernel_name(name), OTHER_COLOUR) for name in lane["name"]]
        ax.broken_barh(bars, (row - 0.35, 0.7), facecolors=face, edgecolor="none", zorder=2)

    ax.set_yticks(range(len(lanes)), list(lanes))
    ax.set_ylim(-0.6, len(lanes) - 0.2)
    ax.invert_yaxis()  # the host threads on top, the GPU streams below
    ax.set_xlabel("time since first event (ms)")
    ax.set_title(title, fontsize=10)
    handles = [Rectangle((0, 0), 1, 1, color=c) for c in colours.values()]
    labels = [name if len(name) <= 40 else name[:37] + "..." for name in colours]
    ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8, frameon=False)
    return save_figure(fig, png_path)


def op_breakdown_figure(df: pd.DataFrame, title: str) -> Figure:
    """The figure of :func:`plot_op_breakdown`. The title is a figure title over the whole width, each line
    wrapped to fit it: an axes title centred over the bars (right of the long op names) ran off the right
    edge."""
    df = df.iloc[::-1]  # largest at the top
    width = 9
    lines = [w for line in title.splitlines() for w in textwrap.wrap(line, width=int(width * 11.5)) or [""]]
    fig = Figure(figsize=(width, 1.0 + 0.35 * len(df) + 0.2 * len(lines)))
    ax = fig.subplots()
    short = [short_kernel_name(name) for name in df["name"]]
    labels = [name if len(name) <= 48 else name[:45] + "..." for name in short]
    ax.barh(range(len(df)), df["share_pct"], color="tab:blue")
    ax.set_yticks(range(len(df)), labels, fontsize=8)
    for y, (share, calls) in enumerate(zip(df["share_pct"], df["calls"], strict=True)):
        ax.text(share, y, f" {share:.1f}% ({calls} calls)", va="center", fontsize=8)
    ax.set_xlim(0, max(df["share_pct"].max(), 1.0) * 1.25)
    ax.set_xlabel("share of self time (%)")
    fig.suptitle("\n".join(lines), fontsize=10, x=0.01, ha="left")
    return fig


def plot_op_breakdown(df: pd.DataFrame, png_path: str | Path, title: str) -> Path:
    """Horizontal bars of ``share_pct`` per op (a :func:`~lecture_code.profiling.top_ops` table)."""
    return save_figure(op_breakdown_figure(df, title), png_path)
