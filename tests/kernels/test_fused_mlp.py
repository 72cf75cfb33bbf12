"""fused_mlp (one Triton kernel) against kernels.reference.fused_mlp, and its on-chip limit on H."""

from __future__ import annotations

import pytest
import torch
import triton

import kernels.mlp.fused_mlp as fused_mlp_module
from kernels import reference, runtime
from kernels.configs import MlpConfig
from kernels.library import ops
from kernels.mlp.fused_mlp import MAX_HIDDEN, SMEM_BUDGET, fused_mlp, launch_params

# (dtype, atol, rtol). Both sides accumulate the dots in fp32 and round h to the dtype before the second
# Linear; they differ in summation order, so a few elements of h round the other way.
DTYPES = [
    pytest.param(torch.float32, 1e-5, 1e-5, id="fp32"),  # summation order only (ieee dots, no TF32)
    pytest.param(torch.float16, 4e-3, 4e-3, id="fp16"),  # h rounded to fp16 (2^-10) on both sides, ≤ few ulp
    pytest.param(torch.bfloat16, 3e-2, 3e-2, id="bf16", marks=pytest.mark.gpu),  # same with bf16's 2^-8 ulp
]
SHAPES = [  # (M, K, H, N)
    pytest.param((64, 32, 64, 16), id="nice"),
    pytest.param((37, 45, 20, 3), id="odd"),  # nothing a multiple of a tile; two K tiles
    pytest.param((20, 16, 32, 70), id="wide-out"),  # two output tiles of BLOCK_N = 64
    pytest.param((1, 1, 1, 1), id="1x1"),
]
FINALS = ["sigmoid", "relu", "none"]


def _params(M, K, H, N, dtype, device=None):
    """x [M, K] and nn.Linear-like weights (scaled so activations stay O(1) whatever K and H)."""
    device = device or runtime.default_device()
    x = torch.randn(M, K, device=device, dtype=dtype)
    w1 = (torch.randn(H, K, device=device) / K**0.5).to(dtype)
    b1 = torch.randn(H, device=device, dtype=dtype)
    w2 = (torch.randn(N, H, device=device) / H**0.5).to(dtype)
    b2 = torch.randn(N, device=device, dtype=dtype)
    return x, w1, b1, w2, b2


def _check(params, final, atol, rtol):
    out = fused_mlp(*params, final_activation=final)
    expected = reference.fused_mlp(*params, final_activation=final)
    assert out.shape == expected.shape and out.dtype == expected.dtype
    torch.testing.assert_close(out, expected, atol=atol, rtol=rtol)


@pytest.mark.parametrize("final", FINALS)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype, atol, rtol", DTYPES)
def test_matches_reference(final, shape, dtype, atol, rtol, seed, poison_empty):
    _check(_params(*shape, dtype), final, atol, rtol)


@pytest.mark.parametrize("H", [200, MAX_HIDDEN])  # both pad to BLOCK_H = 256: just under and at the limit
@pytest.mark.parametrize("dtype, atol, rtol", DTYPES[:2])
def test_hidden_width_at_the_limit_works(H, dtype, atol, rtol, seed, poison_empty):
    _check(_params(70, 40, H, 3, dtype), "sigmoid", atol, rtol)


@pytest.mark.parametrize("dtype, atol, rtol", DTYPES[1:])  # tensor-core dtypes: only they split
def test_output_tiles_split_over_programs(dtype, atol, rtol, seed, poison_empty, monkeypatch):
    # As on a GPU with 64 SMs: the single row block (M = 20) shares its 3 output tiles (N = 150, BLOCK_N = 64)
    # among 3 programs, each recomputing h and writing every third tile.
    monkeypatch.setattr(fused_mlp_module, "sm_count", lambda device: 64)
    assert launch_params(20, 16, 32, 150, dtype, True, 64).split == 3
    _check(_params(20, 16, 32, 150, dtype), "sigmoid", atol, rtol)


