"""lora_linear (every version of the ladder) against a float64 reference: output, dX, dA, dB."""

from __future__ import annotations

import functools
import warnings

import pytest
import torch

import kernels.lora.gemm as lora_gemm_module
import kernels.lora.linear as lora_module
import kernels.lora.small_m as small_m_module
from kernels import reference, runtime
from kernels.configs import BranchConfig, GemmConfig
from kernels.launch import dot_block
from kernels.library import encode_config
from kernels.lora.linear import SMALL, VERSIONS, choose_version, lora_linear

# (dtype, tol). Checked elementwise as |got - want| ≤ tol · (max|want| + |want|) against float64: the kernels
# and eager torch both round t = x Aᵀ, s·t and the output to the dtype and accumulate dots in fp32, so the
# error is a few ulps of the largest term of each sum.
DTYPES = [
    pytest.param(torch.float32, 2e-5, id="fp32"),  # fp32 (ieee dots) summation order only
    pytest.param(torch.float16, 4e-3, id="fp16"),  # a few fp16 ulps (2^-10) of roundings at t, s·t, y
    pytest.param(torch.bfloat16, 3e-2, id="bf16", marks=pytest.mark.gpu),  # the same in bf16 (2^-7 ulp)
]
SHAPES = [  # (M, K, N, r); K and N multiples of 8, so every version's fast path runs
    pytest.param((32, 64, 48, 16), id="nice"),
    pytest.param((17, 24, 40, 3), id="odd"),  # M, N not multiples of any tile, r = 3 padded to 16
    pytest.param((1, 16, 8, 1), id="tiny"),
]
SCALE = 0.75


def _inputs(M, K, N, r, dtype, bias=True, device=None):
    """nn.Linear-like weights (activations stay O(1) whatever K and r); B nonzero (unlike LoRA's init)."""
    device = device or runtime.default_device()
    x = torch.randn(M, K, device=device).to(dtype)
    w = (torch.randn(N, K, device=device) / K**0.5).to(dtype)
    a = (torch.randn(r, K, device=device) / K**0.5).to(dtype)
    b = (torch.randn(N, r, device=device) / r**0.5).to(dtype)
    b0 = torch.randn(N, device=device).to(dtype) if bias else None
    return x, w, a, b, b0


def _close(got, want, tol, name, rms=None):
    """``|got − want| ≤ tol · (max |want| + |want|) + 8 eps · rms`` elementwise. ``rms``: √(Σ term²) of the
    sum behind each element. Its terms are products of values rounded to the dtype before the fp32 sum (s·dY,
    t = x Aᵀ), each off by up to half an ulp in a random direction, so their errors add up to a few eps · rms;
    when the sum cancels (dA at M = 1, r = 1: dY B over 8 columns) that is large next to the result, and a
    bound on |want| alone fails for a right answer."""
    assert got.shape == want.shape, f"{name}: shape {tuple(got.shape)} != {tuple(want.shape)}"
    assert torch.isfinite(got).all(), f"{name}: non-finite values (unwritten or wrong elements)"
    err = (got.double() - want).abs()
    bound = tol * (want.abs().max() + want.abs())
    if rms is not None:
        bound = bound + 8 * torch.finfo(got.dtype).eps * rms
    assert (err <= bound).all(), f"{name}: max error {err.max().item():.3g}, bound {bound.min().item():.3g}"


