"""Notebook 08's exercise: the solution passes; planted mistakes are each named precisely.

Triton runs in the interpreter on a CPU (the checker's shapes are small), compiled on a GPU.
"""

from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl

from lecture_code.exercises.multi_lora_expand import CASES, check_multi_lora_expand, reference_expand
from lecture_code.exercises.solutions.multi_lora_expand import multi_lora_expand

MIXED = "7 tokens, N 33, r 3, 3 adapters"


@triton.jit
def _planted_kernel(
    y_ptr, t_ptr, b_ptr, ids_ptr, N, R, BLOCK_N: tl.constexpr, BLOCK_R: tl.constexpr,
    SKIP_MINUS_ONE: tl.constexpr, MASK_COLS: tl.constexpr,
):  # fmt: skip
    """The solution with a switch per mistake: no early exit for id −1, no column mask."""
    row = tl.program_id(0)
    lora = tl.load(ids_ptr + row)
    if SKIP_MINUS_ONE:
        if lora < 0:
            return
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    rs = tl.arange(0, BLOCK_R)
    col_mask = cols < N if MASK_COLS else cols >= 0
    r_mask = rs < R
    t = tl.load(t_ptr + row * R + rs, mask=r_mask, other=0.0).to(tl.float32)
    b = tl.load(
        b_ptr + lora * N * R + cols[:, None] * R + rs[None, :],
        mask=col_mask[:, None] & r_mask[None, :],
        other=0.0,
    ).to(tl.float32)
    y_ptrs = y_ptr + row * N + cols
    acc = tl.load(y_ptrs, mask=col_mask, other=0.0).to(tl.float32) + tl.sum(b * t[None, :], axis=1)
    tl.store(y_ptrs, acc.to(y_ptr.dtype.element_ty), mask=col_mask)


def _planted(skip_minus_one=True, mask_cols=True, floor_grid=False):
    def fn(y, t, lora_b, ids):
        T, N = y.shape
        R = t.shape[1]
        blocks = N // 32 if floor_grid else triton.cdiv(N, 32)
        if blocks:
            _planted_kernel[(T, blocks)](
                y, t, lora_b, ids, N, R, BLOCK_N=32, BLOCK_R=triton.next_power_of_2(R),
                SKIP_MINUS_ONE=skip_minus_one, MASK_COLS=mask_cols,
            )  # fmt: skip
        return y

    return fn


def _by_case(fn):
    return dict(check_multi_lora_expand(fn, verbose=False).cases)


def test_the_reference_is_the_formula(seed):
    y, t, b = torch.randn(5, 7), torch.randn(5, 3), torch.randn(4, 7, 3)
    ids = torch.tensor([2, -1, 0, 3, -1])
    want = y.clone()
    for i, k in enumerate(ids.tolist()):
        if k >= 0:
            want[i] += b[k] @ t[i]
    torch.testing.assert_close(reference_expand(y, t, b, ids), want, atol=1e-6, rtol=1e-6)


def test_the_solution_passes_every_case(capsys):
    report = check_multi_lora_expand(multi_lora_expand)
    assert report.ok and len(report.cases) == len(CASES)
    assert capsys.readouterr().out.strip().endswith(f"multi-LoRA expand: all {len(CASES)} cases pass")


def test_the_planted_kernel_with_every_switch_on_is_right():
    assert check_multi_lora_expand(_planted(), verbose=False).ok  # so each failure below is its mistake


def test_a_missing_mask_is_caught_by_the_guard():
    problems = _by_case(_planted(mask_cols=False))
    # N = 33 with blocks of 32: the last row's second block stores 31 elements past the end of y
    assert problems[MIXED][0] == (
        "wrote 31 element(s) past the end of y: is the tail of the last column block masked (cols < N)?"
    )
    assert problems["1 token, N 1 (a logit), r 1"][0].startswith("wrote 31 element(s) past the end of y")
    assert problems["every id −1"] == []  # nothing is stored when every row returns at once


