"""The GEMM build-up (kernels/gemm): every step against torch.mm on fresh random inputs, the low-rank epilogue
against its reference, the tile order the kernels use, and the argument checks.

CPU: the interpreter, fp32 and fp16, small shapes none of whose sides is a multiple of any block (16 to 256),
32-wide tiles so that every shape has several tiles with tails; the output is poisoned (NaN) before the kernel
runs, so an unwritten tile fails. GPU-marked: bf16 at a larger odd shape with the default (Hopper) tiles.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
import triton
import triton.language as tl

import kernels.gpu_features as gpu_features
from kernels import reference, runtime
from kernels.gemm.descriptors import descriptors_unmet, matmul_descriptors
from kernels.gemm.grouped import grouped_tile, matmul_grouped, tile_order, wave_footprint
from kernels.gemm.lowrank_epilogue import MAX_RANK, matmul_lowrank
from kernels.gemm.persistent import matmul_persistent
from kernels.gemm.tiled import matmul_tiled
from kernels.gemm.tiles import CPU_PROGRAMS, Tiles, persistent_programs
from kernels.gpu_features import GpuFeatures

# dtype → (atol, rtol) against the float64 product, with why
TOLERANCES = {
    torch.float32: (1e-4, 1e-5),  # fp32 sums of ≤ 40 products of N(0, 1) numbers: a few ulps of values ~10
    torch.float16: (1e-3, 1e-3),  # fp32 accumulator rounded once to fp16: ≤ half an ulp (2^-11 relative)
    torch.bfloat16: (1e-2, 8e-3),  # the same, in bf16 (2^-8 relative)
}
# the low-rank term: against the kernel's own roundings (_lowrank_as_stored), a few more ulps than one GEMM
LOWRANK_TOLERANCES = {**TOLERANCES, torch.float16: (4e-3, 2e-3), torch.bfloat16: (3e-2, 2e-2)}
SMALL = Tiles(32, 32, 32, group_m=2, num_warps=4, num_stages=1)
POINTER_STEPS = [matmul_tiled, matmul_grouped, matmul_persistent]
ALL_STEPS = [*POINTER_STEPS, matmul_descriptors]
# M, K, N: 70 rows = 3 row blocks of 32 (a short last group of GROUP_M = 2); K = 40 and N = 56 leave tails of
# 8 and 24 and keep rows 16-byte aligned in fp16 (the descriptors' rule); 33 × 19 × 45: every side odd.
DESCRIPTOR_SHAPE = (70, 40, 56)
ODD_SHAPE = (33, 19, 45)


@pytest.fixture
def on_kernel_device():
    """Factory calls in the test (torch.randn, torch.empty, …) make tensors where the kernels run: the CPU
    under the interpreter, the GPU on a GPU machine (where CPU tensors are refused before anything else)."""
    with runtime.default_device():
        yield


def _poisoned(M, N, dtype, device):
    return torch.empty(M, N, dtype=dtype, device=device).fill_(float("nan"))


def _expected(a, b):
    return reference.matmul(a.double(), b.double())


def _lowrank_as_stored(x, w_t, lora_a, lora_b, scale):
    """``reference.matmul_lowrank`` in float64, with t = x Aᵀ and then s·t rounded to the input dtype, as the
    kernel stores them between its two dots (and as torch stores x Aᵀ). Without those roundings bf16 misses
    by ~5 standard deviations of t's rounding at 800k outputs: 0.084 at K = 520, r = 16, s = 2 (an H100)."""
    t = (x.double() @ lora_a.double().t()).to(x.dtype)
    ts = (t.double() * scale).to(x.dtype)
    return reference.matmul(x.double(), w_t.double()) + ts.double() @ lora_b.double().t()


def _ulp_where_ambiguous(exact, sum_error, dtype):
    """One ulp of ``dtype`` at each value of ``exact`` (float64) that lies within ``sum_error`` of a rounding
    boundary of ``dtype`` (the midpoint of two neighbours): an fp32 sum in another order may round it to the
    other neighbour. 0 elsewhere."""
    ulp = torch.finfo(dtype).eps * torch.exp2(torch.floor(torch.log2(exact.abs().clamp_min(1e-30))))
    from_midpoint = ((exact - exact.to(dtype).double()).abs() - ulp / 2).abs()
    return torch.where(from_midpoint <= sum_error, ulp, torch.zeros_like(exact))