def _check(x, w, a, b, b0, tol, version=None, scale=SCALE, **kw):
    """lora_linear's output and dX, dA, dB against the float64 reference, on a fresh upstream gradient."""
    mine = [t.detach().clone().requires_grad_() for t in (x, a, b)]
    y = lora_linear(mine[0], w, mine[1], mine[2], scale, b0, version=version, **kw)
    ref = [t.detach().double().requires_grad_() for t in (x, a, b)]
    expected = reference.lora_linear(
        ref[0], w.double(), ref[1], ref[2], scale, None if b0 is None else b0.double()
    )
    assert y.dtype == x.dtype
    _close(y, expected, tol, "y")
    grad = torch.randn_like(expected)
    got = torch.autograd.grad(y, mine, grad.to(y.dtype))
    want = torch.autograd.grad(expected, ref, grad)
    # Σ term² of each gradient's sums: the same products of squares (every term is a product of inputs)
    squared = [t.detach().double().square().requires_grad_() for t in (x, a, b)]
    y_sq = reference.lora_linear(squared[0], w.double().square(), squared[1], squared[2], scale**2, None)
    sums_of_squares = torch.autograd.grad(y_sq, squared, grad.square())
    for name, g, e, ss in zip(("dX", "dA", "dB"), got, want, sums_of_squares, strict=True):
        assert g.dtype == x.dtype, name
        _close(g, e, tol, name, ss.sqrt())
    return y


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype, tol", DTYPES)
def test_every_version_matches_reference(version, shape, dtype, tol, seed, poison_empty):
    _check(*_inputs(*shape, dtype), tol, version=version)


@pytest.mark.parametrize("order", ["rows", "grouped"])
@pytest.mark.parametrize("dtype, tol", DTYPES)
def test_persistent_programs_share_tiles(order, dtype, tol, seed, poison_empty, monkeypatch):
    # As on a GPU with 3 SMs: one producer computes s·x Aᵀ for the 3 row blocks, two programs walk the 3 × 9
    # tiles of 16 × 16 (rows order: runs of 4 N-tiles; grouped: one by one), each reading its row block's s·t.
    # In the backward the producer then computes dB = dYᵀ(s·t) too, in column strips of dY (2 to 3 here).
    monkeypatch.setattr(lora_gemm_module, "sm_count", lambda device: 3)
    monkeypatch.setattr(lora_module, "fused_dx_pays", lambda M, K, device: True)  # a GPU would take cuBLAS
    launches = []
    launch = lora_gemm_module._launch
    monkeypatch.setattr(
        lora_gemm_module,
        "_launch",
        lambda grid, args, ce, *rest: launches.append((grid, dict(ce))) or launch(grid, args, ce, *rest),
    )
    config = GemmConfig(block_m=16, block_n=16, block_k=16, group_m=2, order=order)
    _check(*_inputs(45, 32, 136, 5, dtype), tol, version="v3", fwd_config=config, bwd_config=config)
    # the forward and the backward's dX: both with the shrink fused, 1 producer + 2 tile programs; the
    # backward's producer makes dB as well
    assert [(grid, ce["SHRINK"], ce["SHRINK_PROGRAMS"], ce["PRODUCE_D"]) for grid, ce in launches] == [
        ((3,), True, 1, False),
        ((3,), True, 1, True),
    ]


@pytest.mark.parametrize("dtype, tol", DTYPES)
def test_producers_compute_d(dtype, tol, seed, poison_empty):
    # lowrank_gemm's third product D = Pᵀ·G by the producers, beside out and Tₛ, against float64; D's column
    # strips end mid-strip (C = 200), its rows mid-block (M = 45), r = 3 is padded to 16.
    from kernels.lora.gemm import gemm_rule, lowrank_gemm

    device = runtime.default_device()
    p, q = torch.randn(45, 200, device=device).to(dtype), torch.randn(200, 24, device=device).to(dtype)
    lt, e, g = (torch.randn(*s, device=device).to(dtype) for s in ((3, 200), (3, 24), (45, 3)))
    config = gemm_rule(45, 24, 200, 3, dtype, 1)
    out, ts, d = lowrank_gemm(p, q, False, lt.t(), e, 0.5, config, g=g)
    _close(d, p.double().t() @ g.double(), tol, "D")
    _close(ts, 0.5 * (p.double() @ lt.t().double()), tol, "Tₛ")
    _close(out, p.double() @ q.double() + ts.double() @ e.double(), tol, "out")
    assert torch.equal(lowrank_gemm(p, q, False, lt.t(), e, 0.5, config, g=g)[2], d)  # one program per strip
    with pytest.raises(ValueError, match="needs the shrink fused"):
        lowrank_gemm(p, q, False, lt.t(), e, 0.5, config, t=ts, g=g)


