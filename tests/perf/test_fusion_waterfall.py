"""The waterfall of notebook 05: row order and factors, the chart, and sentences that follow the numbers."""

import math

import pytest

from lecture_code.perf.dlrm_step import IMPLEMENTATIONS, StepResult
from lecture_code.perf.fusion_waterfall import (
    BUILDS_ON,
    GOAL_MS,
    STEPS,
    lever_table,
    waterfall_chart,
    waterfall_rows,
    waterfall_sentences,
)


def _result(name, ms, ids="uniform", spread=0.05, gpu_ms=None, host_ms=1.0, error=""):
    return StepResult(
        name, ids, ms, ms * (1 - spread), ms * (1 + spread), gpu_ms, host_ms, 2048e3 / ms, 10.0, 20.0, error
    )


def test_steps_name_every_implementation_once():
    assert sorted(STEPS) == sorted(IMPLEMENTATIONS) == sorted(BUILDS_ON)
    order = list(STEPS)
    for name, base in BUILDS_ON.items():  # each builds on an earlier step (the first on none)
        assert base is None if name == order[0] else order.index(base) < order.index(name), name


def test_rows_follow_the_lecture_order_with_their_factors():
    # given in reverse, one failed, one of the other id distribution, one not finite
    results = [
        _result("fused", 1.0),
        _result("packed + index_add_", 2.0),
        _result("eager, sparse grads", 4.0, ids="zipf"),
        _result("eager, dense grads", 8.0),
        _result("fused, CUDA graph", math.nan),
        _result("compile, dense grads", 5.0, error="RuntimeError: boom"),
    ]
    rows = waterfall_rows(results, "uniform")
    assert [r["implementation"] for r in rows] == ["eager, dense grads", "packed + index_add_", "fused"]
    assert [r["vs_previous"] for r in rows] == pytest.approx([1.0, 4.0, 2.0])
    # packed builds on 'eager, sparse grads' (not measured here), fused on packed
    assert [r["builds_on"] for r in rows] == [None, "eager, sparse grads", "packed + index_add_"]
    assert math.isnan(rows[0]["vs_base"]) and math.isnan(rows[1]["vs_base"]) and rows[2]["vs_base"] == 2.0
    assert [r["vs_first"] for r in rows] == pytest.approx([1.0, 4.0, 8.0])
    assert rows[1]["change"] == STEPS["packed + index_add_"]
    assert [r["implementation"] for r in waterfall_rows(results, "zipf")] == ["eager, sparse grads"]


def test_sentences_say_what_the_numbers_say():
    rows = waterfall_rows(
        [
            _result("eager, dense grads", 6.0),
            _result("eager, sparse grads", 4.0),
            _result("packed + index_add_", 3.0),
            _result("packed + index_add_, CUDA graph", 0.5),
            _result("fused", 3.5),  # our kernels without a graph: slower than torch ops without one
            _result("fused, CUDA graph", 0.30, gpu_ms=0.28, host_ms=0.02),
        ]
    )
    text = " ".join(waterfall_sentences(rows, on_gpu=True, kaggle_batch_2048=True))
    assert "×20.00" in text  # 6.0 / 0.30 from first to last
    # judged against the step each builds on: 'fused' against 'packed + index_add_', not the graph row above
    assert "largest step beyond the spread of the repeats: 'fused, CUDA graph', ×11.67 over 'fused'" in text
    assert "'fused' is slower than 'packed + index_add_', the step it builds on (×0.86)" in text
    assert (
        "the CUDA graph ×6.00 for torch ops and ×11.67 for our kernels; our kernels over torch ops ×0.86 "
        "without a graph and ×1.67 in one" in text
    )
    assert "the GPU's work sets the pace" in text
    assert f"RESULTS.md's goal here is ≤ {GOAL_MS} ms per step." in text
    assert "The fastest step at fp32, 'fused, CUDA graph' (0.3 ms), meets it" in text
    assert "with TF32" not in text  # no TF32 row measured: no TF32 verdict
    table = lever_table(rows)
    assert [(r["ops"], r["no graph ms"], r["CUDA graph ms"]) for r in table] == [
        ("torch ops", 3.0, 0.5),
        ("our kernels", 3.5, 0.30),
    ]
    assert [r["graph ×"] for r in table] == pytest.approx([6.0, 3.5 / 0.3])
    partial = lever_table(rows[:3])  # no graph rows: the graph cells say so, and no lever sentence
    assert partial[0]["CUDA graph ms"] is None and partial[0]["graph ×"] is None
    assert "levers" not in " ".join(waterfall_sentences(rows[:3], on_gpu=True, kaggle_batch_2048=True))

    tf32 = waterfall_rows(
        [
            _result("fused + compiled MLPs, CUDA graph", 0.49),
            _result("fused + compiled MLPs, atomic SGD, TF32, CUDA graph", 0.33),
        ]
    )
    text = " ".join(waterfall_sentences(tf32, on_gpu=True, kaggle_batch_2048=True))
    # each precision gets its own verdict: the TF32 row never stands in for the fp32 one
    assert "at fp32, 'fused + compiled MLPs, CUDA graph' (0.49 ms), misses it" in text
    assert "with TF32, 'fused + compiled MLPs, atomic SGD, TF32, CUDA graph' (0.33 ms), meets it" in text
    bf16 = "fused + MLP SGD in backward, atomic SGD, bf16 MLPs, CUDA graph"
    text = " ".join(
        waterfall_sentences(
            waterfall_rows([_result("fused + compiled MLPs, CUDA graph", 0.49), _result(bf16, 0.2)]),
            on_gpu=True,
            kaggle_batch_2048=True,
        )
    )  # nor does a bf16 row: the fastest at fp32 is the fp32 one
    assert "at fp32, 'fused + compiled MLPs, CUDA graph' (0.49 ms), misses it" in text
    assert f"with bf16 MLPs, {bf16!r} (0.2 ms), meets it" in text

    slow = waterfall_rows(
        [_result("eager, dense grads", 1.0, gpu_ms=0.5, host_ms=1.5), _result("eager, sparse grads", 2.0)]
    )
    text = " ".join(waterfall_sentences(slow, on_gpu=True, kaggle_batch_2048=True))
    assert "'eager, sparse grads' is slower than 'eager, dense grads', the step it builds on (×0.50)" in text
    assert "the host issuing it sets the pace" in text
    assert "at fp32, 'eager, dense grads' (1 ms), misses it" in text  # the fastest is eager, 1.0 ms

    cpu = " ".join(waterfall_sentences(slow, on_gpu=False, kaggle_batch_2048=False))
    assert "CPU timings" in cpu and "goal" not in cpu
    assert waterfall_sentences([], on_gpu=True, kaggle_batch_2048=True) == ["No implementation was measured."]


