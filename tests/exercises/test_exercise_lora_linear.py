"""Notebook 07's first exercise: the reference and the solution pass; the skeleton and planted mistakes are
each named precisely."""

from __future__ import annotations

import torch

from kernels import reference
from lecture_code.exercises.lora_linear import CASES, check_lora_linear
from lecture_code.exercises.solutions.lora_linear import lora_linear as solution_lora_linear


class _HandWritten(torch.autograd.Function):
    """A hand-written backward; ``slip`` injects one of the usual mistakes."""

    @staticmethod
    def forward(ctx, x, w, a, b, scale, bias, slip):
        t = x @ a.t()
        ctx.save_for_backward(x, w, a, b, t)
        ctx.scale, ctx.slip = scale, slip
        y = x @ w.t() + scale * t @ b.t()
        return y if bias is None else y + bias

    @staticmethod
    def backward(ctx, dy):
        x, w, a, b, t = ctx.saved_tensors
        s, slip = ctx.scale, ctx.slip
        u = dy @ b
        dx = dy @ w + s * u @ a
        da = (u.transpose(-1, -2) @ x) if slip == "dA without s" else s * (u.transpose(-1, -2) @ x)
        db = s * dy.transpose(-1, -2) @ t
        if slip == "dB twice s":
            db = s * db
        if slip == "dX one element off":
            dx = dx.clone()
            dx[1, 2] += 1.0
        return dx, None, da, db, None, None, None


def _fn(slip=None):
    def fn(x, w, a, b, scale, bias=None):
        x2 = x.reshape(-1, x.shape[-1])
        y = _HandWritten.apply(x2, w, a, b, scale, bias, slip)
        return y.reshape(*x.shape[:-1], w.shape[0])

    return fn


def test_the_reference_and_the_solution_pass(capsys):
    assert check_lora_linear(reference.lora_linear).ok
    assert check_lora_linear(solution_lora_linear).ok
    assert check_lora_linear(_fn(), verbose=False).ok
    assert capsys.readouterr().out.strip().endswith(f"LoRA linear: all {len(CASES)} cases pass")


def test_a_missing_or_doubled_scale_is_named():
    plain = CASES[0].name
    problems = dict(check_lora_linear(_fn("dA without s"), verbose=False).cases)[plain]
    assert problems[0].startswith("dA[0, 0] = ") and problems[0].endswith("128 of 128 elements wrong")
    assert problems[1:] == ["dA: it looks like the scale s is missing"]
    problems = dict(check_lora_linear(_fn("dB twice s"), verbose=False).cases)[plain]
    assert len(problems) == 2 and problems[0].startswith("dB[0, 0] = ")
    assert problems[1] == "dB: it looks like the scale s is applied twice"


def test_the_first_wrong_element_is_named():
    problems = dict(check_lora_linear(_fn("dX one element off"), verbose=False).cases)[CASES[0].name]
    assert (
        len(problems) == 1
        and problems[0].startswith("dX[1, 2] = ")
        and "1 of 256 elements wrong" in problems[0]
    )


def test_a_broken_output_a_detached_gradient_and_an_error_are_named():
    report = check_lora_linear(
        lambda x, w, a, b, s, bias=None: reference.lora_linear(x, w, a, b, s, bias)[..., :-1]
    )
    assert dict(report.cases)[CASES[0].name] == ["y has shape (8, 15), expected (8, 16)"]
    detached = lambda x, w, a, b, s, bias=None: reference.lora_linear(x, w, a.detach(), b, s, bias)  # noqa: E731
    problems = dict(check_lora_linear(detached, verbose=False).cases)[CASES[0].name]
    assert problems == ["dA is missing (the output does not depend on it through autograd)"]
    problems = check_lora_linear(lambda *args: 1 / 0, verbose=False).problems()
    assert set(problems) == {"raised ZeroDivisionError: division by zero"}


def test_the_skeleton_is_diagnosed_as_not_computed_yet():
    from lecture_code.exercises.skeletons import lora_linear as skeleton

    report = check_lora_linear(skeleton.lora_linear, verbose=False)
    assert not report.ok
    for case in CASES:
        problems = dict(report.cases)[case.name]
        if case.scale == 0.0:  # zero gradients for A and B are right there: why the checker has other cases
            assert problems == [], problems
        elif case.zero_b:  # B = 0: u = 0, so dX = dY W and dA = 0 are right; dB is not
            assert problems == ["dB is all zeros: nothing computed yet?"], problems
        else:
            assert problems[0].startswith("dX[0, "), problems
            assert problems[1:] == [
                "dX is dY W alone: the LoRA path's term (s·u) A is missing",
                "dA is all zeros: nothing computed yet?",
                "dB is all zeros: nothing computed yet?",
            ], problems
