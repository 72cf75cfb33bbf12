"""inductor_triton_on_cpu: real Triton kernels from torch.compile on a CPU.

On a CPU with a (torch, triton) pair in ``KNOWN_TO_WORK`` (the pinned CI stack, torch 2.13 + triton 3.9)
Triton *must* come out: these tests fail if it turns into C++. On other pairs, C++ with a reason is accepted.
"""

from __future__ import annotations

import os

import pytest
import torch
import triton
import triton.language as tl
from compile_test_models import bce_loss, eager_grads

from kernels.runtime import interpreting
from lecture_code.compile import capture_compiled_code, find_kernels
from lecture_code.internals import KNOWN_TO_WORK
from lecture_code.triton_cpu import inductor_on_cpu as triton_on_cpu
from lecture_code.triton_cpu.inductor_on_cpu import (
    LIBDEVICE_SHIM,
    inductor_triton_on_cpu,
    run_with_triton_on_cpu,
    triton_on_cpu_available,
)

libdevice = LIBDEVICE_SHIM  # what generated kernels see under inductor_triton_on_cpu


@triton.jit
def shim_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    mask = i < n
    x = tl.load(x_ptr + i, mask=mask)
    y = tl.load(y_ptr + i, mask=mask)
    tl.store(out_ptr + 0 * n + i, libdevice.tanh(x), mask=mask)
    tl.store(out_ptr + 1 * n + i, libdevice.log1p(tl.abs(x)), mask=mask)
    tl.store(out_ptr + 2 * n + i, libdevice.expm1(x), mask=mask)
    tl.store(out_ptr + 3 * n + i, libdevice.pow(x, y), mask=mask)
    tl.store(out_ptr + 4 * n + i, libdevice.floor(x * 3.0), mask=mask)
    tl.store(out_ptr + 5 * n + i, libdevice.trunc(x * 3.0), mask=mask)
    tl.store(out_ptr + 6 * n + i, libdevice.nearbyint(x * 3.0), mask=mask)
    tl.store(out_ptr + 7 * n + i, libdevice.fmod(x * 7.0, y + 1.5), mask=mask)


# On the pinned CPU stack Triton must come out; only other versions may fall back to C++.
MUST_WRITE_TRITON = triton_on_cpu.triton_on_cpu_expected()

cpu_only = pytest.mark.skipif(
    torch.cuda.is_available(),
    reason="Triton-on-CPU is for machines without a GPU; on a GPU inductor writes Triton for cuda tensors",
)


def _state():
    from torch._inductor import config
    from torch._inductor.runtime import triton_helpers

    return (
        os.environ.get("TRITON_INTERPRET"),
        config.cpu_backend,
        config.compile_threads,
        getattr(triton.runtime.driver, "_active", None),
        getattr(triton_helpers, "libdevice", None),
        {name: id(value) for name, value in vars(tl.core).items()},
    )


def test_context_sets_up_and_restores_everything():
    before = _state()
    with inductor_triton_on_cpu() as status:
        from torch._inductor import config
        from torch._inductor.runtime import triton_helpers

        if status.active:
            assert config.cpu_backend == "triton" and os.environ["TRITON_INTERPRET"] == "1"
            assert getattr(triton_helpers, "libdevice", LIBDEVICE_SHIM) is LIBDEVICE_SHIM
            if not torch.cuda.is_available():
                target = triton.runtime.driver.active.get_current_target()
                assert (target.backend, target.arch) == ("cuda", 90)
        else:
            assert status.reason
    assert _state() == before


def test_setup_refusal_falls_back_with_a_reason(monkeypatch):
    def refuse(*args, **kwargs):
        raise RuntimeError("this triton has no DriverBase")

    monkeypatch.setattr(triton_on_cpu, "make_stub_driver", refuse)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with inductor_triton_on_cpu() as status:
        from torch._inductor import config

        assert not status.active and config.cpu_backend == "cpp"
    assert "no DriverBase" in status.reason and "C++" in str(status)


def test_failure_on_a_known_pair_is_an_error(monkeypatch):
    monkeypatch.setattr(triton_on_cpu, "triton_on_cpu_expected", lambda: True)

    def broken():
        raise NotImplementedError("libdevice.j0 has no CPU-interpreter shim")

    with pytest.raises(triton_on_cpu.TritonOnCpuError, match="where it must work.*j0"):
        run_with_triton_on_cpu(broken)


