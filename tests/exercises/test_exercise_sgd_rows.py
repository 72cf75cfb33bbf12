"""Notebook 05's exercise: the solution passes; planted mistakes are each named precisely."""

from __future__ import annotations

import torch

from lecture_code.exercises.sgd_rows import CASES, check_sgd_rows, reference_sgd_rows
from lecture_code.exercises.solutions.sgd_rows import sgd_rows

REPEATS = "10 rows, D 3, rows 2 and 7 repeated"


def _by_case(fn):
    report = check_sgd_rows(fn, verbose=False)
    return report, dict(report.cases)


def test_the_solution_passes_every_case():
    report, _ = _by_case(sgd_rows)
    assert report.ok, str(report)
    assert len(report.cases) == len(CASES) and str(report).endswith("all 5 cases pass")


def test_the_reference_sums_repeated_rows():
    weight, ids, grad = torch.zeros(3, 2), torch.tensor([1, 1, 2]), torch.ones(3, 2)
    assert reference_sgd_rows(weight, ids, grad, 0.5).tolist() == [[0, 0], [-1, -1], [-0.5, -0.5]]


def test_indexed_assignment_keeps_one_update_per_row():
    def assigned(weight, ids, grad, lr):
        weight[ids] -= lr * grad  # last writer wins for a repeated row
        return weight

    report, cases = _by_case(assigned)
    assert not report.ok
    assert "row 2 is looked up 2 times but got one update" in cases[REPEATS][0]
    assert "row 1 is looked up 5 times" in cases["one row hit by all 5 lookups"][0]
    assert cases["no repeats, D 16, first and last rows"] == []  # without repeats, assignment is right

    def first_writer(weight, ids, grad, lr):  # the other order a backend may write in
        for row in dict.fromkeys(ids.tolist()):
            first = int((ids == row).nonzero()[0, 0])
            weight[row] -= lr * grad[first]
        return weight

    _, cases = _by_case(first_writer)
    assert "row 2 is looked up 2 times but got one update" in cases[REPEATS][0]


def test_a_new_tensor_a_wrong_sign_a_stray_row_and_an_exception_are_named():
    _, cases = _by_case(lambda w, i, g, lr: w - lr * torch.zeros_like(w).index_add_(0, i, g))
    assert cases[REPEATS][0] == "returned a new tensor: update weight in place and return it"
    _, cases = _by_case(lambda w, i, g, lr: w.index_add_(0, i, g, alpha=lr))
    assert "every update has the wrong sign" in cases[REPEATS][0]

    def stray(weight, ids, grad, lr):
        weight.index_add_(0, ids, grad, alpha=-lr)
        weight[4] += 1.0  # a row no lookup touches in the repeats case
        return weight

    _, cases = _by_case(stray)
    assert cases[REPEATS] == [
        "weight[4, 0] changed, but no lookup touched row 4: update the looked-up rows only"
    ]
    _, cases = _by_case(lambda w, i, g, lr: w.index_add_(0, i.int().float(), g))
    assert cases[REPEATS][0].startswith("raised ")


def test_the_skeleton_fails_every_nonempty_case_saying_nothing_was_applied():
    from lecture_code.exercises.skeletons import sgd_rows as skeleton

    report = check_sgd_rows(skeleton.sgd_rows, verbose=False)
    assert not report.ok
    for case, (_, problems) in zip(CASES, report.cases, strict=True):
        if case.ids:
            assert any("weight is unchanged: no lookup's update was applied" in p for p in problems), problems
        else:
            assert problems == []  # an empty batch: nothing to update, the skeleton is right
