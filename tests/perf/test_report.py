"""The notebook's sentences and tables say what the numbers say (made-up rows with known answers)."""

from __future__ import annotations

import pandas as pd
import pytest

from lecture_code.perf.kaggle_tables import MIN_PASSES
from lecture_code.perf.report import (
    all_features_sentences,
    copy_reference_gbps,
    csv_vs_sidecar,
    fmt_ms,
    hash_growth,
    kaggle_sentences,
    profiler_cost_sentence,
    profiler_cost_table,
    run_to_run,
    spread_table,
    stage_sentences,
    versus,
)


def _row(label, median, lo, hi, **extra):
    return {
        "label": label,
        "ms_per_step": median,
        "ms_min": lo,
        "ms_max": hi,
        "steps": 50,
        "repeats": 5,
        **extra,
    }


def test_versus_judges_a_difference_against_the_spread():
    within = versus(_row("A", 11.7, 11.0, 12.5), _row("B", 11.2, 10.9, 12.0))
    assert within.startswith("A: 11.7 ms (11.0 ms–12.5 ms) vs B: 11.2 ms (10.9 ms–12.0 ms), +4%")
    assert "within the run-to-run spread" in within
    beyond = versus(_row("A", 14.3, 14.0, 14.6), _row("B", 11.2, 10.9, 12.0))
    assert "+28%" in beyond and "larger than the spread" in beyond


def test_spread_table_and_formatting():
    table = spread_table([_row("A", 10.0, 9.0, 12.0, peak_step_mib=31.0)], extra=["peak_step_mib"])
    assert table.loc["A"].to_dict() == {
        "median ms": 10.0,
        "min ms": 9.0,
        "max ms": 12.0,
        "spread %": 30.0,
        "peak_step_mib": 31.0,
    }
    assert [fmt_ms(x) for x in (23.61, 1.234, 0.0242)] == ["23.6 ms", "1.23 ms", "24.2 µs"]


def test_run_to_run_compares_only_like_with_like():
    live, committed = _row("kept", 8.12, 8.0, 8.3), _row("kept", 11.74, 11.0, 12.9)
    text = run_to_run(live, committed, "NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3")
    assert "same settings" in text and "-31% apart" in text and "spread by 4% and 16%" in text
    assert "not comparable" in run_to_run(live, committed, "CPU (x86_64, 2 threads)", "NVIDIA H100 80GB HBM3")


def test_profiler_cost_table_and_sentence():
    unprofiled = {"ms_per_step": 11.7, "gpu_idle_estimate": 1 - 1.4 / 11.7}
    light = {"step_ms": 13.0, "gpu_busy_ms": 1.4, "gpu_idle_fraction": 1 - 1.4 / 13.0}
    heavy = {"step_ms": 19.5, "gpu_busy_ms": 1.45, "gpu_idle_fraction": 0.93}
    table = profiler_cost_table(unprofiled, light, heavy)
    assert list(table["step ms"]) == [11.7, 13.0, 19.5]
    assert list(table["GPU idle %"]) == [88.0, 89.0, 93.0]
    text = profiler_cost_sentence(unprofiled, light, heavy)
    assert text.startswith(
        "With the detailed profile a step takes 19.5 ms (1.67x the unprofiled 11.7 ms), with"
    )
    assert "with the light one 13.0 ms (1.11x)." in text
    assert "93% under the detailed profile, 89% under the light one, and an estimated 88% without" in text
    cpu = profiler_cost_sentence(
        {"ms_per_step": 40.0, "gpu_idle_estimate": None},
        {"step_ms": 44.0, "gpu_busy_ms": None},
        {"step_ms": 60.0, "gpu_busy_ms": None},
    )
    assert "No GPU here" in cpu


