"""The decode sweep of add_multi_lora's configs (benchmarks/sweep_multi_lora_decode.py) on CPU, tiny sizes:
every candidate checked against the float64 reference before it is timed; a wrong one is a reason."""

from __future__ import annotations

import torch

from benchmarks import sweep_multi_lora_decode as sweep
from kernels import runtime


def test_every_candidate_is_checked_then_timed_and_the_rules_come_first():
    rows = sweep.run_shape(*sweep.QUICK[0], torch.float32, runtime.default_device(), quick=True)
    assert [(r["path"], r["rule"]) for r in rows] == [
        ("fused", True), ("fused", False), ("split", True), ("split", False), ("one_launch", True),
        ("one_launch", False),
    ]  # fmt: skip
    for r in rows:
        assert r["why"] == "" and r["us"] > 0 and r["error"] < 1e-5, r
    assert "k32" in rows[1]["config"] and "split2" in rows[3]["config"].split(" | ")[0]
    assert "k32 split2" in rows[5]["config"] and rows[4]["config"] != rows[5]["config"]


def test_a_candidate_that_answers_wrong_is_a_reason_not_a_time(wrong_path):
    wrong_path(sweep, "split")
    rows = sweep.run_shape(*sweep.QUICK[0], torch.float32, runtime.default_device(), quick=True)
    split = [r for r in rows if r["path"] == "split"]
    assert all(r["us"] is None and r["why"].startswith("AssertionError: relative error") for r in split)
    assert all(r["us"] is not None for r in rows if r["path"] != "split")


def test_the_full_grid_names_distinct_configs():
    rule = sweep.BranchConfig(16, 128, 128, 32, 8, 3)
    fused = sweep.fused_candidates(rule, 4096, quick=False)
    assert fused[0] == rule and len(set(fused)) == len(fused) == 1 + 3 * 2 * 2 * 2 * 2
    one = sweep.one_launch_candidates(rule, quick=False)
    assert one[0] == rule and len(set(one)) == len(one) == 1 + 3 * 3 * 3 * 2
    assert {c.split for c in fused[1:]} == {4096 // bn // f for bn in (128, 256) for f in (1, 2)}
    split = sweep.split_candidates(sweep.BranchConfig(32, 16, 128, 16, 4, 4), quick=False)
    assert split[0] == {} and len(split) == 1 + 2 * 3 * 2 * 2
    assert {c["shrink"].split for c in split[1:]} == {8, 16, 32}


def test_above_decode_sizes_only_the_split_path_is_swept():
    rows = sweep.run_shape(
        sweep.DECODE + 1, 3, 8, 64, 64, torch.float32, runtime.default_device(), quick=True
    )
    assert [(r["path"], r["rule"]) for r in rows] == [("split", True), ("split", False)]
    assert all(r["why"] == "" and r["us"] > 0 for r in rows)
