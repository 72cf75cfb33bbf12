"""The shared checker names each kind of wrong answer precisely; the guards see writes past the end."""

from __future__ import annotations

import torch

from lecture_code.exercises.checker import Report, compare, first_index
from lecture_code.exercises.guards import GUARD, guarded_copy, guarded_output


def test_a_right_answer_has_no_problems(seed):
    want = torch.randn(3, 5)
    assert compare("out", want.clone(), want, 1e-6, 1e-6) == []


def test_each_kind_of_wrong_answer_is_named(seed):
    want = torch.randn(3, 5) + 10  # away from 0, so a 1.0 change is outside any tolerance used here
    assert compare("out", [1.0], want, 0, 0) == ["out is a list, not a tensor"]
    assert compare("out", want[:, :4], want, 0, 0) == ["out has shape (3, 4), expected (3, 5)"]
    assert "the expected shape transposed: a swapped transpose?" in compare("out", want.t(), want, 0, 0)[0]
    assert compare("out", want.double(), want, 0, 0) == [
        "out has dtype torch.float64, expected torch.float32 (the inputs' dtype)"
    ]
    wrong = want.clone()
    wrong[1, 3] += 1.0
    wrong[2, 0] += 1.0
    (problem,) = compare("out", wrong, want, 1e-5, 1e-5)
    assert problem.startswith(f"out[1, 3] = {wrong[1, 3].item():.6g}, expected {want[1, 3].item():.6g} ")
    assert problem.endswith("2 of 15 elements wrong")
    wrong[0, 2] = float("nan")
    (problem,) = compare("out", wrong, want, 1e-5, 1e-5, nan_hint=" (never written?)")
    assert problem == f"out[0, 2] is NaN, expected {want[0, 2].item():.6g} (never written?) (1 NaN in all)"


def test_first_index_is_row_major():
    mask = torch.zeros(2, 3, 4, dtype=torch.bool)
    mask[1, 0, 2] = mask[1, 2, 0] = True
    assert first_index(mask) == (1, 0, 2)


def test_guards_count_writes_past_the_end_and_keep_inputs(seed):
    x = torch.randn(4, 3)
    gx = guarded_copy(x)
    assert torch.equal(gx.tensor, x) and gx.written_past_end() == 0
    out = guarded_output((4, 3), torch.float16, torch.device("cpu"))
    assert out.tensor.isnan().all() and out.written_past_end() == 0
    out.buffer[12:17] = 0.0  # five elements past the end of a 12-element tensor
    assert out.written_past_end() == 5 and out.buffer.numel() == 12 + GUARD


def test_a_report_is_ok_only_when_every_case_is():
    report = Report("demo", [("a", []), ("b", [])])
    assert report and str(report).endswith("demo: all 2 cases pass")
    report.cases.append(("c", ["out[0] = 1, expected 2"]))
    assert not report and report.problems() == ["out[0] = 1, expected 2"]
    assert "c  out[0] = 1, expected 2" in str(report) and str(report).endswith("not yet: see above")


def test_a_long_report_line_wraps_under_its_case():
    problems = [
        f"out[{i}, 3] = 0.5, expected 1.25 (|error| 0.75 > 0.001 + 0.001·|expected|); " + "x" * 40
        for i in range(2)
    ]
    text = str(Report("demo", [("odd shape", problems), ("tiny", [])]))
    lines = text.splitlines()
    assert all(len(line) <= Report.WIDTH for line in lines)
    assert lines[0] == "odd shape" and lines[1].startswith("  - out[0, 3] = 0.5")
    assert sum(line.startswith("  - ") for line in lines) == 2  # one bullet per problem
    assert "tiny       ok" in lines and lines[-1] == "not yet: see above"
    assert " ".join(" ".join(lines).split()).count("x" * 40) == 2  # nothing lost in the wrapping
