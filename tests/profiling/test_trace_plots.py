"""The timeline's lanes: every host thread that ran ops (the training loop's first), then the GPU streams.

On a GPU the autograd engine runs ``backward()`` on a thread of its own; a timeline that kept one host
thread showed only the backward. These tests build that situation from made-up events (no GPU here) and
check the real CPU case, where forward and backward share the calling thread.
"""

from __future__ import annotations

import pandas as pd
import torch

from lecture_code.profiling.profiler import step_profiler, trace_files
from lecture_code.profiling.trace_analysis import load_trace
from lecture_code.profiling.trace_plots import host_lanes, main_thread, plot_timeline, timeline_lanes

MAIN, AUTOGRAD = 11, 22


def _gpu_training_trace() -> pd.DataFrame:
    """One step: forward and optimizer on the loop's thread, backward (more op time) on the autograd one."""
    rows = [
        ("ProfilerStep#1", "user_annotation", 0.0, 100.0, MAIN, None),
        ("aten::linear", "cpu_op", 1.0, 9.0, MAIN, None),
        ("aten::addmm", "cpu_op", 2.0, 7.0, MAIN, None),  # nested in aten::linear: not drawn
        ("autograd::engine::evaluate_function: AddmmBackward0", "cpu_op", 12.0, 60.0, AUTOGRAD, None),
        ("aten::mm", "cpu_op", 13.0, 50.0, AUTOGRAD, None),
        ("aten::_foreach_mul_", "cpu_op", 80.0, 15.0, MAIN, None),  # the optimizer
        ("gemm", "kernel", 5.0, 3.0, 0, 7),
        ("gemm_backward", "kernel", 20.0, 10.0, 0, 7),
    ]
    df = pd.DataFrame(rows, columns=["name", "cat", "ts", "dur", "tid", "stream"])
    df["pid"] = [1, 1, 1, 1, 1, 1, 0, 0]
    return df


def test_host_lanes_keep_the_forward_and_the_backward_thread():
    events = _gpu_training_trace()
    assert main_thread(events) == MAIN  # the ProfilerStep thread, though the autograd one has more op time
    lanes = timeline_lanes(events)
    assert list(lanes) == [
        f"host: training loop, thread {MAIN}",
        f"host: autograd (backward), thread {AUTOGRAD}",
        "GPU 0 stream 7",
    ]
    loop, backward, gpu = lanes.values()
    assert list(loop["name"]) == ["aten::linear", "aten::_foreach_mul_"]  # the forward is drawn
    assert list(backward["name"]) == ["autograd::engine::evaluate_function: AddmmBackward0"]
    assert list(gpu["name"]) == ["gemm", "gemm_backward"]


def test_cpu_training_step_draws_forward_and_backward(tmp_path):
    model = torch.nn.Sequential(torch.nn.Linear(128, 128), torch.nn.ReLU(), torch.nn.Linear(128, 1))
    x = torch.randn(32, 128)
    with step_profiler(tmp_path, wait=0, warmup=1, active=2, detail=False) as prof:
        for _ in range(3):
            model(x).sum().backward()
            prof.step()
    events = load_trace(trace_files(tmp_path)[-1])
    lanes = host_lanes(events)
    drawn = pd.concat(lanes.values())["name"]
    assert list(lanes)[0].startswith("host: training loop")
    assert drawn.str.contains("linear|addmm").any()  # the forward
    assert drawn.str.startswith("autograd::engine::evaluate_function").any()  # the backward
    png = plot_timeline(events, tmp_path / "timeline.png", "forward + backward")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_op_breakdown_title_fits_the_figure():
    """The long two-line title (the GPU run's) used to run off the right edge."""
    import pandas as pd
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from lecture_code.profiling.trace_plots import op_breakdown_figure

    df = pd.DataFrame({"name": ["a", "b"], "calls": [3, 4], "share_pct": [60.0, 40.0]})
    title = (
        "DLRM training step: GPU time by kernel; the GPU works 17.4 ms per 18.1 ms step, plus more words\n"
        "NVIDIA H100 80GB HBM3, torch 2.9.0+cu128, CUDA 12.8, DLRM preset kaggle, batch 2048, 20 steps x 3"
    )
    fig = op_breakdown_figure(df, title)
    canvas = FigureCanvasAgg(fig)
    fig.tight_layout()
    canvas.draw()
    box = fig._suptitle.get_window_extent(canvas.get_renderer())
    assert box.x0 >= 0 and box.x1 <= fig.bbox.x1 and box.y1 <= fig.bbox.y1


def test_legend_colours_are_distinct_and_not_the_grey_of_other_ops():
    from matplotlib.colors import to_rgba

    from lecture_code.profiling.trace_plots import MAX_LEGEND, OTHER_COLOUR, legend_colours

    names = [f"op{i}" for i in range(12)]
    colours = legend_colours(names)
    assert list(colours) == names[:MAX_LEGEND]
    rgba = [to_rgba(c) for c in colours.values()]
    assert len(set(rgba)) == MAX_LEGEND
    for r, g, b, _ in rgba:  # tab10's 8th colour (index 7) is grey: multi_tensor_apply_kernel had it
        assert max(r, g, b) - min(r, g, b) > 0.1, (r, g, b)
    assert to_rgba(OTHER_COLOUR) not in rgba