def _rounding_slack(x, lora_a, lora_b, scale):
    """Per output, how far the kernel may sit from :func:`_lowrank_as_stored` and still be right: where
    t = x Aᵀ (or s·t) lies so near a rounding boundary that the kernel's fp32 sum, in another order than
    float64's, rounds it the other way, that element's ulp times s·|B| (or |B|). Seen on an H200: 7 of
    804,712 bf16 outputs off by up to 0.074 at K = 520, r = 16, s = 2. The sum's error is taken as 4·√K
    fp32 roundings of Σ|x·a| (a typical, not the worst, case); elsewhere the slack is 0."""
    t = x.double() @ lora_a.double().t()
    sum_error = 4 * x.shape[1] ** 0.5 * 2.0**-24 * (x.double().abs() @ lora_a.double().abs().t())
    ts = t.to(x.dtype).double() * scale
    b = lora_b.double().abs().t()
    return (scale * _ulp_where_ambiguous(t, sum_error, x.dtype) @ b
            + _ulp_where_ambiguous(ts, scale * sum_error, x.dtype) @ b)  # fmt: skip


def _assert_matches(got, want, dtype, tolerances=TOLERANCES, slack=None):
    """``got`` within (atol, rtol) of ``want``, plus ``slack`` per element where given."""
    atol, rtol = tolerances[dtype]
    assert not got.isnan().any(), f"{int(got.isnan().sum())} elements never written"
    if slack is None:
        torch.testing.assert_close(got.double(), want, atol=atol, rtol=rtol)
        return
    error = (got.double() - want).abs()
    bad = error > atol + rtol * want.abs() + slack
    assert not bad.any(), (
        f"{int(bad.sum())} of {bad.numel()} elements off, the first at {bad.nonzero()[0].tolist()}: "
        f"|error| {error[bad][0].item():.3g} > {atol} + {rtol}·|want| + slack {slack[bad][0].item():.3g}"
    )


def _step_id(fn):
    return fn.__name__


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
@pytest.mark.parametrize("step", ALL_STEPS, ids=_step_id)
def test_each_step_matches_torch_mm(step, dtype, seed):
    device = runtime.default_device()
    M, K, N = DESCRIPTOR_SHAPE
    a, b = torch.randn(M, K, device=device).to(dtype), torch.randn(K, N, device=device).to(dtype)
    out = _poisoned(M, N, dtype, device)
    got = step(a, b, out=out, tiles=SMALL)
    assert got.data_ptr() == out.data_ptr()
    _assert_matches(got, _expected(a, b), dtype)


@pytest.mark.parametrize("step", POINTER_STEPS, ids=_step_id)
def test_pointer_steps_take_odd_sides_and_any_strides(step, seed, poison_empty):
    device = runtime.default_device()
    M, K, N = ODD_SHAPE
    a = torch.randn(K, M, device=device).t()  # a transposed view: strides (1, M)
    b = torch.randn(K, 2 * N, device=device)[:, ::2]  # every other column: strides (2N, 2)
    _assert_matches(step(a, b, tiles=SMALL), _expected(a, b), torch.float32)


@pytest.mark.parametrize("step", [matmul_persistent, matmul_descriptors], ids=_step_id)
@pytest.mark.parametrize("programs", [1, 3, 7])
def test_persistent_programs_cover_every_tile(step, programs, seed):
    # 3 × 2 = 6 tiles: one program takes all, 3 take two each, 7 (one more than tiles) leave one idle
    device = runtime.default_device()
    M, K, N = DESCRIPTOR_SHAPE
    a, b = torch.randn(M, K, device=device), torch.randn(K, N, device=device)
    out = _poisoned(M, N, torch.float32, device)
    _assert_matches(step(a, b, out=out, tiles=SMALL, programs=programs), _expected(a, b), torch.float32)


def test_descriptors_take_a_k_major_b(seed):
    # nn.Linear's weight W [N, K] used as b = Wᵀ: the descriptor describes W as stored
    device = runtime.default_device()
    M, K, N = DESCRIPTOR_SHAPE
    x, w = torch.randn(M, K, device=device), torch.randn(N, K, device=device)
    got = matmul_descriptors(x, w.t(), out=_poisoned(M, N, torch.float32, device), tiles=SMALL)
    _assert_matches(got, _expected(x, w.t()), torch.float32)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
def test_lowrank_epilogue_matches_its_reference(dtype, seed):
    device = runtime.default_device()
    (M, K, N), r, s = DESCRIPTOR_SHAPE, 3, 0.7
    x = torch.randn(M, K, device=device).to(dtype)
    w = (torch.randn(N, K, device=device) / K**0.5).to(dtype)
    lora_a = (torch.randn(r, K, device=device) / K**0.5).to(dtype)
    lora_b = torch.randn(r, N, device=device).to(dtype).t()  # [N, r], not contiguous
    out = _poisoned(M, N, dtype, device)
    got = matmul_lowrank(x, w.t(), lora_a, lora_b, s, out=out, tiles=SMALL, programs=2)
    want = _lowrank_as_stored(x, w.t(), lora_a, lora_b, s)
    _assert_matches(got, want, dtype, LOWRANK_TOLERANCES, _rounding_slack(x, lora_a, lora_b, s))
    # the low-rank term is really there: without it the answer is off by far more than the tolerance
    assert (want - _expected(x, w.t())).abs().max() > 10 * LOWRANK_TOLERANCES[dtype][0]