@pytest.mark.parametrize(
    "dtype, tensor_cores",
    [(torch.bfloat16, True), (torch.float32, True), (torch.float32, False)],
    ids=["bf16", "tf32", "fp32-fma"],
)
def test_launch_params_fill_the_gpu_and_fit_on_chip(dtype, tensor_cores):
    s = 2 if dtype == torch.bfloat16 else 4
    for M in (1, 37, 256, 4096, 65536):
        for K, H, N in ((512, 256, 1), (4096, 16, 4096), (45, 20, 3)):
            p = launch_params(M, K, H, N, dtype, tensor_cores, num_sms=132)
            row_blocks, n_tiles = triton.cdiv(M, p.block_m), triton.cdiv(N, p.block_n)
            assert p.block_h >= H and p.block_m * p.block_h <= (32768 if s == 2 else 16384)
            assert 1 <= p.split <= n_tiles
            if tensor_cores:  # enough programs for 132 SMs where there is enough work; pipeline fits
                assert p.split * row_blocks >= min(132, row_blocks * n_tiles)
                assert p.num_stages * (p.block_m + p.block_h) * p.block_k * s <= SMEM_BUDGET
            else:  # FMA dots never recompute h
                assert p.split == 1


@pytest.mark.parametrize("H", [MAX_HIDDEN + 1, 1024])
def test_hidden_width_over_the_limit_raises(H):
    params = _params(4, 8, H, 2, torch.float32)
    with pytest.raises(ValueError, match=f"hidden width H={H} is outside 1..{MAX_HIDDEN}"):
        fused_mlp(*params)


def test_non_contiguous_inputs(seed, poison_empty):
    device = runtime.default_device()
    M, K, H, N = 37, 45, 20, 3
    x = torch.randn(K, M, device=device).t()  # column stride M
    w1 = (torch.randn(K, H, device=device) / K**0.5).t()  # stored transposed, as [K, H]
    b1 = torch.randn(2 * H, device=device)[::2]
    w2 = (torch.randn(N + 2, H + 5, device=device) / H**0.5)[1 : N + 1, 5:]  # sliced: offset, row stride
    b2 = torch.randn(N, device=device)
    assert not any(t.is_contiguous() for t in (x, w1, b1, w2))
    _check((x, w1, b1, w2, b2), "sigmoid", 1e-5, 1e-5)


def test_nd_input(seed, poison_empty):
    x, w1, b1, w2, b2 = _params(6, 24, 16, 5, torch.float32)
    x3 = x.view(2, 3, 24)
    out = fused_mlp(x3, w1, b1, w2, b2)
    assert out.shape == (2, 3, 5)
    torch.testing.assert_close(out, reference.fused_mlp(x3, w1, b1, w2, b2), atol=1e-5, rtol=1e-5)


@pytest.mark.skipif(not runtime.interpreting(), reason="tests the interpreter's bf16 tl.dot workaround")
def test_bf16_dot_upcast_under_interpreter(seed):
    _check(_params(37, 45, 20, 3, torch.bfloat16), "none", 3e-2, 3e-2)


def test_works_with_linear_layers_under_no_grad(seed):
    device = runtime.default_device()
    l1, l2 = torch.nn.Linear(24, 16).to(device), torch.nn.Linear(16, 1).to(device)
    x = torch.randn(10, 24, device=device)
    with pytest.raises(RuntimeError, match="forward-only"):
        fused_mlp(x, l1.weight, l1.bias, l2.weight, l2.bias)
    with torch.no_grad():
        out = fused_mlp(x, l1.weight, l1.bias, l2.weight, l2.bias)
        torch.testing.assert_close(out, torch.sigmoid(l2(torch.relu(l1(x)))), atol=1e-5, rtol=1e-5)


