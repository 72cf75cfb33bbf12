"""Notebook 07's dA exercise: the solution passes; planted mistakes are each named precisely."""

from __future__ import annotations

import torch

from lecture_code.exercises.lora_da import CASES, check_lora_da, reference_da
from lecture_code.exercises.solutions.lora_da import lora_da


def test_the_reference_is_the_formula(seed):
    dy, x, b = torch.randn(2, 5, 7), torch.randn(2, 5, 9), torch.randn(7, 3)
    want = 0.5 * (dy.reshape(-1, 7) @ b).t() @ x.reshape(-1, 9)
    torch.testing.assert_close(reference_da(dy, x, b, 0.5), want, atol=1e-5, rtol=1e-5)


def test_the_solution_passes(capsys):
    assert check_lora_da(lora_da).ok
    assert capsys.readouterr().out.strip().endswith(f"LoRA dA: all {len(CASES)} cases pass")


def test_a_swapped_transpose_is_named():
    def swapped(dy, x, b, s):
        return s * x.reshape(-1, x.shape[-1]).t() @ (dy.reshape(-1, dy.shape[-1]) @ b)  # xᵀ (dY B): [K, r]

    problems = dict(check_lora_da(swapped, verbose=False).cases)
    assert problems["odd: x 2×3×13, N 7, r 3"] == [
        "dA has shape (13, 3), expected (3, 13) — that is the expected shape transposed: a swapped transpose?"
    ]


def test_a_missing_scale_a_wrong_dtype_a_wrong_element_and_a_nan_are_named():
    report = check_lora_da(lambda dy, x, b, s: lora_da(dy, x, b, 1.0), verbose=False)
    first = dict(report.cases)["plain: M 8, K 16, N 12, r 4"]
    assert first[0].startswith("dA[0, 0] = ") and first[0].endswith("64 of 64 elements wrong")
    assert first[1] == "it looks like the scale s is missing"

    report = check_lora_da(lambda dy, x, b, s: lora_da(dy, x, b, s).double(), verbose=False)
    assert set(report.problems()) == {
        "dA has dtype torch.float64, expected torch.float32 (the inputs' dtype)"
    }

    def one_wrong(dy, x, b, s):
        da = lora_da(dy, x, b, s)
        da[1, 2] += 1.0
        return da

    problem = dict(check_lora_da(one_wrong, verbose=False).cases)["plain: M 8, K 16, N 12, r 4"]
    assert (
        len(problem) == 1 and problem[0].startswith("dA[1, 2] = ") and "1 of 64 elements wrong" in problem[0]
    )

    def one_nan(dy, x, b, s):
        da = lora_da(dy, x, b, s)
        da[0, 5] = float("nan")
        return da

    problem = dict(check_lora_da(one_nan, verbose=False).cases)["rank 1, M 5, K 9, N 6"]
    assert len(problem) == 1 and problem[0].startswith("dA[0, 5] is NaN, expected ")


def test_the_skeleton_is_diagnosed_as_not_computed_yet():
    from lecture_code.exercises.skeletons import lora_da as skeleton

    report = check_lora_da(skeleton.lora_da, verbose=False)
    assert not report.ok
    for case in CASES:
        problems = dict(report.cases)[case.name]
        if case.scale == 0.0:  # a zero dA is right there: why the checker has other cases
            assert problems == [], problems
        else:
            assert problems[0].startswith("dA[0, 0] = 0, expected "), problems
            assert problems[-1] == "dA is all zeros: nothing computed yet?", problems
