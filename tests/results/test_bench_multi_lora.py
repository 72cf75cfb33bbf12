"""The multi-LoRA benchmark's per-shape summary (notebook 08 displays it), on made-up rows, known answers;
and a failing one-launch path as a reason, on a tiny shape."""

from __future__ import annotations

import pytest
import torch

from benchmarks import bench_multi_lora
from kernels import runtime


def _row(shape, provider, us, host, **kw):
    return {"shape": shape, "provider": provider, "us": us, "host us": host, **kw}


ROWS = [
    _row("T=16", "ours", 12.0, 100.0, **{"% copy": 42.0, "goal": "≤ 10 µs", "met": "no"}),
    _row("T=16", "ours split", 12.0, 104.0),
    _row("T=16", "ours split atomic", 15.0, 110.0),
    _row("T=16", "torch loop", 1600.0, 1400.0),
    _row("T=16", "torch gather+bmm", 40.0, 210.0),
    _row("T=16", "ours (graph)", 13.0, 5.0),
    _row("T=16", "torch gather+bmm (graph)", 32.0, 6.0),
    _row("T=9", "ours", 20.0, 90.0, **{"% copy": 30.0, "goal": float("nan"), "met": float("nan")}),
    _row("T=9", "torch loop", 10.0, 2000.0),  # a rival faster on the device, far slower on the host
]


def test_ours_against_the_fastest_rival_with_and_without_graphs():
    first, second = bench_multi_lora.summary(ROWS)
    assert first["ours us"] == 12.0 and first["ours host us"] == 100.0
    assert first["best other"] == "torch gather+bmm"
    assert first["its us"] == 40.0 and first["its host us"] == 210.0
    assert first["its us / ours"] == pytest.approx(40 / 12)
    assert first["graph: ours us"] == 13.0 and first["graph: ours host us"] == 5.0
    assert first["graph: best other"] == "torch gather+bmm (graph)" and first["graph: its host us"] == 6.0
    assert first["graph: its us / ours"] == pytest.approx(32 / 13)
    assert (first["goal"], first["met"], first["% copy"]) == ("≤ 10 µs", "no", 42.0)
    assert first["determinism %"] == pytest.approx(100 * (12 / 15 - 1))
    assert second["best other"] == "torch loop" and second["its us / ours"] == pytest.approx(0.5)
    assert second["graph: best other"] == "not measured" and second["graph: ours us"] is None
    assert (second["goal"], second["met"], second["determinism %"]) == ("no goal", "", None)


def test_in_a_graph_ours_with_the_metadata_given_meets_the_peers_that_graph_none():
    rows = [
        *ROWS[:7],
        _row("T=16", "ours, meta given (graph)", 11.0, 4.0),
        _row("T=16", "vllm (graph)", 14.0, 4.5),
    ]
    (line,) = bench_multi_lora.summary(rows)
    assert line["graph: ours us"] == 11.0 and line["graph: ours host us"] == 4.0
    assert line["graph: best other"] == "vllm (graph)" and line["graph: its us / ours"] == pytest.approx(
        14 / 11
    )


def test_the_one_launch_path_failing_is_a_reason_and_the_others_are_timed(wrong_path):
    bench = bench_multi_lora
    wrong_path(bench, "one_launch")
    rows, skipped = bench.run_shape(5, 2, 4, (16,), 16, torch.float32, runtime.default_device(), {})
    names = {r["provider"] for r in rows}
    assert bench.ONE not in names and {"ours", "ours split", "ours fused"} <= names
    assert any(
        s.startswith(f"T=5 L=2 r=4 N=16: AssertionError: {bench.ONE}: relative error") for s in skipped
    )
