"""The exercise checker passes a right answer and names what is wrong in a wrong one."""

from __future__ import annotations

import torch

from kernels import reference
from lecture_code.exercises.lora_linear import check_lora_linear


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
        s = ctx.scale
        u = dy @ b
        dx = dy @ w + s * u @ a
        da = (u.transpose(-1, -2) @ x) if ctx.slip == "dA without s" else s * (u.transpose(-1, -2) @ x)
        db = s * dy.transpose(-1, -2) @ t
        return dx, None, da, db, None, None, None


def _fn(slip=None):
    def fn(x, w, a, b, scale, bias=None):
        x2 = x.reshape(-1, x.shape[-1])
        y = _HandWritten.apply(x2, w, a, b, scale, bias, slip)
        return y.reshape(*x.shape[:-1], w.shape[0])

    return fn


def test_the_reference_passes(capsys):
    assert check_lora_linear(reference.lora_linear)
    assert "all cases pass" in capsys.readouterr().out


def test_a_hand_written_backward_passes():
    assert check_lora_linear(_fn())


def test_a_missing_scale_is_named(capsys):
    assert not check_lora_linear(_fn("dA without s"))
    out = capsys.readouterr().out
    assert "dA wrong by up to" in out and "the scale s is missing" in out
    assert "dX" not in out and "dB" not in out


def test_a_broken_output_and_a_detached_gradient_are_named(capsys):
    assert not check_lora_linear(
        lambda x, w, a, b, s, bias=None: reference.lora_linear(x, w, a, b, s, bias)[..., :-1]
    )
    assert "output shape" in capsys.readouterr().out
    detached = lambda x, w, a, b, s, bias=None: reference.lora_linear(x, w, a.detach(), b, s, bias)  # noqa: E731
    assert not check_lora_linear(detached)
    assert "dA is missing" in capsys.readouterr().out
    assert not check_lora_linear(lambda *args: 1 / 0)
    assert "raised ZeroDivisionError" in capsys.readouterr().out


def test_the_name_notebook_07_imports_is_the_same_checker():
    from lecture_code.lora import exercises

    assert exercises.check_lora_linear is check_lora_linear
