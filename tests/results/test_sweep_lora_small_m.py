"""The small-M LoRA sweep (benchmarks/sweep_lora_small_m.py) on CPU, tiny sizes: the base first, every
candidate checked against float64 before it is timed (forward and backward on the candidate's config)."""

from __future__ import annotations

import dataclasses

import torch

from benchmarks import sweep_lora_small_m as sweep
from kernels import runtime


def test_the_base_then_every_candidate_checked_and_timed():
    rows = sweep.run_shape(*sweep.QUICK[0], torch.float32, runtime.default_device(), quick=True)
    rule = sweep.small_m_rule(*sweep.QUICK[0])  # the interpreter's rule differs from a GPU's
    named = [
        f"n{c.block_n} k{c.block_k} w{c.num_warps} s{c.num_stages}"
        for c in (rule, dataclasses.replace(rule, block_k=16))
    ]
    assert [(r["config"], r["rule"]) for r in rows] == [
        ("base (frozen linear)", False), (named[0], True), (named[1], False)
    ]  # fmt: skip
    for r in rows:
        assert r["why"] == "" and r["fwd us"] > 0 and r["fwd+bwd us"] > 0, r
    assert all(r["error"] < 1e-5 for r in rows[1:])


def test_the_backward_takes_the_candidates_config(monkeypatch):
    import kernels.lora.small_m as small_m

    seen = []
    real = small_m.small_m_backward

    def spy(*args, **kwargs):
        seen.append(args[-1])
        return real(*args, **kwargs)

    monkeypatch.setattr("kernels.lora.linear.small_m_backward", spy)
    sweep.run_shape(*sweep.QUICK[0], torch.float32, runtime.default_device(), quick=True)
    assert sweep.BranchConfig(block_k=16) in seen


def test_the_full_grid_names_distinct_configs():
    rule = sweep.small_m_rule(16, 4096, 4096, 16)
    got = sweep.candidates(rule, quick=False)
    assert got[0] == rule and len(set(got)) == len(got) == 1 + 3 * 3 * 3 * 3


def test_a_wrong_answer_is_a_row_with_its_reason_not_a_time(monkeypatch):
    import kernels.lora.small_m as small_m

    real = small_m.small_m_backward

    def wrong_da(*args, **kwargs):
        dx, da, db = real(*args, **kwargs)
        return dx, da + 1, db

    monkeypatch.setattr("kernels.lora.linear.small_m_backward", wrong_da)
    rows = sweep.run_shape(*sweep.QUICK[0], torch.float32, runtime.default_device(), quick=True)
    assert rows[0]["fwd+bwd us"] > 0  # the base
    for r in rows[1:]:
        assert r["why"].startswith("AssertionError: relative error") and "fwd us" not in r, r