def test_rejects_bad_input():
    with torch.device(runtime.default_device()):  # CPU tensors under the interpreter, CUDA on a GPU
        x, w1, b1, w2, b2 = _params(4, 8, 16, 2, torch.float32, device=runtime.default_device())
        with pytest.raises(ValueError, match="w1 must be"):
            fused_mlp(x, w1[:, :7], b1, w2, b2)
        with pytest.raises(ValueError, match="b1 must have shape"):
            fused_mlp(x, w1, b1[:15], w2, b2)
        with pytest.raises(ValueError, match="w2 must be"):
            fused_mlp(x, w1, b1, w2[:, :15], b2)
        with pytest.raises(ValueError, match="b2 must have shape"):
            fused_mlp(x, w1, b1, w2, b2[:1])
        with pytest.raises(ValueError, match="final_activation 'tanh'"):
            fused_mlp(x, w1, b1, w2, b2, final_activation="tanh")
        with pytest.raises(ValueError, match="final_activation 'gelu'"):  # the op itself checks too
            ops().fused_mlp(x, w1, b1, w2, b2, "gelu", "")
        with pytest.raises(TypeError, match="w1 has dtype torch.float16 but x has torch.float32"):
            fused_mlp(x, w1.half(), b1, w2, b2)
        with pytest.raises(TypeError, match="x has dtype torch.float64, not supported"):
            fused_mlp(*(t.double() for t in (x, w1, b1, w2, b2)))
        with pytest.raises(TypeError, match="x has dtype torch.int32, not supported"):
            fused_mlp(*(t.int() for t in (x, w1, b1, w2, b2)))
        with pytest.raises(ValueError, match="w2 is on meta but x is on"):
            fused_mlp(x, w1, b1, w2.to("meta"), b2)


@pytest.mark.gpu
@pytest.mark.parametrize(
    "shape",
    [
        pytest.param((8192, 512, 256, 1), id="dlrm-top-tail"),
        pytest.param((4096, 1024, 16, 1024), id="lora-rank16"),
    ],
)
def test_large_shapes_bf16_on_gpu(shape, seed):
    with torch.no_grad():
        _check(_params(*shape, torch.bfloat16, device="cuda"), "none", 3e-2, 3e-2)


@pytest.mark.gpu
@pytest.mark.parametrize(
    "shape",
    [*SHAPES, pytest.param((8192, 512, 256, 1), id="dlrm"), pytest.param((4096, 1024, 16, 1024), id="lora")],
)
def test_tf32_where_torch_allows_it_on_gpu(shape, seed, poison_empty):
    # At precision "high" the kernel's dots use TF32 (10-bit mantissa, ~5e-4 per product), as torch's do;
    # compared with the exact fp32 reference, so 1e-2 covers the rounding of sums over K ≤ 1024.
    params = _params(*shape, torch.float32, device="cuda")
    expected = reference.fused_mlp(*params, final_activation="none")
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high")
    try:
        out = fused_mlp(*params, final_activation="none")
    finally:
        torch.set_float32_matmul_precision(before)
    torch.testing.assert_close(out, expected, atol=1e-2, rtol=1e-2)


@pytest.mark.parametrize("dtype, atol, rtol", DTYPES[:2])
def test_config_carrier_overrides_the_rule(dtype, atol, rtol, seed, poison_empty):
    """An ``MlpConfig`` with some fields set changes the launch (here: 16-row programs, a 16-wide K step);
    the ``None`` fields come from the rule, and the result is the same."""
    params = _params(37, 40, 20, 9, dtype)
    rule = launch_params(37, 40, 20, 9, dtype, dtype != torch.float32, 1)
    config = MlpConfig(block_m=16, block_k=16)
    assert config.filled(rule).block_h == rule.block_h and config.filled(rule).block_m == 16
    out = fused_mlp(*params, final_activation="relu", config=config)
    torch.testing.assert_close(
        out, reference.fused_mlp(*params, final_activation="relu"), atol=atol, rtol=rtol
    )
    assert MlpConfig(block_m=16) == MlpConfig(block_m=16) and hash(MlpConfig(16)) == hash(MlpConfig(16))
    assert MlpConfig(block_m=16).key() != MlpConfig(block_h=16).key()


def test_config_that_cannot_hold_the_hidden_layer_is_refused():
    params = _params(8, 16, 40, 4, torch.float32)
    with pytest.raises(ValueError, match="block_h=32 does not cover the hidden width H=40"):
        fused_mlp(*params, config=MlpConfig(block_h=32))