def test_ci_runs_a_known_pair():
    """CI (CPU, torch 2.13 + triton 3.9) runs the strict checks: a version bump that leaves the pair out of
    ``KNOWN_TO_WORK`` fails here instead of letting every Triton-on-CPU test accept C++."""
    if os.environ.get("CI") and not torch.cuda.is_available():
        assert MUST_WRITE_TRITON, triton_on_cpu.describe_versions()
    assert ((2, 13), (3, 9)) in KNOWN_TO_WORK  # (torch, triton) as (major, minor)


def test_failure_inside_the_block_reruns_with_cpp_on_other_versions(monkeypatch):
    from torch._inductor import config

    monkeypatch.setattr(triton_on_cpu, "triton_on_cpu_expected", lambda: False)

    seen = []

    def compile_like():
        seen.append(config.cpu_backend)
        if config.cpu_backend == "triton":
            raise NotImplementedError("libdevice.j0 has no CPU-interpreter shim")
        return "c++ code"

    result, status = run_with_triton_on_cpu(compile_like)
    assert result == "c++ code" and status.backend == "cpp"
    assert "j0" in status.reason
    assert seen[-1] == "cpp"


@pytest.mark.skipif(not interpreting(), reason="the shim runs inside the Triton interpreter only")
@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # numpy evaluates both sides of every tl.where
def test_libdevice_shim_matches_torch(seed):
    n = 37
    x = torch.randn(n) * 2
    x[:4] = torch.tensor([0.5, -0.5, 1.5 / 3, -2.5 / 3])  # ties for nearbyint (after * 3)
    y = torch.randint(-3, 4, (n,)).float()  # integer exponents: pow of negative bases is defined
    out = torch.full((8, n), float("nan"))
    shim_kernel[(1,)](x, y, out, n, BLOCK=64)
    expected = torch.stack(
        [
            torch.tanh(x),
            torch.log1p(x.abs()),
            torch.expm1(x),
            torch.pow(x, y),
            torch.floor(x * 3),
            torch.trunc(x * 3),
            torch.round(x * 3),  # round half to even, like rint
            torch.fmod(x * 7, y + 1.5),
        ]
    )
    # exp/log-based formulas: a few ulps of float32
    torch.testing.assert_close(out, expected, rtol=2e-5, atol=2e-6, equal_nan=True)


def test_libdevice_shim_names_what_it_lacks():
    with pytest.raises(NotImplementedError, match="libdevice.cyl_bessel_i0 has no CPU-interpreter shim"):
        LIBDEVICE_SHIM.cyl_bessel_i0  # noqa: B018


@cpu_only
def test_triton_on_cpu_available_says_why():
    ok, reason = triton_on_cpu_available()
    assert reason
    if MUST_WRITE_TRITON:
        assert ok, reason


@cpu_only
def test_mlp_gives_real_triton_or_cpp_with_a_reason(mlp):
    model, x = mlp
    code = capture_compiled_code(model, x, triton_on_cpu=True)
    relu = find_kernels(code, contains="relu")
    assert relu, code.summary()
    if MUST_WRITE_TRITON:
        assert code.backend == "triton", code.fallback_reason
    if code.backend == "triton":
        assert not code.fallback_reason
        assert all("@triton.jit" in k.source for k in code.kernels)
        assert relu[0].name.startswith("triton_") and "tl.load" in relu[0].body
    else:
        assert code.fallback_reason, "fell back to C++ without saying why"
        assert relu[0].language == "cpp"
    with torch.no_grad():
        torch.testing.assert_close(code.result, model(x))


@cpu_only
def test_dlrm_train_step_in_triton_matches_eager(tiny_dlrm):
    model, dense, sparse, labels = tiny_dlrm
    loss_fn = bce_loss(labels)
    code = capture_compiled_code(model, dense, sparse, backward=True, loss_fn=loss_fn, triton_on_cpu=True)
    assert code.graphs == ["forward", "backward"], code.summary()
    if MUST_WRITE_TRITON:
        assert code.backend == "triton", code.fallback_reason
    assert code.backend == "triton" or code.fallback_reason
    assert find_kernels(code, contains="relu", graph="forward")
    expected_loss = loss_fn(model(dense, sparse))
    torch.testing.assert_close(code.result, expected_loss.detach())
    for name, grad in eager_grads(model, expected_loss).items():
        # fp32 sums in another order: a few ulps of values up to order 1
        torch.testing.assert_close(code.grads[name], grad, rtol=1e-4, atol=1e-5, msg=name)