def test_producers_get_sms_of_their_own():
    from kernels.lora.gemm import SHRINK_PROGRAMS, programs_split

    # 8192 × 4096 × 4096 at 128 × 256 tiles on an H100's 132 SMs: 1024 tiles, 64 row blocks. 4 producers leave
    # 128 tile programs, 8 tiles each, the rounds 132 programs would need too. T given: one program per SM.
    assert programs_split(1024, 64, 132, True) == (128, 4)
    assert programs_split(1024, 64, 132, False) == (132, 0)
    for tiles, row_blocks, sms in [
        (64, 4, 132),
        (7168, 128, 132),
        (16, 1, 132),
        (1000, 63, 108),
        (30, 30, 16),
    ]:
        programs, producers = programs_split(tiles, row_blocks, sms, True)
        assert 1 <= producers <= min(SHRINK_PROGRAMS, row_blocks)
        assert programs + producers <= sms  # all resident at once: a waiting tile never starves a producer
        assert -(-tiles // programs) == -(-tiles // (sms - producers))  # no extra round of tiles


@pytest.mark.parametrize("dtype, tol", DTYPES[:2])
def test_3d_input_and_no_bias(dtype, tol, seed, poison_empty):
    x, w, a, b, _ = _inputs(2 * 9, 32, 24, 4, dtype)
    y = _check(x.view(2, 9, 32), w, a, b, None, tol)
    assert y.shape == (2, 9, 24)


def test_row_strided_x_stays_on_the_fast_path(seed, poison_empty):
    # Rows padded to 48 columns (a slice of a wider tensor): still TMA-compatible, so v3 runs with stride 48.
    x, w, a, b, b0 = _inputs(20, 40, 16, 4, torch.float16)
    wide = torch.randn(20, 48, device=x.device).to(x.dtype)
    wide[:, :40] = x
    xs = wide[:, :40]
    assert choose_version(xs, w, b) == ("v3", None)
    _check(xs, w, a, b, b0, 4e-3)


@pytest.mark.parametrize("make", ["transposed", "odd-K"])
def test_general_path_warns_and_is_right(make, seed, poison_empty):
    if make == "transposed":  # x with unit *row* stride: no tensor descriptor can read it
        x, w, a, b, b0 = _inputs(24, 32, 16, 3, torch.float16)
        x = x.t().contiguous().t()
    else:  # K = 17: rows of 34 bytes, not a multiple of 16
        x, w, a, b, b0 = _inputs(12, 17, 16, 3, torch.float16)
    lora_module._warned.clear()
    with pytest.warns(RuntimeWarning, match="general path \\(v1\\)"):
        _check(x, w, a, b, b0, 4e-3)
    with pytest.raises(ValueError, match="cannot run"):
        lora_linear(x, w, a, b, SCALE, b0, version="v3")


@pytest.mark.parametrize(
    "K, N, named", [(17, 16, "K = 17 is"), (16, 9, "N = 9 is"), (17, 9, "K = 17 and N = 9 are")]
)
def test_the_layout_reason_names_only_the_unaligned_sizes(K, N, named):
    x, w, _, b, _ = _inputs(4, K, N, 3, torch.float16)
    version, why = choose_version(x, w, b)
    assert version == "v1" and why.startswith(f"{named} not a multiple of 8")


def test_rank_128(seed, poison_empty):
    _check(*_inputs(20, 32, 24, 128, torch.float16), 4e-3, version="v3")


def test_rank_above_128_runs_torch(seed, poison_empty):
    x, w, a, b, b0 = _inputs(4, 16, 8, 130, torch.float16)
    assert choose_version(x, w, b)[0] == "v0"
    lora_module._warned.clear()
    with pytest.warns(RuntimeWarning, match="general path \\(v0\\) because r = 130 > 128"):
        _check(x, w, a, b, b0, 4e-3)


@pytest.mark.parametrize("version", VERSIONS)
def test_small_m_backward_uses_cublas_path(version, seed, poison_empty, monkeypatch):
    # On a GPU with many SMs a small M takes the unfused backward (fused_dx_pays is False): same answer.
    monkeypatch.setattr(lora_module, "sm_count", lambda device: 10**6)
    assert not lora_module.fused_dx_pays(64, 64, torch.device("cpu"))
    _check(*_inputs(9, 32, 16, 4, torch.float16), 4e-3, version=version)


@pytest.mark.parametrize("version", VERSIONS)
def test_nan_in_x_propagates_to_its_row_only(version, seed, poison_empty):
    x, w, a, b, b0 = _inputs(20, 32, 16, 4, torch.float32)
    x[7, 3] = float("nan")
    y = lora_linear(x, w, a, b, SCALE, b0, version=version)
    assert y[7].isnan().all()
    assert torch.isfinite(torch.cat([y[:7], y[8:]])).all()


@pytest.mark.parametrize("version", VERSIONS)
def test_scale_zero_and_b_zero(version, seed, poison_empty):
    x, w, a, b, b0 = _inputs(20, 32, 16, 4, torch.float32)
    base = torch.nn.functional.linear(x.double(), w.double(), b0.double())
    y = _check(x, w, a, b, b0, 2e-5, version=version, scale=0.0)  # dA = dB = 0 exactly, dX = dY W
    _close(y, base, 2e-5, "y at scale 0")
    y = _check(x, w, a, torch.zeros_like(b), b0, 2e-5, version=version)  # LoRA's init: dA = 0, dB ≠ 0
    _close(y, base, 2e-5, "y at B = 0")


def test_only_adapter_needs_grad_and_inference(seed, poison_empty):
    x, w, a, b, b0 = _inputs(20, 32, 16, 4, torch.float32)
    ag = a.clone().requires_grad_()
    y = lora_linear(x, w, ag, b, SCALE, b0)  # x needs no grad: dX is not computed
    (da,) = torch.autograd.grad(y.sum(), [ag])  # a non-contiguous (expanded) upstream gradient
    expected = reference.lora_linear(x.double(), w.double(), ag.double(), b.double(), SCALE, b0.double())
    _close(y, expected, 2e-5, "y")
    dy = torch.ones(20, 16, dtype=torch.float64, device=x.device)
    _close(da, SCALE * (dy @ b.double()).t() @ x.double(), 2e-5, "dA")
    with torch.no_grad():
        _close(lora_linear(x, w, ag, b, SCALE, b0), expected, 2e-5, "y (no_grad)")


@pytest.mark.parametrize("need_dx", [True, False])
@pytest.mark.parametrize("version", VERSIONS)
def test_direct_eager_path_gives_the_ops_bits(version, need_dx, seed, poison_empty):
    # Plain eager calls run the ops' bodies directly (LoraLinearFunction); the op with its registered
    # autograd (what torch.compile and intercepted calls see) must give the same bits.
    from kernels.library import ops

    x, w, a, b, b0 = _inputs(6, 16, 12, 4, torch.float32)
    grad = torch.randn(6, 12, device=x.device)
    direct = [x.clone().requires_grad_(need_dx), a.clone().requires_grad_(), b.clone().requires_grad_()]
    y = lora_linear(direct[0], w, direct[1], direct[2], SCALE, b0, version=version)
    assert type(y.grad_fn).__name__ == "LoraLinearFunctionBackward"
    registered = [t.clone().requires_grad_(t.requires_grad) for t in direct]
    y_op, _ = ops().lora_linear.default(
        registered[0], w, registered[1], registered[2], b0, SCALE, version, "", ""
    )
    assert torch.equal(y, y_op)
    wrt = slice(0 if need_dx else 1, 3)
    got, want = torch.autograd.grad(y, direct[wrt], grad), torch.autograd.grad(y_op, registered[wrt], grad)
    for name, g, e in zip(("dX", "dA", "dB")[wrt], got, want, strict=True):
        assert torch.equal(g, e), name


def test_intercepted_calls_go_through_the_op(seed):
    # a dispatch mode, the profiler or a tensor subclass must see fused_kernels::lora_linear, not its insides
    from torch.utils._python_dispatch import TorchDispatchMode

    class Seen(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = set()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops.add(str(func.overloadpacket))
            return func(*args, **(kwargs or {}))

    x, w, a, b, b0 = _inputs(5, 16, 8, 4, torch.float32)
    want = lora_linear(x, w, a, b, SCALE, b0)
    with Seen() as seen:
        got = lora_linear(x, w, a, b, SCALE, b0)
    assert "fused_kernels.lora_linear" in seen.ops and torch.equal(got, want)
    with torch.profiler.profile() as prof:
        lora_linear(x, w, a, b, SCALE, b0)
    assert any(e.name == "fused_kernels::lora_linear" for e in prof.events())

    class Sub(torch.Tensor):
        pass

    ag = a.clone().as_subclass(Sub).requires_grad_()
    y = lora_linear(x, w, ag, b, SCALE, b0)
    assert type(y.grad_fn).__name__ != "LoraLinearFunctionBackward"
    assert torch.equal(y.detach().as_subclass(torch.Tensor), want)


def test_empty_batch():
    x, w, a, b, b0 = _inputs(0, 16, 8, 4, torch.float32)
    xg, ag, bg = (t.clone().requires_grad_() for t in (x, a, b))
    y = lora_linear(xg, w, ag, bg, SCALE, b0)
    assert y.shape == (0, 8)
    dx, da, db = torch.autograd.grad(y.sum(), [xg, ag, bg])
    assert dx.shape == (0, 16) and not da.any() and not db.any()


def test_bad_inputs_raise_clear_errors():
    x, w, a, b, b0 = _inputs(4, 16, 8, 4, torch.float32)
    cases = [
        ((x, w, a, b[:, :3], SCALE, b0), ValueError, "rank mismatch.*r = 4.*r = 3"),
        ((x, w, a.half(), b, SCALE, b0), TypeError, "lora_a has dtype torch.float16 but x has torch.float32"),
        ((x, w, a, b, SCALE, b0.double()), TypeError, "bias has dtype torch.float64"),
        (
            (x, w[:, :8], a, b, SCALE, b0),
            ValueError,
            "weight must be \\[N, K\\] with K = x.shape\\[-1\\] = 16",
        ),
        ((x, w, a[:, :8], b, SCALE, b0), ValueError, "lora_a must be \\[r, K\\]"),
        (
            (x, w, a, b[:4], SCALE, b0),
            ValueError,
            "lora_b must be \\[N, r\\] with N = weight.shape\\[0\\] = 8",
        ),
        ((x, w, a, b, SCALE, b0[:3]), ValueError, "bias must have shape \\(8,\\)"),
        ((x, w, a, b, torch.tensor(0.5), b0), TypeError, "scale must be a Python number"),
        ((x, w, a.to("meta"), b, SCALE, b0), ValueError, "lora_a is on meta but x is on"),
        ((x, w.clone().requires_grad_(), a, b, SCALE, b0), RuntimeError, "weight requires grad.*frozen"),
        ((x, w, a, b, SCALE, b0.clone().requires_grad_()), RuntimeError, "bias requires grad.*frozen"),
    ]
    for args, error, match in cases:
        with pytest.raises(error, match=match):
            lora_linear(*args)
    with pytest.raises(ValueError, match="version='v9' is not one of"):
        lora_linear(x, w, a, b, SCALE, b0, version="v9")


@pytest.mark.gpu
def test_cpu_tensor_on_the_gpu_path():
    x, w, a, b, b0 = _inputs(4, 16, 8, 4, torch.bfloat16, device="cuda")
    with pytest.raises(ValueError, match="lora_b is on cpu but x is on cuda"):
        lora_linear(x, w, a, b.cpu(), SCALE, b0)


@pytest.mark.gpu
@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize(
    "shape",
    [
        (2049, 1024, 1536, 16),
        (300, 512, 256, 128),
        (1, 64, 64, 3),
        (517, 1000, 700, 7),
        (4096, 512, 1024, 64),
    ],
    ids=["2049-rows", "r128", "one-row", "odd-K-N", "r64"],
)
def test_gpu_bf16_shapes(version, shape, seed, poison_empty):
    x, w, a, b, b0 = _inputs(*shape, torch.bfloat16, device="cuda")
    if version in ("v2", "v3") and choose_version(x, w, b, None)[1] is not None:
        with pytest.raises(ValueError, match="cannot run"):
            lora_linear(x, w, a, b, SCALE, b0, version=version)
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the odd shape's general-path note
        assert _check(x, w, a, b, b0, 3e-2, version=version).is_cuda


@pytest.mark.parametrize("dtype, tol", DTYPES)
def test_skinny_products_one_pass(dtype, tol, seed, monkeypatch):
    # s·(P·L) and Pᵀ·T from one pass over P, with several row groups and column strips (fp32 partials,
    # summed in a fixed order), and the transposed D layout of dA; against float64.
    import kernels.lora.skinny as skinny

    monkeypatch.setattr(skinny, "_tiles", lambda M, C, device: (16, 16, 3, 4))
    monkeypatch.setattr(skinny, "_plan", functools.lru_cache(skinny._plan.__wrapped__))  # no cached plans
    device = runtime.default_device()
    p = torch.randn(45, 40, device=device).to(dtype)
    lt = torch.randn(5, 40, device=device).to(dtype)  # L = ltᵀ: a strided [C, r] view, as Aᵀ is
    t = torch.randn(45, 5, device=device).to(dtype)
    u, d = skinny.skinny_products(p, lt.t(), t, 0.5)
    _close(u, 0.5 * p.double() @ lt.t().double(), tol, "u")
    _close(d, p.double().t() @ t.double(), tol, "D")
    again = skinny.skinny_products(p, lt.t(), t, 0.5)
    assert torch.equal(again[0], u) and torch.equal(again[1], d)  # deterministic: no atomics
    _, dt = skinny.skinny_products(p, None, t, d_transposed=True)
    assert dt.is_contiguous() and dt.shape == (5, 40)
    _close(dt, t.double().t() @ p.double(), tol, "Dᵀ")
    u_only, _ = skinny.skinny_products(p, lt.t(), None, 0.5)
    _close(u_only, 0.5 * p.double() @ lt.t().double(), tol, "u alone")


def test_launch_key_is_finer_than_triton_specialization():
    # The cached launcher reuses a compiled kernel only for arguments Triton would specialize the same way:
    # ints by exact value, tensors by dtype and 16-byte alignment, floats by type (never specialized).
    from kernels.fast_launch import CachedLauncher, _arg_key

    t = torch.randn(64, dtype=torch.float16)
    assert _arg_key(t) == (torch.float16, True) and _arg_key(t[1:]) == (torch.float16, False)
    assert _arg_key(t.float()) != _arg_key(t)
    assert _arg_key(16) != _arg_key(17) and _arg_key(1) == 1
    assert _arg_key(0.5) == _arg_key(2.0)
    if runtime.interpreting():  # the interpreter's launch returns no compiled kernel: always the normal path
        assert not CachedLauncher(lora_gemm_module._lowrank_gemm_kernel).enabled


@pytest.mark.gpu
@pytest.mark.parametrize("version", ["v1", "v2", "v3"])
def test_cached_launch_matches_normal_launch(version, seed):
    # Same bits through the compiled kernel's own launcher as through kernel[grid](...), forward and backward,
    # and for a misaligned x (v1 then: a second launch key for the same shape).
    import kernels.lora.branch as branch_module
    import kernels.lora.skinny as skinny_module

    launchers = [lora_gemm_module._launch, branch_module._launch, skinny_module._launch]
    x, w, a, b, b0 = _inputs(1000, 256, 384, 16, torch.bfloat16, device="cuda")
    wide = torch.randn(1000 * 256 + 1, device=x.device).to(x.dtype)
    for xs in (x, wide[1:].view(1000, 256)):  # the second: data_ptr 2 bytes past an aligned one
        xs.copy_(x)
        v = version if xs.data_ptr() % 16 == 0 else "v1"
        results = []
        for enabled in (False, True, True):  # normal, cached (first call fills the table), cached (a hit)
            for launcher in launchers:
                launcher.enabled = enabled
            leaf = [t.detach().clone().requires_grad_() for t in (xs, a, b)]
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                y = lora_linear(leaf[0], w, leaf[1], leaf[2], SCALE, b0, version=v)
            results.append([y, *torch.autograd.grad(y, leaf, torch.ones_like(y))])
        for launcher in launchers:
            launcher.enabled = True
        assert all(r.is_cuda for r in results[0])
        for got in results[1:]:
            assert all(torch.equal(g, r) for g, r in zip(got, results[0], strict=True))
    assert lora_gemm_module._launch._runners and branch_module._launch._runners


def test_an_unknown_torch_takes_the_op(monkeypatch, seed):
    # outside the torch versions plain_eager's probes were read in, every call takes the public op
    import kernels.internals as internals

    x, w, a, b, b0 = _inputs(5, 16, 8, 4, torch.float32)
    ag = a.clone().requires_grad_()
    assert type(lora_linear(x, w, ag, b, SCALE, b0).grad_fn).__name__ == "LoraLinearFunctionBackward"
    monkeypatch.setattr(internals, "_PROBES_WORK", False)
    y = lora_linear(x, w, ag, b, SCALE, b0)
    assert type(y.grad_fn).__name__ != "LoraLinearFunctionBackward" and not internals.plain_eager(x)
    assert torch.equal(y, lora_linear(x, w, a, b, SCALE, b0))


# ---- version="small" (kernels.lora.small_m): the whole layer in one kernel each way, M ≤ 64 ---------------
SMALL_SHAPES = [  # (M, K, N, r): one row, odd sizes, r padded, N spanning several programs, M at the limit
    pytest.param((1, 16, 8, 1), id="one-row"),
    pytest.param((5, 40, 24, 8), id="odd"),
    pytest.param((16, 72, 104, 16), id="decode"),
    pytest.param((33, 24, 40, 3), id="r3"),
    pytest.param((64, 48, 200, 20), id="64-rows"),
]


@pytest.mark.parametrize("shape", SMALL_SHAPES)
@pytest.mark.parametrize("dtype, tol", DTYPES)
def test_small_m_matches_reference(shape, dtype, tol, seed, poison_empty):
    _check(*_inputs(*shape, dtype), tol, version=SMALL)


def test_small_m_takes_any_strides_and_no_bias(seed, poison_empty):
    x, w, a, b, _ = _inputs(9, 32, 24, 4, torch.float32)
    column_major = [t.t().contiguous().t() for t in (x, w, a, b)]
    _check(*column_major, None, 2e-5, version=SMALL)
    _check(x, w, a, b, None, 2e-5, version=SMALL, fwd_config=BranchConfig(block_n=16, block_k=16))


def test_small_m_when_only_the_adapter_needs_grad(seed, poison_empty):
    x, w, a, b, b0 = _inputs(7, 24, 16, 4, torch.float32)
    ag, bg = a.clone().requires_grad_(), b.clone().requires_grad_()
    y = lora_linear(x, w, ag, bg, SCALE, b0, version=SMALL)
    a64, b64 = a.double().requires_grad_(), b.double().requires_grad_()
    want = reference.lora_linear(x.double(), w.double(), a64, b64, SCALE, b0.double())
    grad = torch.randn_like(want)
    for name, g, e in zip(("dA", "dB"), torch.autograd.grad(y, (ag, bg), grad.float()),
                          torch.autograd.grad(want, (a64, b64), grad), strict=True):  # fmt: skip
        _close(g, e, 2e-5, name)


@pytest.mark.parametrize("element_size", [2, 4])
def test_small_m_gpu_rule_fits_its_shared_memory(element_size, monkeypatch):
    # The GPU rule (not the interpreter's): its stages of x, W and A tiles within SMALL_M_NEEDS at every M and
    # r the path takes; the swept config (16 columns, 256 deep, 2 warps, 4 stages) at 16 rows, r 16, 16-bit.
    monkeypatch.setattr(small_m_module, "interpreting", lambda: False)
    for M in range(1, 65):
        for r in (1, 8, 16, 17, 32, 64, 128):
            c = small_m_module.small_m_rule(M, 4096, 4096, r, element_size)
            stage = (c.block_m + c.block_n + dot_block(r)) * c.block_k * element_size
            assert c.num_stages * stage <= small_m_module.SMALL_M_NEEDS.smem_per_block, (M, r, c)
            assert c.block_m >= M and c.block_k >= 16, (M, r, c)
    got = small_m_module.small_m_rule(16, 4096, 4096, 16, 2)
    assert (got.block_n, got.block_k, got.num_warps, got.num_stages) == (16, 256, 2, 4)


def test_small_m_refuses_what_it_cannot_take():
    x, w, a, b, b0 = _inputs(65, 16, 8, 4, torch.float32)
    with pytest.raises(ValueError, match=r"version='small' cannot run: M = 65 rows > 64"):
        lora_linear(x, w, a, b, SCALE, b0, version=SMALL)
    x, w, a, b, b0 = _inputs(4, 16, 8, 129, torch.float32)
    with pytest.raises(ValueError, match=r"version='small' cannot run: r = 129 > 128"):
        lora_linear(x, w, a, b, SCALE, b0, version=SMALL)
    x, w, a, b, b0 = _inputs(4, 16, 8, 4, torch.float32)
    for name in ("fwd_config", "bwd_config"):
        with pytest.raises(TypeError, match=f"{name} must be a BranchConfig \\(or None\\), got GemmConfig"):
            lora_linear(x, w, a, b, SCALE, b0, version=SMALL, **{name: GemmConfig(block_m=64)})
    assert choose_version(x, w, b, None)[0] != SMALL  # the default only on a GPU (see the GPU test below)
    ag = a.clone().requires_grad_()  # the op's own guard, for callers of the op itself
    y, _ = lora_module._forward_op(x, w, ag, b, b0, SCALE, "v1", "", encode_config(BranchConfig(block_n=16)))
    with pytest.raises(TypeError, match="bwd_config of v1 must be a GemmConfig, got BranchConfig"):
        y.sum().backward()


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(16, 4096, 4096, 16), (1, 4096, 14336, 64), (64, 1000, 700, 7)],
                         ids=["decode", "one-row-wide", "odd"])  # fmt: skip