def test_stage_sentences_compare_neighbours_and_the_two_batched_lookups():
    rows = [
        _row("index hash, vocabularies on the device", 16.4, 16.0, 17.0),
        _row("vocabulary lookup (searchsorted)", 9.96, 9.5, 10.5),
        _row("modulus hash, one per feature", 13.3, 13.0, 13.9),
        _row("modulus hash, all features at once", 8.0, 7.8, 8.3),
    ]
    text = stage_sentences(rows)
    assert len(text) == 4
    assert text[1].startswith("modulus hash, one per feature: 13.3 ms") and "+34%" in text[1]
    assert text[3].startswith("modulus hash, all features at once: 8.00 ms") and "-20%" in text[3]


def test_hash_growth_and_csv_comparison(tmp_path):
    rows = [
        {"hash": "index (naive)", "vocabulary": v, "batch": 4096, "ms": 0.025 * v / 1000}
        for v in (1000, 1_000_000)
    ] + [{"hash": "modulus", "vocabulary": v, "batch": 4096, "ms": 0.015} for v in (1000, 1_000_000)]
    growth = hash_growth(rows)
    assert growth.loc["index (naive)", "x per 10x V"] == pytest.approx(10.0)
    assert growth.loc["modulus", "x per 10x V"] == pytest.approx(1.0)
    csv = tmp_path / "hashing.csv"
    pd.DataFrame([{**r, "ms": r["ms"] / 2, "device": "x"} for r in rows]).to_csv(csv, index=False)
    both = csv_vs_sidecar(csv, rows)
    assert list(both["sidecar / CSV"]) == [2.0] * 4


def test_all_features_sentences():
    rows = [
        {
            "hash": "modulus, one module per feature",
            "aten_ops": 212,
            "ms": 0.25,
            "host_us": 900.0,
            "launches": 104,
        },
        {"hash": "modulus, all features at once", "aten_ops": 7, "ms": 0.02, "host_us": 40.0, "launches": 4},
        {"hash": "vocabulary, one module per feature", "aten_ops": 290, "ms": 0.4, "host_us": None},
        {"hash": "vocabulary, all features at once", "aten_ops": 23, "ms": 0.05, "host_us": None},
    ]
    modulus, vocabulary = all_features_sentences(rows)
    assert modulus == (
        "modulus: one module per feature runs 212 ATen ops per call, all features at once 7 (30x fewer); "
        "device time per call 0.25 ms → 20.0 µs; kernel launches per call 104 → 4; "
        "host time per call 900 → 40 µs."
    )
    assert "13x fewer" in vocabulary and "host time" not in vocabulary


def test_kaggle_sentences():
    top = [{"name": "multi_tensor_apply_kernel", "calls": 9, "share_pct": 70.0}]
    rows = [
        {
            "label": "the data's tables",
            "embedding_mb": 29.0,
            "gpu_busy_ms": 1.4,
            "ms_per_step": 11.0,
            "top": top,
        },
        {
            "label": "Kaggle tables",
            "embedding_mb": 2060.0,
            "gpu_busy_ms": 30.0,
            "ms_per_step": 32.0,
            "top": top,
        },
    ]
    text = kaggle_sentences(rows, copy_gbps=3000.0, passes=MIN_PASSES)
    assert text[0].startswith(
        "the data's tables: 29 MiB of embeddings; the GPU works 1.40 ms of a 11.0 ms step (13%)"
    )
    assert "Top GPU events: multi_tensor_apply_kernel (70%)" in text[1]
    gb = 8 * 2060 * 2**20 / 1e9
    assert f"= {gb:.1f} GB per step: at least {1e3 * gb / 3000:.2f} ms" in text[2]
    assert text[3].startswith("With the Kaggle tables the GPU is busy 94% of the step: not launch-bound.")
    idle = kaggle_sentences([rows[0], {**rows[1], "gpu_busy_ms": 8.0}], None, MIN_PASSES)
    assert idle[-1] == "Even with the Kaggle tables the GPU idles 75% of the step."


def test_copy_reference_reads_the_committed_pointwise_csv():
    found = copy_reference_gbps()
    assert found is not None  # benchmarks/results/pointwise is committed
    gbps, device, path = found
    assert 100 < gbps < 10_000 and device
    assert path.parent.name == "pointwise" and path.suffix == ".csv" and path.is_file()
