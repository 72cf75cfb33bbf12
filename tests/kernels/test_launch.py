"""kernels.launch: the helpers every kernel shares (grid arithmetic, tile rules, checks, the column sum)."""

from __future__ import annotations

import pytest
import torch

import kernels.launch as launch
from kernels import reference, runtime
from kernels.launch import (
    MAX_BLOCK_N,
    MAX_ROW_GROUPS,
    ROWS_PER_GROUP_MIN,
    TILE_ELEMENTS,
    as_rows,
    cdiv,
    check_device,
    check_dtype,
    next_pow2,
    pointwise_tile,
    reduce_partials,
    row_groups,
)
from kernels.pointwise.add_mul_act import add_mul_act
from kernels.pointwise.bias_relu import bias_relu


def test_integer_helpers():
    for a in range(1, 70):
        for b in (1, 2, 7, 64):
            assert cdiv(a, b) == -(-a // b) and (cdiv(a, b) - 1) * b < a <= cdiv(a, b) * b
    assert [next_pow2(n) for n in (0, 1, 2, 3, 4, 5, 1000, 1024, 1025)] == [
        1,
        1,
        2,
        4,
        4,
        8,
        1024,
        1024,
        2048,
    ]


@pytest.mark.parametrize("M", [1, 3, 37, 1024, 65536])
@pytest.mark.parametrize("N", [1, 45, 1024, 4097])
@pytest.mark.parametrize("num_sms", [1, 132])
def test_pointwise_tile(M, N, num_sms):
    block_m, block_n = pointwise_tile(M, N, num_sms)
    for b in (block_m, block_n):
        assert b >= 1 and b & (b - 1) == 0, "tl.arange needs powers of two"
    assert block_n == min(next_pow2(N), MAX_BLOCK_N)
    assert block_m <= next_pow2(M) and block_m * block_n <= max(TILE_ELEMENTS, block_n)
    if block_m > 1:  # rows were only kept where the GPU is full without shrinking them
        assert cdiv(M, block_m) * cdiv(N, block_n) >= 4 * num_sms


@pytest.mark.parametrize("M", [1, 63, 64, 65, 1000, 16384, 10**6])
def test_row_groups_cover_every_row_once(M):
    G, rows = row_groups(M)
    assert 1 <= G <= MAX_ROW_GROUPS
    assert G * rows >= M  # every row in a group (a trailing group may be empty: it writes a zero partial row)
    assert rows >= min(M, ROWS_PER_GROUP_MIN)


@pytest.mark.parametrize("G, N", [(1, 1), (3, 300), (33, 257), (256, 45)])  # BLOCK_G = 32: 33 has a tail
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
def test_reduce_partials_sums_the_rows(G, N, dtype, seed, poison_empty):
    partial = torch.randn(G, N, device=runtime.default_device())
    out = reduce_partials(partial, dtype)
    assert out.shape == (N,) and out.dtype == dtype
    # Any summation order is right: the fp32 sum may differ from the exact one by at most G·eps32·Σ|x|
    # (the classic bound), and rounding to ``dtype`` adds one ulp of ``dtype``. A dropped or doubled row is
    # ~1 off.
    exact = partial.double().sum(0)
    bound = G * torch.finfo(torch.float32).eps * partial.double().abs().sum(0)
    bound += torch.finfo(dtype).eps * exact.abs() + torch.finfo(dtype).tiny
    err = (out.double() - exact).abs()
    assert (err <= bound).all(), f"worst column {int((err - bound).argmax())}: error {err.max():.3g}"


def test_as_rows_views_when_it_can_and_copies_or_refuses_when_not():
    t = torch.randn(2, 3, 8)
    assert as_rows(t, "t").data_ptr() == t.data_ptr() and as_rows(t, "t").shape == (6, 8)
    assert as_rows(t[0, 0], "t").shape == (1, 8)
    swapped = t.transpose(0, 1)  # [3, 2, 8]: rows cannot be merged without a copy
    torch.testing.assert_close(as_rows(swapped, "t"), swapped.reshape(6, 8), atol=0, rtol=0)
    with pytest.raises(ValueError, match="t of shape \\(3, 2, 8\\) .* cannot be flattened"):
        as_rows(swapped, "t", need_view=True)
    with pytest.raises(ValueError, match="t must have at least 1 dimension"):
        as_rows(torch.tensor(1.0), "t")


def test_checks_name_the_function_and_the_argument():
    x = torch.randn(4, device=runtime.default_device())
    check_dtype("f", "w", x.clone(), x)
    check_device("f", "w", x.clone(), x)
    with pytest.raises(TypeError, match="f: w has dtype torch.float16 but x has torch.float32"):
        check_dtype("f", "w", x.half(), x)
    with pytest.raises(TypeError, match="f: w has dtype torch.int64, not supported"):
        check_dtype("f", "w", x.long(), x)
    with pytest.raises(ValueError, match="f: w is on meta but x is on"):
        check_device("f", "w", torch.empty(4, device="meta"), x)
    meta = torch.empty(4, device="meta")
    with pytest.raises(ValueError, match="f: w is on meta; Triton kernels need CUDA tensors"):
        check_device("f", "w", meta, meta)


@pytest.mark.parametrize("kernel", ["bias_relu", "add_mul_act"])
def test_row_groups_left_empty_still_write_their_partial_row(kernel, seed, poison_empty, monkeypatch):
    # With at most 8 groups of at least 1 row, M = 9 gives 8 groups of 2 rows: groups 5-7 own no row. They
    # must still write their (zero) row of the partial buffer, or its NaN poison reaches grad_bias.
    monkeypatch.setattr(launch, "MAX_ROW_GROUPS", 8)
    monkeypatch.setattr(launch, "ROWS_PER_GROUP_MIN", 1)
    G, rows = row_groups(9)
    assert (G - 1) * rows >= 9, "no group is empty: the test no longer tests what it says"
    device = runtime.default_device()
    x, y, bias = torch.randn(9, 300, device=device), torch.randn(9, 300, device=device), torch.randn(300)
    bias = bias.to(device)
    if kernel == "bias_relu":
        fn, ref_fn, args = bias_relu, reference.bias_relu, (x, bias)
    else:
        fn = lambda x, b, y: add_mul_act(x, b, y, 0.5, "silu")  # noqa: E731
        ref_fn = lambda x, b, y: reference.add_mul_act(x, b, y, 0.5, "silu")  # noqa: E731
        args = (x, bias, y)
    mine = [t.clone().requires_grad_() for t in args]
    ref = [t.clone().requires_grad_() for t in args]
    grad = torch.randn(9, 300, device=device)
    got = torch.autograd.grad(fn(*mine), mine, grad)
    want = torch.autograd.grad(ref_fn(*ref), ref, grad)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, atol=2e-5, rtol=1e-5)
