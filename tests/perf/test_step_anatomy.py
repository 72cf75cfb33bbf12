"""Step anatomy and the Kaggle-tables run: rows built from real timings and profiles; explanations built
from the numbers (made-up GPU rows, so they are checked on any machine)."""

from __future__ import annotations

import pytest

from lecture_code.data import KAGGLE_CARDINALITIES
from lecture_code.perf.kaggle_tables import DATA_TABLES, KAGGLE_TABLES, kaggle_tables, measure_table_sizes
from lecture_code.perf.step_anatomy import anatomy_row, explain, measure_step_anatomy
from lecture_code.perf.step_timing import StepTiming
from lecture_code.perf.workload import load_workload
from lecture_code.profiling.trace_analysis import step_ranges


def _gpu_row(batch, wall, busy, syncs=0.0, causes=None):
    return {
        "batch_size": batch,
        "ms_per_step": wall,
        "gpu_busy_ms": busy,
        "syncs_per_step": syncs,
        "host_wait_ms": 0.1 * syncs,
        "host_busy_ms": 0.5 * wall,
        "sync_causes": causes or {},
    }


def test_anatomy_row_estimates_idle_from_the_unprofiled_wall():
    timing = StepTiming("B=8", 10.0, 1.0, 0.1, 5, 3, (9.0, 10.0, 12.0))
    breakdown = {
        "step_ms": 14.0,
        "gpu_busy_ms": 2.5,
        "gpu_idle_fraction": 0.9,
        "kernels_per_step": 300.0,
        "launches_per_step": 290.0,
        "syncs_per_step": 0.0,
        "host_wait_ms": 0.0,
        "sync_causes": {},
    }
    row = anatomy_row(timing, breakdown)
    assert row["gpu_idle_estimate"] == pytest.approx(0.75)  # 1 - 2.5 / 10, not the profiled 0.9
    assert row["profiled_step_ms"] == 14.0 and row["samples_ms"] == [9.0, 10.0, 12.0]
    assert (
        row["host_busy_ms"] == 14.0
        and anatomy_row(timing, {**breakdown, "host_wait_ms": 4.0})["host_busy_ms"] == 10.0
    )
    assert anatomy_row(timing, {**breakdown, "gpu_busy_ms": None})["gpu_idle_estimate"] is None


def test_explain_a_host_bound_sweep_with_new_waits():
    rows = [
        _gpu_row(2048, 11.0, 1.5),
        _gpu_row(8192, 22.0, 3.0, syncs=52, causes={"aten::embedding_dense_backward": 52}),
        _gpu_row(32768, 23.0, 9.0, syncs=52, causes={"aten::embedding_dense_backward": 52}),
    ]
    text = explain(rows)
    assert text[0] == (
        "B=2048: the step takes 11.0 ms and the GPU works 1.50 ms (14% of it); "
        "the host works 5.50 ms per step (light profile) and waits in 0 CUDA calls (0.00 ms)."
    )
    assert "the GPU's work grows 3.0x but the step only 1.05x" in text[3]
    assert "host sets the pace" in text[3]
    assert text[4].startswith("From B=8192 on, the host waits for the GPU where it did not at B=2048")
    assert "52 in aten::embedding_dense_backward" in text[4]


def test_explain_a_gpu_bound_sweep_and_a_cpu_run():
    text = explain([_gpu_row(1024, 5.0, 4.5), _gpu_row(4096, 18.0, 17.5)])
    assert (
        text[-1] == "From B=1024 to B=4096 the step follows the GPU's work (3.9x the work, 3.60x the time)."
    )
    assert not any("waits for the GPU where" in t for t in text)
    flat = explain([_gpu_row(1024, 5.0, 1.0), _gpu_row(4096, 5.5, 1.1)])
    assert flat[-1] == "From B=1024 to B=4096 the GPU's work changes 1.10x and the step 1.10x."
    cpu = explain([{**_gpu_row(64, 5.0, None)}])
    assert len(cpu) == 1 and cpu[0].startswith("No GPU in this run")
    assert explain([]) == []


