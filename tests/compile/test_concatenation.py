"""concatenation_report: who writes the interaction's bmm input, the copy of the gathers, the ReLU count."""

from __future__ import annotations

import re

import pytest
import torch
from wrapper_fixtures import CPU_WRAPPER, GPU_WRAPPER

from lecture_code.compile import capture_compiled_code, concatenation_report, memory_lines, parse_output_code
from lecture_code.compile.generated_code import CompiledCode
from lecture_code.internals import triton_on_cpu_expected


def _report(text):
    kernels, extern = parse_output_code([text])
    return concatenation_report(
        CompiledCode(files=[text], kernels=kernels, extern_calls=extern, backend="triton")
    )


def test_gpu_form_copies_the_gathers_and_computes_the_relu_twice():
    report = _report(GPU_WRAPPER)
    assert report.bmm_input == "buf36" and report.gather_buffer == "buf33" and len(report.gathers) == 26
    assert [f.kernel.name[-2:] for f in report.fillers] == ["30"]
    assert [c.kernel.name[-2:] for c in report.copies] == ["30"]
    assert report.dense_input == "buf4"
    assert [r.kernel.name[-2:] for r in report.relu_launches] == ["30", "31"]
    text = str(report)
    assert "→ columns 0–431 of 432" in text  # the pointwise cat writes every column
    said = " ".join(report.findings())
    assert "stores 432 of the 432 columns" in said and "computed 2 times" in said
    assert "_31, writing buf40 [8, 367]" in said and "_30, writing buf36 [8, 27, 16]" in said
    load = "tmp15 = tl.load(in_ptr2 + (x0 + 16*((-1) + x1) + 416*x2), tmp12, other=0.0)"
    assert re.search(r"in_ptr2 = buf33 \[8, 416\] +" + re.escape(load), text)
    assert "(the output of extern_kernels.mm)" in said


def test_cpu_form_copies_into_a_slice_and_stores_the_relu_twice():
    report = _report(CPU_WRAPPER)
    assert [f.kernel.name[-2:] for f in report.fillers] == ["29", "30"]
    assert [c.kernel.name[-2:] for c in report.copies] == ["30"]
    assert [r.kernel.name[-2:] for r in report.relu_launches] == ["29"]
    text = str(report)
    assert "triton_poi_fused_cat_relu_stack_unsqueeze_30 → columns 16–431 of 432" in text
    said = " ".join(report.findings())
    assert "stores 416 of the 432 columns" in said
    assert "computed once" in said and "stored into buf36 [8, 27, 16] and buf40 [8, 367]" in said


def test_gathers_straight_into_the_bmm_input_is_no_copy():
    def into_bmm_input(m):  # each gather writes its slot of buf36 (after the dense slot) instead of buf33
        return f"reinterpret_tensor(buf36, (8, 16), (432, 1), {16 + int(m.group(1))})"

    direct = re.sub(r"reinterpret_tensor\(buf33, \(8, 16\), \(416, 1\), (\d+)\)", into_bmm_input, CPU_WRAPPER)
    report = _report(direct)
    assert report.gather_buffer == "buf36" and report.copies == []
    assert "store straight into the bmm's input: no copy" in report.findings()[0]


def test_no_bmm_no_report():
    assert _report(CPU_WRAPPER.replace("extern_kernels.bmm", "extern_kernels.baddbmm")) is None


def test_real_capture_fills_every_column_of_the_bmm_input(tiny_dlrm):
    """What inductor did here, whatever it chose: the report must account for the whole bmm input."""
    model, dense, sparse, _ = tiny_dlrm
    code = capture_compiled_code(model.predict_proba, dense, sparse, triton_on_cpu=True)
    if code.backend != "triton":
        assert not triton_on_cpu_expected(), code.fallback_reason
        pytest.skip(f"no Triton here: {code.fallback_reason}")
    report = concatenation_report(code)
    assert report is not None, code.summary()
    w = report.wrapper
    written = sorted(
        c
        for f in report.fillers
        for p in f.writes
        if w.base_of(f.args[p]) == report.bmm_input
        for c in w.columns(f.args[p])
    )
    assert written == list(range(w.view(report.bmm_input).row_width))
    assert report.gathers
    if report.gather_buffer not in (None, report.bmm_input):  # gathers apart from the cat: they fill a buffer
        gather = report.gathers[0]
        [store] = [line for p in gather.writes for line in memory_lines(gather.kernel, p)]
        assert f"{w.view(report.gather_buffer).row_width}*" in store  # the row stride of the buffer it fills
        assert report.copies  # and something moves those columns into the bmm input
    if report.dense_input is not None:  # the dense ReLU is computed inside the kernels that fill buffers
        assert report.relu_launches and all("maximum(" in r.kernel.body for r in report.relu_launches)
        assert any("ReLU" in f for f in report.findings())
    printed = " ".join(str(report).split())  # the findings close the printout, wrapped
    assert report.findings() and all(" ".join(f.split()) in printed for f in report.findings())
    with torch.no_grad():
        torch.testing.assert_close(code.result, model.predict_proba(dense, sparse))
