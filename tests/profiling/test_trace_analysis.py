"""Profile a toy model on the CPU and check what the op table, the trace and the plots say about it.

The model is one big Linear (a ``512 x 1024 @ 1024 x 1024`` matmul, ~1 GFLOP) followed by a ReLU, so the
matmul must own most of the host time; one ``.item()`` per step is a deliberate host sync.
"""

from __future__ import annotations

import pytest
import torch

from lecture_code.profiling.profiler import step_profiler, trace_files
from lecture_code.profiling.trace_analysis import (
    gpu_idle_fraction,
    host_syncs,
    load_trace,
    short_kernel_name,
    top_kernels,
    top_ops,
)
from lecture_code.profiling.trace_plots import plot_op_breakdown, plot_timeline

MATMUL_OPS = {"aten::addmm", "aten::mm", "aten::linear", "aten::matmul"}


@pytest.fixture(scope="module")
def profiled(tmp_path_factory):
    torch.manual_seed(0)
    run_dir = tmp_path_factory.mktemp("profile")
    model = torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.ReLU())
    x = torch.randn(512, 1024)
    losses = []
    with torch.no_grad(), step_profiler(run_dir, wait=1, warmup=1, active=2) as prof:
        for _ in range(4):
            losses.append(model(x).mean().item())  # .item(): the deliberate sync
            prof.step()
    return prof, run_dir, losses


@pytest.fixture(scope="module")
def events(profiled):
    _, run_dir, _ = profiled
    traces = trace_files(run_dir)
    assert len(traces) == 1
    return load_trace(traces[0])


def test_top_ops_puts_the_matmul_first(profiled):
    prof, _, _ = profiled
    table = top_ops(prof, n=5)
    assert list(table.columns) == ["name", "calls", "self_us", "total_us", "share_pct"]
    assert len(table) == 5
    assert table["self_us"].is_monotonic_decreasing
    assert (table["total_us"] >= table["self_us"]).all()
    assert 0 < table["share_pct"].sum() <= 100.0 + 1e-6
    # On a GPU machine the profiler also records CUDA runtime calls: here only its own (a first
    # cudaDeviceSynchronize of ~0.7 s on an H100, CUPTI's buffers), since this model has no GPU work.
    aten = top_ops(prof, n=100).query("name.str.startswith('aten::')").reset_index(drop=True)
    assert aten["name"][0] in MATMUL_OPS, table
    assert aten["calls"][0] == 2  # one matmul per active step


def test_top_ops_on_device_time_is_zero_without_a_gpu(profiled):
    prof, _, _ = profiled
    if torch.cuda.is_available():
        pytest.skip("this run has a GPU")
    table = top_ops(prof, by="self_device_time_total")
    assert (table["self_us"] == 0).all() and (table["share_pct"] == 0).all()
    with pytest.raises(ValueError):
        top_ops(prof, by="cpu_time")


def test_load_trace_gives_complete_events(events):
    assert {"name", "cat", "ts", "dur", "pid", "tid", "stream"} <= set(events.columns)
    ops = events[events["cat"] == "cpu_op"]
    assert len(ops) > 0
    assert (ops["dur"] > 0).all()
    assert events["ts"].is_monotonic_increasing
    assert ops["name"].isin(MATMUL_OPS).any()
    assert events["name"].str.startswith("ProfilerStep#").sum() == 2


def test_host_syncs_finds_no_wait_for_item_on_a_cpu_tensor(events):
    assert events["name"].eq("aten::item").sum() == 2  # the toy's loss lives on the CPU
    syncs = host_syncs(events)
    assert "aten::item" not in syncs.index.get_level_values("caused_by")


@pytest.mark.gpu
def test_host_syncs_finds_item_on_a_cuda_tensor(tmp_path):
    x = torch.randn(512, 512, device="cuda")
    with step_profiler(tmp_path, wait=0, warmup=1, active=2) as prof:
        for _ in range(3):
            (x @ x).relu().sum().item()
            prof.step()
    syncs = host_syncs(load_trace(trace_files(tmp_path)[-1]))
    item = syncs.xs("aten::item", level="caused_by")
    assert item["calls"].max() == 2, syncs  # one wait per profiled step
    assert (item["total_us"] > 0).all()


def test_gpu_idle_fraction_is_none_without_gpu_events(events):
    if torch.cuda.is_available():
        pytest.skip("this run has a GPU")
    assert gpu_idle_fraction(events) is None


def test_gpu_idle_fraction_on_made_up_kernels(events):
    """Two overlapping kernels on two streams cover [0, 30) of a [0, 100) step: 70 % idle."""
    import pandas as pd

    made_up = pd.DataFrame(
        {
            "name": ["ProfilerStep#1", "k1", "k2"],
            "cat": ["user_annotation", "kernel", "kernel"],
            "ts": [0.0, 0.0, 10.0],
            "dur": [100.0, 20.0, 20.0],
        }
    )
    assert gpu_idle_fraction(made_up) == pytest.approx(0.7)


