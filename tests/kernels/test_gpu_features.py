"""Which kernel path each GPU gets (kernels.gpu_features): device properties patched to stand in for GPUs
this machine does not have; on a real GPU, the non-Hopper choice forced and checked against the reference."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import kernels.gpu_features as gpu_features
import kernels.lora.gemm as lora_gemm
import kernels.lora.linear as lora_linear_module
from kernels import reference, runtime
from kernels.dlrm.embedding_tbe import embedding_tbe
from kernels.dlrm.tbe_inputs import table_offsets_for
from kernels.gpu_features import GpuFeatures, Needs, resident_programs, unmet
from kernels.launch import sm_count
from kernels.lora.linear import choose_version, lora_linear
from kernels.multi_lora import shrink_expand as multi_lora

KB = 1024
# (name, capability, SMs, shared memory per program, per SM): the values CUDA reports for these GPUs.
H100 = GpuFeatures("NVIDIA H100 80GB HBM3", (9, 0), 132, 227 * KB, 228 * KB)
A100 = GpuFeatures("NVIDIA A100-SXM4-80GB", (8, 0), 108, 163 * KB, 164 * KB)
L4 = GpuFeatures("NVIDIA L4", (8, 9), 58, 99 * KB, 100 * KB)
RTX_5090 = GpuFeatures("NVIDIA GeForce RTX 5090", (12, 0), 170, 99 * KB, 100 * KB, 1536)
T4 = GpuFeatures("Tesla T4", (7, 5), 40, 64 * KB, 64 * KB, 1024)
ONE_SM = dataclasses.replace(H100, name="an H100 slice of one SM", sm_count=1)
CUDA = torch.device("cuda", 0)


def _clear_caches():
    lora_linear_module.device_problems.cache_clear()
    lora_gemm.check_co_resident.cache_clear()
    multi_lora.forget_plans()


@pytest.fixture
def gpu(monkeypatch):
    """``gpu(features)``: every device reports ``features`` (CPU tensors included) until the test ends."""

    def use(f: GpuFeatures):
        monkeypatch.setattr(gpu_features, "features", lambda device: f)
        _clear_caches()

    yield use
    monkeypatch.undo()
    _clear_caches()


def _lora_inputs(M=24, K=32, N=40, r=4, dtype=torch.float16, device=None):
    device = device or runtime.default_device()
    x = torch.randn(M, K, device=device).to(dtype)
    w = (torch.randn(N, K, device=device) / K**0.5).to(dtype)
    a = (torch.randn(r, K, device=device) / K**0.5).to(dtype)
    b = torch.randn(N, r, device=device).to(dtype)
    return x, w, a, b


@pytest.mark.parametrize(
    "f, version",
    [
        pytest.param(H100, "v3", id="H100-sm90"),
        pytest.param(ONE_SM, "v2", id="one-SM-slice"),  # v3's producers and tiles cannot all be resident
        pytest.param(A100, "v1", id="A100-sm80"),
        pytest.param(L4, "v1", id="L4-sm89"),
        pytest.param(RTX_5090, "v1", id="RTX5090-sm120-99KB"),  # descriptors, but not the H100 tiles' smem
        pytest.param(T4, "v0", id="T4-sm75"),  # below Triton's floor: torch
    ],
)
def test_each_gpu_gets_its_version(gpu, f, version):
    gpu(f)
    x, w, _, b = _lora_inputs()
    assert choose_version(x, w, b) == (version, None)  # the device's choice is documented, not a warning


def test_a_version_the_gpu_cannot_run_raises_naming_what_it_lacks(gpu):
    x, w, _, b = _lora_inputs()
    gpu(A100)
    with pytest.raises(ValueError, match=r"version='v3' cannot run on this GPU: .* sm_90 .* is sm_80"):
        choose_version(x, w, b, "v3")
    assert choose_version(x, w, b, "v1") == ("v1", None)
    gpu(RTX_5090)
    with pytest.raises(ValueError, match="asks 216 KB of shared memory per program; .* offers 99 KB"):
        choose_version(x, w, b, "v3")
    gpu(T4)
    with pytest.raises(ValueError, match="'v1' cannot run on this GPU: .* sm_80 or newer; Tesla T4 is sm_75"):
        choose_version(x, w, b, "v1")
    assert choose_version(x, w, b, "v0") == ("v0", None)


def test_layout_fallback_still_warns_on_a_non_hopper_gpu(gpu):
    gpu(A100)
    x, w, _, b = _lora_inputs(K=17)  # rows of 34 bytes: no descriptor on any GPU
    version, why = choose_version(x, w, b)
    assert version == "v1" and "not a multiple of 8" in why


@pytest.mark.parametrize("f", [A100, L4], ids=["A100", "L4"])
def test_lora_linear_runs_the_chosen_path(gpu, f, seed, poison_empty):
    # Under the interpreter, an Ampere/Ada device patched in: v1 runs, and output and gradients are right.
    gpu(f)
    x, w, a, b = _lora_inputs()
    bias = torch.randn(w.shape[0], device=x.device).to(x.dtype)
    mine = [t.clone().requires_grad_() for t in (x, a, b)]
    y = lora_linear(mine[0], w, mine[1], mine[2], 0.5, bias)
    ref = [t.double().requires_grad_() for t in (x, a, b)]
    want = reference.lora_linear(ref[0], w.double(), ref[1], ref[2], 0.5, bias.double())
    torch.testing.assert_close(y.double(), want, atol=2e-2, rtol=1e-2)  # fp16 roundings of t, s·t and y
    grad = torch.randn_like(want)
    got = torch.autograd.grad(y, mine, grad.to(y.dtype))
    for g, e in zip(got, torch.autograd.grad(want, ref, grad), strict=True):
        torch.testing.assert_close(g.double(), e, atol=2e-2, rtol=1e-2)


def test_resident_programs_counts_what_fits():
    assert resident_programs(H100, 256, 216 * KB) == 132  # one v3 program per SM (worst-case registers)
    assert resident_programs(H100, 128, 32 * KB, regs_per_thread=64) == 132 * 7  # smem: 228 // 32
    assert resident_programs(H100, 256, 230 * KB) == 0  # more than one program may ask
    assert resident_programs(T4, 1024, 0, regs_per_thread=32) == 40


def test_unmet_names_the_first_missing_feature(gpu):
    needs = Needs("a test path", (9, 0), 100 * KB, threads=256, min_sms=2)
    gpu(H100)
    assert unmet(needs, CUDA) is None
    gpu(L4)
    assert "needs compute capability sm_90 or newer; NVIDIA L4 is sm_89" in unmet(needs, CUDA)
    gpu(ONE_SM)
    assert "needs 2 SMs resident at once" in unmet(needs, CUDA)
    assert sm_count(CUDA) == 1  # the kernels' SM count comes from the same helper


def test_off_cuda_every_path_runs():
    assert gpu_features.features(torch.device("cpu")) is None
    assert unmet(Needs("anything", (99, 0), 10**9, min_sms=10**6), torch.device("cpu")) is None


def test_fused_launch_refuses_a_grid_that_cannot_be_resident(gpu):
    gpu(dataclasses.replace(H100, sm_count=4))
    lora_gemm.check_co_resident(4, 256, CUDA)  # one program per SM: fine
    with pytest.raises(RuntimeError, match="5 programs whose tiles wait on producers, but only 4 fit"):
        lora_gemm.check_co_resident(5, 256, CUDA)
    # and the split the launcher uses never asks for more than there are SMs
    for sms in (2, 3, 4, 16, 132):
        programs, producers = lora_gemm.programs_split(1024, 64, sms, fused=True)
        assert programs + producers <= sms


def test_multi_lora_and_tbe_refuse_below_sm80(gpu):
    gpu(T4)
    with pytest.raises(RuntimeError, match="sm_80 or newer; Tesla T4 is sm_75.*kernels.reference.multi_lora"):
        multi_lora.plan(16, 64, (64,), 16, 2, torch.float16, CUDA)
    weight = torch.randn(10, 4)
    with pytest.raises(RuntimeError, match="sm_80 or newer.*kernels.reference.embedding_tbe"):
        embedding_tbe(weight, table_offsets_for([4, 6], weight.device), torch.zeros(3, 2, dtype=torch.long))
    gpu(L4)
    assert multi_lora.plan(16, 64, (64,), 16, 2, torch.float16, CUDA).path == multi_lora.DEFAULT_PATH


def _close(got, want, tol, name):
    """|got − want| ≤ tol · (max |want| + |want|): bf16 roundings scale with the largest term of a sum."""
    err = (got.double() - want).abs()
    assert (err <= tol * (want.abs().max() + want.abs())).all(), f"{name}: max error {err.max().item():.3g}"


@pytest.mark.gpu
def test_non_hopper_choice_on_this_gpu_matches_reference(monkeypatch, seed):
    # The real device, reported as sm_80: LoRA takes v1, multi-LoRA and TBE their Triton kernels; all right.
    real = gpu_features._cuda_features(torch.cuda.current_device())
    monkeypatch.setattr(gpu_features, "features", lambda device: dataclasses.replace(real, capability=(8, 0)))
    _clear_caches()
    try:
        x, w, a, b = _lora_inputs(M=512, K=256, N=384, r=16, dtype=torch.bfloat16)
        assert choose_version(x, w, b) == ("v1", None)
        mine = [t.clone().requires_grad_() for t in (x, a, b)]
        y = lora_linear(mine[0], w, mine[1], mine[2], 0.5)
        ref = [t.double().requires_grad_() for t in (x, a, b)]
        want = reference.lora_linear(ref[0], w.double(), ref[1], ref[2], 0.5)
        _close(y, want, 3e-2, "y")  # bf16: a few ulps (2^-7) of the largest term
        grad = torch.randn_like(want)
        got = torch.autograd.grad(y, mine, grad.to(y.dtype))
        for name, g, e in zip("XAB", got, torch.autograd.grad(want, ref, grad), strict=True):
            _close(g, e, 3e-2, f"d{name}")

        T, K, N, L, r = 64, 128, 96, 3, 16
        xs = torch.randn(T, K, device=x.device, dtype=torch.bfloat16)
        ys = torch.randn(T, N, device=x.device, dtype=torch.bfloat16)
        la = torch.randn(L, r, K, device=x.device, dtype=torch.bfloat16) / K**0.5
        lb = torch.randn(L, N, r, device=x.device, dtype=torch.bfloat16)
        ids = torch.randint(-1, L, (T,), device=x.device)
        want_ml = reference.multi_lora(ys.double(), xs.double(), la.double(), lb.double(), ids, 0.5)
        got_ml = multi_lora.add_multi_lora(ys.clone(), xs, la, lb, ids, 0.5)
        _close(got_ml, want_ml, 3e-2, "multi-LoRA y")

        weight = torch.randn(10, 8, device=x.device)
        ids_tbe = torch.randint(0, 4, (5, 2), device=x.device)
        offsets = table_offsets_for([4, 6], x.device)
        want_tbe = reference.embedding_tbe(weight, offsets, ids_tbe)
        torch.testing.assert_close(embedding_tbe(weight, offsets, ids_tbe), want_tbe)
    finally:
        monkeypatch.undo()
        _clear_caches()
