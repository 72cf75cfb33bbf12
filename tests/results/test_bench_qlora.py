"""The QLoRA benchmark: its baseline of the usual order (dequantize in its own kernel, forward and backward)
against autograd on the reference, a quick run's CSV, and the goals read from known rows."""

from __future__ import annotations

import csv

import pytest
import torch

import kernels
from benchmarks import bench_qlora
from kernels import reference
from kernels.qlora.nf4 import dequantize_nf4, quantize_nf4

DEVICE = kernels.default_device()


def test_dequantize_then_lora_baseline_is_the_lora_formula(seed):
    q = quantize_nf4(torch.randn(40, 96, device=DEVICE))
    x, a, b = (torch.randn(*s, device=DEVICE, requires_grad=True) for s in ((9, 96), (4, 96), (40, 4)))
    y = bench_qlora._DequantizeThenLora.apply(x, a, b, q, 0.5)
    y.backward(dy := torch.randn_like(y))
    x2, a2, b2 = (t.detach().clone().requires_grad_() for t in (x, a, b))
    want = reference.lora_linear(x2, dequantize_nf4(q), a2, b2, 0.5)
    want.backward(dy)
    for got, ref in ((y, want), (x.grad, x2.grad), (a.grad, a2.grad), (b.grad, b2.grad)):
        torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-4 * float(ref.detach().abs().max()))


def test_quick_run_writes_every_provider(tmp_path, capsys):
    bench_qlora.main(["--quick", "--results-dir", str(tmp_path)])
    (path,) = (tmp_path / "qlora").glob("qlora_linear_*.csv")
    rows = list(csv.DictReader(path.open()))
    for pass_ in ("fwd", "fwd+bwd"):
        got = {r["provider"]: float(r["overhead %"]) for r in rows if r["pass"] == pass_}
        assert got[bench_qlora.BASE] == 0.0
        assert {bench_qlora.OURS, bench_qlora.DEQUANT, "bf16 LoRA (ours, bf16 W)"} <= set(got)
    assert path.with_suffix(".png").exists()
    assert "[goal] weight memory 4.127 bits per parameter (goal ≤ 4.5): met" in capsys.readouterr().out


def _row(shape, pass_, provider, ms, overhead):
    return {"shape": shape, "pass": pass_, "provider": provider, "ms": ms, "overhead %": overhead}


@pytest.mark.parametrize("ours_ms, verdicts", [(1.1, ("met", "met")), (1.2, ("not met", "not met"))])
def test_goals_read_from_the_rows(ours_ms, verdicts):
    big = "8192x4096x4096 r16"
    rows = [_row(big, "fwd+bwd", bench_qlora.OURS, ours_ms, 100 * (ours_ms - 1)),
            _row(big, "fwd+bwd", bench_qlora.DEQUANT, 1.45, 45.0),
            _row("512x4096x4096 r16", "fwd", bench_qlora.OURS + " (graph)", 0.05, -3.0)]  # fmt: skip
    lines = bench_qlora.goals(rows, 4.127)
    assert lines[1].endswith(f"(goal ≤ +15%): {verdicts[0]}")
    assert lines[2].endswith(f"(goal ≥ 1.25×): {verdicts[1]}")
    assert (
        lines[3]
        == "512x4096x4096 r16 fwd in CUDA graphs: ours -3.0% against the 16-bit base (goal ≤ 0%): met"
    )