@triton.jit
def _tile_of_kernel(pm_ptr, pn_ptr, num_pid_m, num_pid_n, GROUP_M: tl.constexpr):
    tile = tl.program_id(0)
    pid_m, pid_n = grouped_tile(tile, num_pid_m, num_pid_n, GROUP_M)
    tl.store(pm_ptr + tile, pid_m)
    tl.store(pn_ptr + tile, pid_n)


@pytest.mark.parametrize("num_pid_m, num_pid_n, group_m", [(5, 3, 2), (4, 4, 8), (7, 2, 1)])
def test_tile_order_is_the_kernels_and_a_permutation(num_pid_m, num_pid_n, group_m):
    device = runtime.default_device()
    pm = torch.empty(num_pid_m * num_pid_n, dtype=torch.int32, device=device)
    pn = torch.empty_like(pm)
    _tile_of_kernel[(pm.numel(),)](pm, pn, num_pid_m, num_pid_n, GROUP_M=group_m)
    order = tile_order(num_pid_m, num_pid_n, group_m)
    assert list(zip(pm.tolist(), pn.tolist(), strict=True)) == order
    assert sorted(order) == [(m, n) for m in range(num_pid_m) for n in range(num_pid_n)]
    assert tile_order(2, 3, None) == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]


def test_a_grouped_wave_reads_fewer_blocks():
    t = Tiles(128, 256, 64, group_m=8)
    rows = wave_footprint(8192, 8192, 8192, t, 132, grouped=False)
    grouped = wave_footprint(8192, 8192, 8192, t, 132, grouped=True)
    assert rows["B column blocks"] == 32 and rows["A row blocks"] == 5  # all of B, 5 row blocks
    assert grouped["A row blocks"] == 8 and grouped["B column blocks"] == 17
    assert grouped["MB, each block once"] < rows["MB, each block once"] < rows["MB, no reuse"]
    assert rows["MB, each block once"] == (5 * 128 + 32 * 256) * 8192 * 2 / 1e6


def test_persistent_programs_counts():
    cpu = torch.device("cpu")
    assert persistent_programs(64, 64, SMALL, cpu) == CPU_PROGRAMS  # 4 tiles
    assert persistent_programs(32, 32, SMALL, cpu) == 1  # 1 tile: never more programs than tiles


def test_descriptor_steps_need_sm90(monkeypatch, on_kernel_device):
    a100 = GpuFeatures("NVIDIA A100-SXM4-80GB", (8, 0), 108, 163 * 1024, 164 * 1024)
    monkeypatch.setattr(gpu_features, "features", lambda device: a100)
    assert "sm_90" in descriptors_unmet(torch.device("cuda", 0))
    x = torch.randn(32, 32)
    with pytest.raises(RuntimeError, match="needs compute capability sm_90 or newer; NVIDIA A100"):
        matmul_descriptors(x, x)
    with pytest.raises(RuntimeError, match="sm_90"):
        matmul_lowrank(x, x, torch.randn(2, 32), torch.randn(32, 2), 1.0)
    h100 = dataclasses.replace(a100, name="H100", capability=(9, 0))
    monkeypatch.setattr(gpu_features, "features", lambda device: h100)
    assert descriptors_unmet(torch.device("cuda", 0)) is None


@pytest.mark.parametrize("step", [*ALL_STEPS], ids=_step_id)
def test_bad_operands_name_the_argument(step, on_kernel_device):
    x = torch.randn(8, 16)
    name = step.__name__
    with pytest.raises(ValueError, match=rf"{name}: b has 8 rows, expected 16 \(a's columns"):
        step(x, torch.randn(8, 16))
    with pytest.raises(ValueError, match=rf"{name}: a must be 2-D \[M, K\], got shape \(16,\)"):
        step(torch.randn(16), x)
    with pytest.raises(TypeError, match=rf"{name}: b has dtype torch.float16 but a has torch.float32"):
        step(x, torch.randn(16, 8).half())
    with pytest.raises(TypeError, match=rf"{name}: b must be a torch.Tensor, got list"):
        step(x, [[1.0]])
    with pytest.raises(ValueError, match=rf"{name}: out has shape \(8, 9\), expected \[M, N\] = \(8, 8\)"):
        step(x, torch.randn(16, 8), out=torch.empty(8, 9))
    with pytest.raises(TypeError, match=rf"{name}: out has dtype torch.float16, expected a's dtype"):
        step(x, torch.randn(16, 8), out=torch.empty(8, 8, dtype=torch.float16))
    buf = torch.randn(8, 16)
    with pytest.raises(ValueError, match=rf"{name}: out .* overlaps a"):
        step(buf, torch.randn(16, 8), out=buf[:, :8])
    with pytest.raises(ValueError, match="Tiles: block_m must be a power of two from 16 to 256"):
        step(x, torch.randn(16, 8), tiles=Tiles(48, 32, 32))