def test_gpu_small_m_bf16_one_launch_each_way(shape, seed, poison_empty, monkeypatch):
    launches = {"fwd": 0, "bwd": 0}
    for name in launches:
        real = getattr(small_m_module, f"_launch_{name}")

        def counted(*args, _real=real, _name=name):
            launches[_name] += 1
            return _real(*args)

        monkeypatch.setattr(small_m_module, f"_launch_{name}", counted)
    x, w, a, b, b0 = _inputs(*shape, torch.bfloat16, device="cuda")
    assert _check(x, w, a, b, b0, 3e-2, version=SMALL).is_cuda
    assert launches == {"fwd": 1, "bwd": 1}


@pytest.mark.gpu
def test_gpu_default_is_small_only_where_it_was_measured(seed, poison_empty, monkeypatch):
    launched = []
    real = small_m_module._launch_fwd
    monkeypatch.setattr(small_m_module, "_launch_fwd", lambda *args: launched.append(1) or real(*args))
    x, w, a, b, b0 = _inputs(16, 256, 384, 16, torch.bfloat16, device="cuda")
    assert choose_version(x, w, b) == (SMALL, None)
    assert _check(x, w, a, b, b0, 3e-2).is_cuda and launched == [1]  # version=None ran it
    for M, r, dtype in [(17, 16, torch.bfloat16), (16, 17, torch.bfloat16), (16, 16, torch.float32)]:
        x, w, _, b, _ = _inputs(M, 256, 384, r, dtype, device="cuda")
        assert choose_version(x, w, b)[0] != SMALL, (M, r, dtype)
    x, w, _, b, _ = _inputs(16, 17, 384, 16, torch.bfloat16, device="cuda")  # rows of 34 bytes
    version, why = choose_version(x, w, b)
    assert version == "v1" and "not a multiple of 8" in why