def test_a_written_minus_one_row_is_named_with_where():
    # the kernel without its early exit reads B one adapter before lora_b: the checker's sentinel adapter
    problems = _by_case(_planted(skip_minus_one=False))
    assert problems[MIXED] == [
        "y[0, 0] changed, but token 0 has adapter id −1: its row must keep its bits "
        "(1 of 1 rows with id −1 were written)"
    ]
    assert problems["every id −1"][0].startswith("y[0, 0] changed, but token 0 has adapter id −1")

    def negative_index(y, t, lora_b, ids):  # torch: B[-1] is the last adapter
        return y.add_(torch.bmm(lora_b[ids], t[:, :, None]).squeeze(-1))

    problems = _by_case(negative_index)
    assert problems[MIXED][0].endswith("was −1 used as an index? (B[-1] is B[L − 1])")
    assert problems["one adapter, N 70, r 8"] == []


def test_a_wrong_element_is_named_with_its_index_and_values():
    def one_wrong(y, t, lora_b, ids):
        multi_lora_expand(y, t, lora_b, ids)
        y[-1, -1] += 1.0
        return y

    problem = _by_case(one_wrong)["one adapter, N 70, r 8"]
    assert len(problem) == 1 and problem[0].startswith("y[3, 69] = ") and ", expected " in problem[0]
    assert problem[0].endswith("1 of 280 elements wrong")


def test_a_tail_never_added_to_is_named():
    problems = _by_case(_planted(floor_grid=True))  # N // 32 column blocks: the tail is never launched
    (problem,) = problems["one adapter, N 70, r 8"]
    assert problem.startswith("y[0, 64] = ") and "24 of 280 elements wrong" in problem
    assert problem.endswith("y[0, 64] still holds its value from before the call: never added to")


def test_the_shape_a_copy_none_and_an_exception_are_named():
    problems = _by_case(lambda y, t, b, ids: multi_lora_expand(y, t, b, ids).t())
    assert problems[MIXED] == [
        "returned a tensor of shape (33, 7), expected (7, 33) — that is the expected shape transposed: "
        "a swapped transpose?"
    ]
    problems = _by_case(lambda y, t, b, ids: multi_lora_expand(y.clone(), t, b, ids))
    assert problems[MIXED][0] == "returned a new tensor: add into y in place (y[i] += …) and return y"
    assert problems[MIXED][1].endswith("never added to")
    problems = _by_case(lambda y, t, b, ids: None)
    assert problems["every id −1"] == ["returned None: return y (after adding into it in place)"]

    def changes_t(y, t, b, ids):
        t.mul_(2)
        return y

    assert all(p[0] == "changed an input (t, lora_b or adapter_ids): add into y only"
               for p in _by_case(changes_t).values())  # fmt: skip
    problems = _by_case(lambda y, t, b, ids: y.add_(t @ b[0].t().t()))
    assert problems[MIXED][0].startswith("raised RuntimeError: ")


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_each_case_has_what_it_says(case):
    from lecture_code.exercises.multi_lora_expand import _inputs

    y, t, b, ids = _inputs(case, 0)
    assert y.shape == (case.T, case.N) and t.shape == (case.T, case.r) and b.shape == (case.L, case.N, case.r)
    assert y.dtype == case.dtype and ((ids >= -1) & (ids < case.L)).all()
    if case.ids is None:
        assert ids[0] == -1 and ids[-1] == case.L - 1


def test_the_skeleton_is_diagnosed_as_never_adding():
    from lecture_code.exercises.skeletons import multi_lora_expand as skeleton

    report = check_multi_lora_expand(skeleton.multi_lora_expand, verbose=False)
    assert not report.ok
    for case in CASES:
        problems = dict(report.cases)[case.name]
        if case.ids is not None and all(i < 0 for i in case.ids):  # nothing to add: the empty kernel is right
            assert problems == [], problems
        else:
            assert len(problems) == 1 and problems[0].endswith("never added to"), problems
