"""Profile a toy model on the CPU and check what the op table, the trace and the plots say about it.

The model is one big Linear (a ``512 x 1024 @ 1024 x 1024`` matmul, ~1 GFLOP) followed by a ReLU, so the
matmul must own most of the host time; one ``.item()`` per step is a deliberate host sync.
"""

from __future__ import annotations

import pytest
import torch

from lecture_code.profiling import step_profiler, trace_files
from lecture_code.trace_analysis import (
    gpu_idle_fraction,
    host_syncs,
    load_trace,
    short_kernel_name,
    top_kernels,
    top_ops,
)
from lecture_code.trace_plots import plot_op_breakdown, plot_timeline

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
    assert table["name"][0] in MATMUL_OPS, table
    assert table["self_us"].is_monotonic_decreasing
    assert (table["total_us"] >= table["self_us"]).all()
    assert 0 < table["share_pct"].sum() <= 100.0 + 1e-6
    assert table["calls"][0] == 2  # one matmul per active step


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
        ("void cutlass::Kernel2<cutlass_80_simt_sgemm_128x64_8x5_nt_align1>(Params)", "Kernel2"),
        ("triton_poi_fused_relu_0", "triton_poi_fused_relu_0"),
        ("aten::mm", "aten::mm"),
        ("Memcpy DtoH (Device -> Pageable)", "Memcpy DtoH (Device -> Pageable)"),
    ],
)
def test_short_kernel_name(name, short):
    assert short_kernel_name(name) == short