def test_plots_write_pngs(profiled, events, tmp_path):
    prof, _, _ = profiled
    timeline = plot_timeline(events, tmp_path / "timeline.png", "Linear + ReLU on CPU")
    breakdown = plot_op_breakdown(top_ops(prof), tmp_path / "ops.png", "Linear + ReLU: self CPU time")
    for png in (timeline, breakdown):
        assert png.exists() and png.stat().st_size > 1000
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_host_syncs_on_made_up_gpu_events():
    """A DtoH copy counts (matched through ``correlation``) under the op around it; an HtoD copy and a
    kernel launch do not; a bare stream sync has no op around it."""
    import pandas as pd

    made_up = pd.DataFrame(
        [
            ("aten::item", "cpu_op", 0.0, 8.0, 1, None),
            ("aten::_local_scalar_dense", "cpu_op", 0.5, 7.0, 1, None),
            ("cudaMemcpyAsync", "cuda_runtime", 1.0, 5.0, 1, 7),
            ("Memcpy DtoH (Device -> Pageable)", "gpu_memcpy", 2.0, 2.0, 0, 7),
            ("aten::to", "cpu_op", 9.0, 8.0, 2, None),  # another thread: does not contain the sync below
            ("cudaMemcpyAsync", "cuda_runtime", 10.0, 5.0, 1, 8),
            ("Memcpy HtoD (Pageable -> Device)", "gpu_memcpy", 11.0, 2.0, 0, 8),
            ("cudaLaunchKernel", "cuda_runtime", 20.0, 3.0, 1, 9),
            ("cudaStreamSynchronize", "cuda_runtime", 30.0, 4.0, 1, None),
        ],
        columns=["name", "cat", "ts", "dur", "tid", "correlation"],
    )
    syncs = host_syncs(made_up)
    assert syncs.to_dict("index") == {
        ("aten::item", "cudaMemcpyAsync"): {"calls": 1, "total_us": 5.0},
        ("(no op)", "cudaStreamSynchronize"): {"calls": 1, "total_us": 4.0},
    }


def test_top_kernels_counts_gpu_time_once_per_kernel_name():
    import pandas as pd

    made_up = pd.DataFrame(
        [
            ("aten::mm", "cpu_op", 0.0, 50.0),  # an op, not GPU work: ignored
            ("gemm_kernel", "kernel", 1.0, 30.0),
            ("gemm_kernel", "kernel", 40.0, 30.0),
            ("Memcpy DtoH (Device -> Pageable)", "gpu_memcpy", 80.0, 20.0),
            ("relu_kernel", "kernel", 100.0, 20.0),
        ],
        columns=["name", "cat", "ts", "dur"],
    )
    table = top_kernels(made_up, n=2)
    assert table.to_dict("list") == {
        "name": ["gemm_kernel", "Memcpy DtoH (Device -> Pageable)"],
        "calls": [2, 1],
        "self_us": [60.0, 20.0],
        "total_us": [60.0, 20.0],
        "share_pct": [60.0, 20.0],
    }


@pytest.mark.parametrize(
    ("name", "short"),
    [
        (
            "void at::native::(anonymous namespace)::embedding_backward_feature_kernel<float, float, long>"
            "(long const*, float const*, float*, int, long, int)",
            "embedding_backward_feature_kernel",
        ),
        (
            "void cutlass::Kernel2<cutlass_80_simt_sgemm_128x64_8x5_nt_align1>"
            "(cutlass_80_simt_sgemm_128x64_8x5_nt_align1::Params)",
            "cutlass_80_simt_sgemm_128x64_8x5_nt_align1",
        ),
        ("void cutlass::device_kernel<cutlass3x_sm90_gemm<float>>(Params)", "cutlass3x_sm90_gemm"),
        (
            "void at::native::vectorized_elementwise_kernel<4, Kernel2<int>>(int)",
            "vectorized_elementwise_kernel",
        ),
        ("triton_poi_fused_relu_0", "triton_poi_fused_relu_0"),
        ("aten::mm", "aten::mm"),
        ("Memcpy DtoH (Device -> Pageable)", "Memcpy DtoH (Device -> Pageable)"),
    ],
)
def test_short_kernel_name(name, short):
    assert short_kernel_name(name) == short