def test_descriptor_layouts_are_checked(on_kernel_device):
    a = torch.randn(20, 16)
    with pytest.raises(ValueError, match=r"a needs a unit last stride, got strides \(1, 20\)"):
        matmul_descriptors(torch.randn(16, 20).t(), torch.randn(16, 8))
    with pytest.raises(ValueError, match=r"b's row stride must be a multiple of 16 bytes, got 7 elements"):
        matmul_descriptors(a, torch.randn(16, 7))
    with pytest.raises(ValueError, match=r"b.t\(\) needs a unit last stride"):
        matmul_descriptors(a, torch.randn(32, 16)[::2, ::2])  # strides (32, 2): neither layout


def test_lowrank_checks_its_factors(on_kernel_device):
    x, w = torch.randn(8, 16), torch.randn(16, 8)
    with pytest.raises(ValueError, match=r"lora_a must be \[r, K\] with K = 16 .*got shape \(2, 15\)"):
        matmul_lowrank(x, w, torch.randn(2, 15), torch.randn(8, 2), 1.0)
    with pytest.raises(ValueError, match=r"lora_b must be \[N, r\] = \(8, 2\) .*got shape \(2, 8\)"):
        matmul_lowrank(x, w, torch.randn(2, 16), torch.randn(2, 8), 1.0)
    r = MAX_RANK + 1
    with pytest.raises(ValueError, match=rf"rank r .* from 1 to {MAX_RANK}, got {r}"):
        matmul_lowrank(x, w, torch.randn(r, 16), torch.randn(8, r), 1.0)
    with pytest.raises(TypeError, match="lora_b has dtype torch.float16 but a has torch.float32"):
        matmul_lowrank(x, w, torch.randn(2, 16), torch.randn(8, 2).half(), 1.0)
    with pytest.raises(TypeError, match="scale must be a Python float, got Tensor"):
        matmul_lowrank(x, w, torch.randn(2, 16), torch.randn(8, 2), torch.tensor(1.0))


def test_empty_sides(on_kernel_device):
    a, b = torch.randn(0, 16), torch.randn(16, 8)
    assert matmul_tiled(a, b).shape == (0, 8)
    got = matmul_persistent(torch.randn(4, 0), torch.randn(0, 8))
    assert torch.equal(got, torch.zeros(4, 8))


# --- GPU: bf16 with the default (Hopper) tiles, outputs on the GPU ---

GPU_SHAPE = (1037, 520, 776)  # K and N multiples of 8 (descriptors), no side a multiple of 16 … 256


@pytest.mark.gpu
@pytest.mark.parametrize("step", ALL_STEPS, ids=_step_id)
def test_each_step_bf16_on_gpu(step, seed):
    if step is matmul_descriptors and descriptors_unmet(torch.device("cuda")):
        pytest.skip(descriptors_unmet(torch.device("cuda")))
    M, K, N = GPU_SHAPE
    a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16)
    out = _poisoned(M, N, torch.bfloat16, torch.device("cuda"))
    got = step(a, w.t(), out=out)
    assert got.device.type == "cuda"
    _assert_matches(got, _expected(a, w.t()), torch.bfloat16)


@pytest.mark.gpu
def test_lowrank_bf16_on_gpu(seed):
    device = torch.device("cuda")
    if descriptors_unmet(device):
        pytest.skip(descriptors_unmet(device))
    (M, K, N), r = GPU_SHAPE, 16
    x = torch.randn(M, K, device=device, dtype=torch.bfloat16)
    w = (torch.randn(N, K, device=device) / K**0.5).to(torch.bfloat16)
    lora_a = (torch.randn(r, K, device=device) / K**0.5).to(torch.bfloat16)
    lora_b = torch.randn(N, r, device=device, dtype=torch.bfloat16)
    got = matmul_lowrank(x, w.t(), lora_a, lora_b, 2.0, out=_poisoned(M, N, torch.bfloat16, device))
    assert got.device.type == "cuda"
    want = _lowrank_as_stored(x, w.t(), lora_a, lora_b, 2.0)
    _assert_matches(got, want, torch.bfloat16, LOWRANK_TOLERANCES, _rounding_slack(x, lora_a, lora_b, 2.0))