def test_chart_is_written(tmp_path):
    rows = waterfall_rows([_result("eager, dense grads", 6.0), _result("fused", 0.5)])
    png = waterfall_chart(rows, tmp_path / "w.png", "title", "subtitle")
    assert png.exists() and png.stat().st_size > 5_000


def test_gpu_idle_is_the_unprofiled_share_and_rows_carry_the_host_columns():
    from lecture_code.perf.dlrm_step import StepMeasurement
    from lecture_code.perf.fusion_waterfall import gpu_idle

    assert gpu_idle(0.5, 2.0) == pytest.approx(0.75)
    assert gpu_idle(3.0, 2.0) == 0.0  # the GPU's work fills the step
    assert gpu_idle(None, 2.0) is None and gpu_idle(math.nan, 2.0) is None
    old = _result("eager, dense grads", 2.0, gpu_ms=0.5)  # a row of a CSV without the host columns
    new = StepMeasurement(
        "fused", "uniform", 1.0, 0.95, 1.05, 0.9, 0.4, 2e6, 10.0, 20.0, syncs_per_step=0.0, host_clean=False
    )
    (a, b) = waterfall_rows([old, new])
    assert (
        a["gpu_idle"] == pytest.approx(0.75) and math.isnan(a["syncs_per_step"]) and a["host_clean"] is None
    )
    assert b["gpu_idle"] == pytest.approx(0.1) and b["syncs_per_step"] == 0.0 and b["host_clean"] is False
    said = " ".join(waterfall_sentences([a, b], on_gpu=True, kaggle_batch_2048=False))
    assert "may include waits for the GPU (an upper bound)" in said and "sets the pace" not in said


def test_every_bar_label_ends_inside_the_axes():
    # the longest labels sit on the longest bars: the axis widens until each fits (they were cut at the edge)
    from matplotlib.figure import Figure

    from lecture_code.perf.fusion_waterfall import _axis_end

    fig = Figure(figsize=(10, 4))
    ax = fig.subplots()
    ax.barh([0, 1], [5.0, 0.3])
    ax.set_yticks([0, 1], ["a long implementation name, CUDA graph", "short"])
    labels = [
        ax.text(x, y, " 5 ms  (×0.91 vs 'eager, dense grads, a long name')") for x, y in ((5.0, 0), (0.3, 1))
    ]
    for label in labels:
        label.set_in_layout(False)
    ax.set_xlim(0, _axis_end(fig, ax, labels, 5.0 * 1.45))
    fig.tight_layout()
    fig.draw_without_rendering()
    assert all(t.get_window_extent().x1 <= ax.get_window_extent().x1 for t in labels)