def test_step_breakdown_of_the_cpu_profile(events):
    from lecture_code.profiling.trace_analysis import step_breakdown

    b = step_breakdown(events)
    steps = events[events["name"].str.startswith("ProfilerStep#")]
    assert b["steps"] == 2 and b["step_ms"] == pytest.approx(steps["dur"].mean() / 1e3)
    if not torch.cuda.is_available():
        assert b["gpu_busy_ms"] is None and b["gpu_idle_fraction"] is None
        assert b["kernels_per_step"] == b["launches_per_step"] == b["syncs_per_step"] == 0
        assert b["host_wait_ms"] == 0 and b["sync_causes"] == {}
    with pytest.raises(ValueError, match="no ProfilerStep"):
        step_breakdown(events[~events["name"].str.startswith("ProfilerStep#")])


def test_step_breakdown_on_made_up_gpu_events():
    """Two 100 µs steps; 3 launches, 3 kernels (one on a second stream, overlapping); one .item() wait in
    step 1 (a DtoH copy + a stream sync); outside the steps a launch and a sync that must not count."""
    import pandas as pd

    from lecture_code.profiling.trace_analysis import step_breakdown

    made_up = pd.DataFrame(
        [
            ("cudaLaunchKernel", "cuda_runtime", -50.0, 5.0, 1, 1),  # before the first step
            ("ProfilerStep#1", "user_annotation", 0.0, 100.0, 1, None),
            ("cudaLaunchKernel", "cuda_runtime", 5.0, 5.0, 1, 2),
            ("k1", "kernel", 10.0, 30.0, 0, 2),
            ("cudaLaunchKernel", "cuda_runtime", 12.0, 5.0, 1, 3),
            ("k2", "kernel", 20.0, 30.0, 0, 3),  # overlaps k1 on another stream: [10, 50) busy
            ("aten::item", "cpu_op", 60.0, 30.0, 1, None),
            ("cudaMemcpyAsync", "cuda_runtime", 61.0, 10.0, 1, 4),
            ("Memcpy DtoH (Device -> Pageable)", "gpu_memcpy", 70.0, 2.0, 0, 4),
            ("cudaStreamSynchronize", "cuda_runtime", 72.0, 10.0, 1, None),
            ("ProfilerStep#2", "user_annotation", 100.0, 100.0, 1, None),
            ("cudaLaunchKernel", "cuda_runtime", 105.0, 5.0, 1, 5),
            ("k3", "kernel", 150.0, 18.0, 0, 5),
            ("cudaDeviceSynchronize", "cuda_runtime", 250.0, 10.0, 1, None),  # after the last step
        ],
        columns=["name", "cat", "ts", "dur", "tid", "correlation"],
    )
    b = step_breakdown(made_up)
    assert b["steps"] == 2 and b["step_ms"] == pytest.approx(0.1)
    assert b["gpu_busy_ms"] == pytest.approx((40 + 2 + 18) / 2 / 1e3)  # union of GPU work, per step
    # span: from k1's start (10) to the window's end (200; the GPU finished first)
    assert b["gpu_span_ms"] == pytest.approx(190 / 2 / 1e3)
    assert b["gpu_idle_fraction"] == pytest.approx(1 - 60 / 190)
    assert b["kernels_per_step"] == 2.0  # k1, k2, the copy, k3: 4 GPU events in 2 steps
    assert b["launches_per_step"] == 1.5  # 3 launches inside the steps
    assert b["syncs_per_step"] == 1.0 and b["host_wait_ms"] == pytest.approx(20 / 2 / 1e3)
    assert b["sync_causes"] == {"aten::item": 1.0}


def test_light_profile_records_no_stacks(tmp_path):
    """``detail=False`` drops shapes, memory and stacks: no Python frames in the trace, ops still there."""
    model = torch.nn.Linear(64, 64)
    x = torch.randn(8, 64)
    traces = {}
    for detail in (True, False):
        run_dir = tmp_path / str(detail)
        with step_profiler(run_dir, wait=0, warmup=1, active=1, detail=detail) as prof:
            for _ in range(2):
                model(x).sum().backward()
                prof.step()
        traces[detail] = load_trace(trace_files(run_dir)[-1])
    assert (traces[True]["cat"] == "python_function").any()
    assert not (traces[False]["cat"] == "python_function").any()
    assert traces[False]["name"].isin(MATMUL_OPS).any()


def test_range_share_counts_nested_ranges_once():
    import pandas as pd

    from lecture_code.profiling.trace_analysis import range_share

    made_up = pd.DataFrame(
        [
            ("ProfilerStep#1", "user_annotation", 0.0, 100.0),
            ("Optimizer.step#Adam.step", "user_annotation", 60.0, 30.0),
            ("Optimizer.step#Adam.step", "user_annotation", 70.0, 10.0),  # nested: counted once
            ("ProfilerStep#2", "user_annotation", 100.0, 100.0),
            ("Optimizer.step#Adam.step", "user_annotation", 150.0, 40.0),
            ("Optimizer.zero_grad#Adam.zero_grad", "user_annotation", 195.0, 5.0),
        ],
        columns=["name", "cat", "ts", "dur"],
    )
    assert range_share(made_up, "Optimizer.step#") == pytest.approx(70 / 200)
    assert range_share(made_up, "Optimizer.") == pytest.approx(75 / 200)


