"""The GEMM notebook's exercise: the skeleton is diagnosed (bias and ReLU missing), the solution passes, and
planted mistakes are each named precisely. Triton runs in the interpreter on a CPU (small shapes)."""

from __future__ import annotations

import torch
import triton

from lecture_code.exercises.linear_relu import CASES, check_linear_relu, reference_linear_relu
from lecture_code.exercises.skeletons import linear_relu as skeleton
from lecture_code.exercises.solutions.linear_relu import linear_relu


def _by_case(fn):
    return dict(check_linear_relu(fn, verbose=False).cases)


def test_the_reference_is_the_formula(seed):
    x, w, b = torch.randn(5, 7), torch.randn(9, 7), torch.randn(9)
    want = torch.clamp(x @ w.t() + b, min=0)
    torch.testing.assert_close(reference_linear_relu(x, w, b), want, atol=1e-6, rtol=1e-6)


def test_the_solution_passes_every_case(capsys):
    report = check_linear_relu(linear_relu)
    assert report.ok and len(report.cases) == len(CASES)
    assert capsys.readouterr().out.strip().endswith(f"linear + ReLU: all {len(CASES)} cases pass")


def test_the_skeleton_is_diagnosed_as_missing_its_epilogue():
    report = check_linear_relu(skeleton.linear_relu, verbose=False)
    assert not report.ok
    for name, problems in report.cases:
        assert problems[0].startswith("out[0, 0] = "), name  # the first wrong element, with its index
        assert problems[-1] == "out equals x Wᵀ: the bias and the ReLU are missing", name


def _torch_answer(order):
    def fn(x, w, b, out):
        z = x.double() @ w.double().t()
        out.copy_(order(z, b.double()))
        return out

    return fn


def test_each_incomplete_epilogue_is_named():
    cases = {
        "the bias is missing": lambda z, b: torch.relu(z),
        "the ReLU is missing": lambda z, b: z + b,
        "the bias is added after the ReLU": lambda z, b: torch.relu(z) + b,
    }
    for what, order in cases.items():
        problems = _by_case(_torch_answer(order))[CASES[1].name]
        assert problems[-1].endswith(what), (what, problems)


def test_an_unmasked_store_is_caught_past_the_end():
    def unmasked(x, w, b, out):
        flat = out.view(-1)
        # a store of whole 32-wide blocks: the last block runs past the end of out
        n = triton.cdiv(flat.numel(), 32) * 32
        full = torch.relu(x @ w.t() + b).reshape(-1)
        torch.as_strided(flat, (n,), (1,))[: full.numel()].copy_(full)
        torch.as_strided(flat, (n,), (1,))[full.numel() :].fill_(0)
        return out

    problems = _by_case(unmasked)[CASES[0].name]
    assert any("past the end of out" in p and "masked" in p for p in problems), problems


def test_an_exception_is_reported_not_raised():
    def broken(x, w, b, out):
        raise RuntimeError("boom")

    assert _by_case(broken)[CASES[0].name] == ["raised RuntimeError: boom"]
