"""The QLoRA benchmark: its baseline of the usual order (dequantize in its own kernel, forward and backward)
against autograd on the reference, a quick run's CSV summarised on the results page, and the goals read
from known rows."""

from __future__ import annotations

import csv

import pytest
import torch

import kernels
from benchmarks import bench_qlora
from kernels import reference
from kernels.qlora.nf4 import dequantize_nf4, quantize_nf4
from lecture_code.results.page import BEGIN, END, render
from lecture_code.results.workloads import qlora as workload

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


def test_quick_run_writes_every_provider_and_the_page_summarises_it(tmp_path, capsys):
    (tmp_path / "README.md").write_text(f"# R\n\n{BEGIN}\nold\n{END}\n")
    bench_qlora.main(["--quick", "--results-dir", str(tmp_path / "benchmarks" / "results")])
    (path,) = (tmp_path / "benchmarks" / "results" / "qlora").glob("qlora_linear_*.csv")
    rows = list(csv.DictReader(path.open()))
    for pass_ in ("fwd", "fwd+bwd"):
        got = {r["provider"]: float(r["overhead %"]) for r in rows if r["pass"] == pass_}
        assert got[workload.BASE] == 0.0
        assert {workload.OURS, workload.OURS_BY_ELEMENT, workload.OURS_VIA_16, workload.DEQUANT} <= set(got)
        assert "bf16 LoRA (ours, bf16 W)" in got
    assert path.with_suffix(".png").exists()
    assert "[goal] weight memory 4.127 bits per parameter (goal ≤ 4.5): met" in capsys.readouterr().out
    page = render(tmp_path)[tmp_path / "RESULTS.md"]
    section = page[page.index(f"## {workload.TITLE}") :]
    ours = next(r for r in rows if r["provider"] == workload.OURS and r["pass"] == "fwd")
    line = next(ln for ln in section.splitlines() if ln.startswith(f"| {ours['shape']} | fwd |"))
    assert workload.pct(float(ours["overhead %"]), signed=True) in line


def _row(shape, pass_, provider, ms, overhead):
    return {"shape": shape, "pass": pass_, "provider": provider, "ms": ms, "overhead %": overhead}


@pytest.mark.parametrize("ours_ms, verdict", [(1.1, "met"), (1.2, "not met")])
def test_goals_read_from_the_rows(ours_ms, verdict):
    big = "8192x4096x4096 r16"
    rows = [_row(big, "fwd+bwd", workload.DEFAULT, ours_ms, 100 * (ours_ms - 1)),
            _row(big, "fwd+bwd", workload.OURS, 9.0, 800.0),  # not the default: the goals do not read it
            _row(big, "fwd+bwd", workload.DEQUANT, 1.45, 45.0),
            _row("512x4096x4096 r16", "fwd", workload.DEFAULT + workload.GRAPH, 0.05, -3.0)]  # fmt: skip
    checks = {c.goal.key: c for c in workload.goal_checks(rows)}
    overhead, speedup = (
        checks["8192x4096x4096 r16 fwd+bwd"],
        checks["8192x4096x4096 r16 fwd+bwd vs dequantize"],
    )
    assert overhead.value == pytest.approx(100 * (ours_ms - 1)) and overhead.verdict == verdict
    assert speedup.value == pytest.approx(1.45 / ours_ms) and speedup.verdict == verdict
    graph = checks["512x4096x4096 r16 fwd graph"]
    assert (
        graph.value == -3.0
        and graph.verdict == "met"
        and graph.reached == "-3.00% (ours (via a 16-bit copy) (graph))"
    )
    assert workload.goal_checks([])[0].verdict == "not measured"
    lines = bench_qlora.goals(rows, 4.127)
    assert lines[0] == "weight memory 4.127 bits per parameter (goal ≤ 4.5): met"
    assert lines[1].endswith(f": {verdict}") and len(lines) == 1 + len(checks)
    assert bench_qlora.goals([], 4.127)[1].endswith("(W in NF4, bf16 activations): not measured")