def _trace_dicts_gpu_behind_host():
    """Chrome-trace events of 2 host steps of 100 µs whose kernels run *after* the host's ranges: the shape
    of a bandwidth-bound step (the Kaggle tables). A kernel queued before the window runs [0, 150) and must
    not count; step 1's kernel runs [150, 330), step 2's (launched with cuLaunchKernel, a driver call)
    [330, 510), plus a memset queued in step 2 at [510, 520)."""

    def x(name, cat, ts, dur, pid, tid, **args):
        return {
            "ph": "X",
            "name": name,
            "cat": cat,
            "ts": ts,
            "dur": dur,
            "pid": pid,
            "tid": tid,
            "args": args,
        }

    return [
        x("cudaLaunchKernel", "cuda_runtime", -60, 5, 1, 1, correlation=1),
        x("old_kernel", "kernel", 0, 150, 0, 7, stream=7, correlation=1),
        x("ProfilerStep#1", "user_annotation", 0, 100, 1, 1),
        x("cudaLaunchKernel", "cuda_runtime", 10, 5, 1, 1, correlation=2),
        x("k_step1", "kernel", 150, 180, 0, 7, stream=7, correlation=2),
        x("ProfilerStep#2", "user_annotation", 100, 100, 1, 1),
        x("cuLaunchKernel", "cuda_driver", 110, 5, 1, 1, correlation=3),
        x("k_step2", "kernel", 330, 180, 0, 7, stream=7, correlation=3),
        x("cudaMemsetAsync", "cuda_runtime", 120, 5, 1, 1, correlation=4),
        x("Memset (Device)", "gpu_memset", 510, 10, 0, 7, stream=7, correlation=4),
        {"ph": "s", "name": "ac2g", "cat": "ac2g", "ts": 10, "id": 2, "pid": 1, "tid": 1},  # flow: ignored
        x("cudaLaunchKernel", "cuda_runtime", 250, 5, 1, 1, correlation=5),  # after the window
        x("k_later", "kernel", 520, 50, 0, 7, stream=7, correlation=5),
    ]


def test_step_breakdown_counts_kernels_that_run_after_the_host_step(tmp_path):
    """The GPU runs behind the host: every kernel the steps launched counts at its full length (the old
    window-clipped count gave 50 µs busy of 200, 75 % idle); work queued before or after the window
    does not."""
    import json

    from lecture_code.profiling.trace_analysis import step_breakdown, window_gpu_work

    path = tmp_path / "behind.pt.trace.json"
    path.write_text(json.dumps({"traceEvents": _trace_dicts_gpu_behind_host()}))
    events = load_trace(path)
    assert sorted(window_gpu_work(events)["name"]) == ["Memset (Device)", "k_step1", "k_step2"]
    b = step_breakdown(events)
    assert b["step_ms"] == pytest.approx(0.1)
    assert b["gpu_busy_ms"] == pytest.approx((180 + 180 + 10) / 2 / 1e3)  # > the host's 0.1 ms step
    assert b["gpu_span_ms"] == pytest.approx((520 - 150) / 2 / 1e3)  # first kernel's start to last end
    assert b["gpu_idle_fraction"] == pytest.approx(0.0)  # the GPU never waits: GPU-bound
    assert gpu_idle_fraction(events) == b["gpu_idle_fraction"]
    assert b["kernels_per_step"] == 1.5
    assert b["launches_per_step"] == 1.0  # cudaLaunchKernel + cuLaunchKernel (the memset is no launch)


def test_gpu_idle_fraction_when_the_gpu_waits_for_the_host():
    """Host-bound: 20 µs kernels launched 100 µs apart; the GPU idles 80 % of the time it has this work."""
    import pandas as pd

    rows = [
        ("ProfilerStep#1", "user_annotation", 0.0, 100.0, None),
        ("ProfilerStep#2", "user_annotation", 100.0, 100.0, None),
    ]
    for i, t in enumerate((0.0, 100.0)):
        rows += [("cudaLaunchKernel", "cuda_runtime", t + 2, 3.0, i), (f"k{i}", "kernel", t + 6, 20.0, i)]
    made_up = pd.DataFrame(rows, columns=["name", "cat", "ts", "dur", "correlation"])
    assert gpu_idle_fraction(made_up) == pytest.approx(1 - 40 / (200 - 6))
