"""Notebook 04's exercise: the solution passes; planted mistakes are each named precisely.

Triton runs in the interpreter on a CPU (the checker's shapes are small), compiled on a GPU.
"""

from __future__ import annotations

import pytest
import triton
import triton.language as tl

from kernels import reference
from lecture_code.exercises.bias_gelu import CASES, check_bias_gelu
from lecture_code.exercises.solutions.bias_gelu import bias_gelu


def _gelu(z):
    return reference.ACTIVATIONS["gelu_tanh"](z.float()).to(z.dtype)


@triton.jit
def _no_mask_kernel(x_ptr, bias_ptr, out_ptr, N, BLOCK_N: tl.constexpr):
    """The solution without its mask: the last block of a row reads and writes past the row's end."""
    row = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    z = tl.load(x_ptr + row * N + cols).to(tl.float32) + tl.load(bias_ptr + cols).to(tl.float32)
    y = z * tl.sigmoid(1.5957691216057308 * (z + 0.044715 * z * z * z))
    tl.store(out_ptr + row * N + cols, y.to(out_ptr.dtype.element_ty))


@triton.jit
def _bias_wraps_kernel(x_ptr, bias_ptr, out_ptr, N, BLOCK_N: tl.constexpr):
    """Masked, but the bias index wraps at 32 columns (``cols % 32``): column 32 gets bias[0]."""
    row = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = cols < N
    z = tl.load(x_ptr + row * N + cols, mask=mask).to(tl.float32)
    z += tl.load(bias_ptr + cols % 32, mask=mask).to(tl.float32)
    y = z * tl.sigmoid(1.5957691216057308 * (z + 0.044715 * z * z * z))
    tl.store(out_ptr + row * N + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


def _launch(kernel):
    def fn(x, bias, out):
        N = x.shape[-1]
        kernel[(x.numel() // N, triton.cdiv(N, 64))](x, bias, out, N, BLOCK_N=64)

    return fn


def _by_case(report):
    return dict(report.cases)


def test_the_solution_passes_every_case(capsys):
    report = check_bias_gelu(bias_gelu)
    assert report.ok and len(report.cases) == len(CASES)
    assert capsys.readouterr().out.strip().endswith("bias + GELU: all 4 cases pass")


@pytest.mark.filterwarnings("ignore:overflow encountered in exp")  # sigmoid of the guard's sentinel
def test_a_missing_mask_is_caught_by_the_guard():
    report = check_bias_gelu(_launch(_no_mask_kernel), verbose=False)
    problems = _by_case(report)
    # 1 × 1 with blocks of 64: 63 elements stored past the end of out
    assert problems["1 × 1 (one element, a tail of 1)"][0] == (
        "wrote 63 element(s) past the end of out: is the tail of the last block masked?"
    )
    assert all(any("past the end of out" in p for p in ps) for ps in problems.values())


def test_a_wrong_element_is_named_with_its_index_and_values():
    report = check_bias_gelu(_launch(_bias_wraps_kernel), verbose=False)
    problems = _by_case(report)
    assert problems["1 × 1 (one element, a tail of 1)"] == []  # fewer than 32 columns: the bug does not show
    (problem,) = problems["5 × 33 (32 columns + a tail of 1)"]
    assert problem.startswith("out[0, 32] = ") and ", expected " in problem
    assert problem.endswith("5 of 165 elements wrong")  # column 32 of each of the 5 rows


def test_an_unwritten_element_a_changed_input_and_an_exception_are_named():
    def skips_last(x, bias, out):
        out.reshape(-1)[:-1] = _gelu(x + bias).reshape(-1)[:-1]

    problems = _by_case(check_bias_gelu(skips_last, verbose=False))
    (problem,) = problems["5 × 33 (32 columns + a tail of 1)"]
    assert problem.startswith("out[4, 32] is NaN, expected ")
    assert problem.endswith("(out starts as NaN: never written, or computed as NaN) (1 NaN in all)")

    def in_place(x, bias, out):
        x.add_(bias)
        out.copy_(_gelu(x))

    assert all(ps == ["changed an input (x or bias): store into out only"] for ps in _by_case(
        check_bias_gelu(in_place, verbose=False)).values())  # fmt: skip

    problems = _by_case(check_bias_gelu(lambda x, bias, out: out.copy_(x @ bias), verbose=False))
    assert problems["5 × 33 (32 columns + a tail of 1)"][0].startswith("raised RuntimeError: ")


def test_the_skeleton_fails_every_case_saying_the_gelu_is_missing():
    from lecture_code.exercises.skeletons import bias_gelu as skeleton

    report = check_bias_gelu(skeleton.bias_gelu, verbose=False)
    assert not report.ok
    assert len(report.cases) == len(CASES)
    assert all(any("out equals x + bias: the GELU is missing" in p for p in ps) for _, ps in report.cases)