def test_measure_step_anatomy_on_a_cpu(tiny_data_dir, tmp_path):
    """The CPU's rows (no GPU columns), also on a GPU machine: the workloads are put on the CPU."""
    workloads = [load_workload(tiny_data_dir, "small", b, num_batches=2, device="cpu") for b in (32, 64)]
    rows = measure_step_anatomy(workloads, tmp_path, steps=1, warmup=0, repeats=2)
    assert [(r["label"], r["batch_size"]) for r in rows] == [("B=32", 32), ("B=64", 64)]
    for r in rows:
        assert len(r["samples_ms"]) == 2 and r["ms_min"] <= r["ms_per_step"] <= r["ms_max"]
        assert r["profiled_step_ms"] > 0 and r["gpu_busy_ms"] is None  # no GPU work in a CPU step
        assert r["launches_per_step"] == 0 and r["syncs_per_step"] == 0 and r["sync_causes"] == {}
        assert r["top"] and r["top"][0]["calls_per_step"] > 0  # host ops by self time on a CPU


def test_top_work_ranks_the_kernels_the_steps_launched():
    """A trace shaped like a CUDA one: 2 steps, each launching an embedding backward and a fused Adam
    kernel (full names, as CUPTI writes them); a kernel launched before the window must not be ranked."""
    import pandas as pd

    from lecture_code.perf.step_anatomy import top_work

    emb = "void at::native::(anonymous namespace)::embedding_backward_feature_kernel<float, long>(long*)"
    rows = [("cudaLaunchKernel", "cuda_runtime", -40.0, 2.0, 0), ("warmup_kernel", "kernel", -30.0, 500.0, 0)]
    for k, t in enumerate((0.0, 100.0)):
        c = 10 * (k + 1)
        rows += [
            (f"ProfilerStep#{k + 1}", "user_annotation", t, 100.0, None),
            ("cudaLaunchKernel", "cuda_runtime", t + 1, 2.0, c),
            (emb, "kernel", t + 480, 30.0, c),
            ("cudaLaunchKernel", "cuda_runtime", t + 5, 2.0, c + 1),
            (
                "void at::native::multi_tensor_apply_kernel<TensorListMetadata<4>>(int)",
                "kernel",
                t + 510,
                10.0,
                c + 1,
            ),
        ]
    events = pd.DataFrame(rows, columns=["name", "cat", "ts", "dur", "correlation"])
    top = top_work(None, events)
    assert top == [
        {"name": "embedding_backward_feature_kernel", "calls_per_step": 1.0, "share_pct": 75.0},
        {"name": "multi_tensor_apply_kernel", "calls_per_step": 1.0, "share_pct": 25.0},
    ]


def test_kaggle_tables_sizes():
    full = kaggle_tables()
    assert len(full) == 26 and sum(full) == sum(KAGGLE_CARDINALITIES) + 26  # + row 0 per table
    assert sum(full) * 16 * 4 > 2 * 2**30  # D = 16 fp32: more than 2 GiB of weights
    capped = kaggle_tables(cap=50)
    assert max(capped) == 51 and min(capped) == min(KAGGLE_CARDINALITIES) + 1


def test_measure_table_sizes_builds_both_models(tiny_workload, tmp_path):
    rows, events = measure_table_sizes(tiny_workload, tmp_path, cap=50, steps=1, warmup=0, repeats=1, top=3)
    assert [r["label"] for r in rows] == [DATA_TABLES, KAGGLE_TABLES]
    data, kaggle = rows
    assert kaggle["table_rows"] == sum(kaggle_tables(cap=50))
    assert data["table_rows"] == sum(tiny_workload.metadata.num_embeddings_per_feature)
    assert kaggle["embedding_mb"] == round(kaggle["table_rows"] * 16 * 4 / 2**20, 1)
    for r in rows:
        assert len(r["top"]) == 3 and r["top"][0]["share_pct"] >= r["top"][-1]["share_pct"]
    assert len(step_ranges(events)) == 3  # the Kaggle variant's light profile (host ranges; a GPU trace
    # also holds a GPU-side copy of each ProfilerStep# annotation)
