"""The kernel-by-kernel LoRA probe (benchmarks/probe_lora_kernels.py) on CPU, tiny sizes: every launch of v2
and v3 checked against torch before it is timed beside its cuBLAS floor; a wrong one is a reason."""

from __future__ import annotations

import torch

from benchmarks import probe_lora_kernels as probe
from kernels import runtime


def _run():
    return probe.run_shape(*probe.QUICK[0], torch.float32, runtime.default_device(), quick=True)


def test_every_launch_is_checked_then_timed_beside_its_floor():
    rows = _run()
    assert [r["pass"] for r in rows] == ["fwd"] * 4 + ["bwd"] * 5
    for r in rows:
        assert r["why"] == "" and r["us"] > 0, r
    kernels = [r for r in rows if "(v2)" in r["launch"] or "(v3)" in r["launch"]]
    assert len(kernels) == 4 and all(r["vs floor %"] is not None for r in kernels)
    assert "and dB" in rows[6]["launch"]  # r = 16: the dX launch's producers make dB too


def test_a_launch_that_answers_wrong_is_a_reason_not_a_time(monkeypatch):
    real = probe.lowrank_gemm

    def wrong(*args, **kwargs):
        out = real(*args, **kwargs)
        return (out[0] + 1, *out[1:])

    monkeypatch.setattr(probe, "lowrank_gemm", wrong)
    rows = _run()
    for r in rows:
        if "(v2)" in r["launch"] or "(v3)" in r["launch"]:
            assert r["us"] is None and r["why"].startswith("AssertionError: relative error"), r
        else:
            assert r["us"] > 0, r
