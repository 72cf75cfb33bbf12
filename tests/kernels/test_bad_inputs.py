"""Bad input gets a clear error, never a wrong answer or an out-of-bounds access: every public entry point.

One table per entry point, as ``BAD_INPUTS`` in ``test_cuda_binding.py``: ``(call, exception type, pattern)``,
each pattern naming the argument at fault (and, where it helps, what was expected and what came). A refused
call that writes in place (``bias_relu``'s ``out=`` / ``inplace=True``, ``add_multi_lora``'s ``y``, the
embedding's weight and state) leaves that tensor bitwise unchanged. Then the inputs that are *handled*
instead of refused: each is checked against the reference (a strided bias or scale, tensors too large for
int32 offsets, offsets or table offsets that no host check saw).

Tensors live on :func:`kernels.runtime.default_device` (the CPU under the interpreter, CUDA on a GPU); the
"other device" of a mismatch is ``meta``, so the same table runs on both. Shapes are tiny: almost every call
here raises before a kernel launches.
"""

from __future__ import annotations

import pytest
import torch

import kernels.cuda as kernels_cuda
import kernels.dlrm.embedding_tbe as tbe_module
import kernels.launch as launch
from kernels import reference
from kernels.configs import BranchConfig, MlpConfig
from kernels.dlrm.embedding_tbe import MAX_DIM, TableBatchedEmbedding, embedding_tbe, table_offsets_for
from kernels.dlrm.interaction_dot import interaction_dot
from kernels.launch import DEBUG_ENV
from kernels.lora.linear import lora_linear
from kernels.mlp.fused_mlp import fused_mlp
from kernels.multi_lora.metadata import build_meta
from kernels.multi_lora.shrink_expand import add_multi_lora
from kernels.pointwise.add_mul_act import add_mul_act
from kernels.pointwise.bias_relu import bias_relu
from kernels.pointwise.vector_add import vector_add
from kernels.runtime import default_device

DEV = default_device()
OTHER = "meta"  # a device no kernel here runs on, on every machine
F64, F16, I32, I64 = torch.float64, torch.float16, torch.int32, torch.int64


def rand(*shape, dtype=torch.float32, device=None):
    return torch.randn(*shape, dtype=dtype, device=device or DEV)


def _expect(call, error, pattern):
    with pytest.raises(error, match=pattern):
        call()


# ---- embedding_tbe / TableBatchedEmbedding -------------------------------------------------------------

SIZES = [3, 1, 4]  # F = 3 tables, R = 8 rows
R, D, B = 8, 4, 2


def _tbe_args():
    """A valid call: weight [8, 4], table offsets [0, 3, 4, 8], ids [2, 3], or 6 flat ids in 6 bags."""
    ids = torch.tensor([[0, 0, 3], [2, 0, 1]], device=DEV)
    flat = torch.tensor([0, 0, 3, 0, 0, 2], device=DEV)  # bags of tables 0, 1, 2, 0 (empty), 1, 2
    offsets = torch.tensor([0, 1, 2, 3, 3, 5, 6], device=DEV)  # B·F + 1 = 7, one empty bag
    return rand(R, D), table_offsets_for(SIZES, DEV), ids, flat, offsets


def _tbe(weight=None, table_offsets=None, ids=None, offsets=None, ragged=False, **kwargs):
    w, t, i, flat, offs = _tbe_args()
    if ragged:
        i = flat if ids is None else ids
        offsets = offs if offsets is None else offsets
    else:
        i = i if ids is None else ids
    return embedding_tbe(
        w if weight is None else weight, t if table_offsets is None else table_offsets, i, offsets, **kwargs
    )


def _offsets(*values):
    return torch.tensor(values, device=DEV)


SGD = {"optimizer": "sgd", "lr": 0.1}
ADAGRAD = {"optimizer": "rowwise_adagrad", "lr": 0.1}

# fmt: off
TBE_BAD_INPUTS = [
    # ragged offsets: values (checked whatever check_ids is, before any kernel)
    *(
        pytest.param(
            lambda o=o, c=c: _tbe(offsets=_offsets(*o), ragged=True, check_ids=c),
            ValueError,
            match,
            id=f"offsets-{name}-check_ids={c}",
        )
        for name, o, match in (
            ("not-from-0", (1, 1, 2, 3, 3, 5, 6), r"offsets must start at 0.*got offsets\[0\] = 1"),
            ("negative", (-2, 1, 2, 3, 3, 5, 6), r"offsets must start at 0.*got offsets\[0\] = -2"),
            (
                "decreasing",
                (0, 1, 4, 3, 3, 5, 6),
                r"offsets must not decrease, got offsets\[3\] = 3 < offsets\[2\]",
            ),
            (
                "past-the-end",
                (0, 1, 2, 3, 3, 5, 9),
                r"offsets must end at ids.numel\(\) = 6, got offsets\[-1\] = 9",
            ),
            ("short-of-the-end", (0, 1, 2, 3, 3, 5, 5), r"offsets must end at ids.numel\(\) = 6, got .* = 5"),
            ("huge", (0, 1, 2, 3, 3, 2**40, 6), r"offsets must not decrease, got offsets\[6\] = 6"),
        )
        for c in (True, False)
    ),
    # ragged offsets: tensor properties
    pytest.param(lambda: _tbe(offsets=_offsets(0, 1, 2, 3, 3, 5, 6).int(), ragged=True), TypeError,
                 r"offsets must be int64, got torch.int32", id="offsets-int32"),
    pytest.param(lambda: _tbe(offsets=_offsets(0, 1, 2, 3, 3, 5, 6, 6).view(2, 4), ragged=True), ValueError,
                 r"offsets must be 1-D \[B\*F \+ 1\] = \[B\*3 \+ 1\], got shape \(2, 4\)", id="offsets-2d"),
    pytest.param(lambda: _tbe(offsets=_offsets(0, 1, 2, 3, 6), ragged=True), ValueError,
                 r"offsets must be 1-D \[B\*F \+ 1\].*got shape \(5,\)", id="offsets-length"),
    pytest.param(lambda: _tbe(offsets=torch.zeros(7, dtype=I64, device=OTHER), ragged=True), ValueError,
                 "offsets is on meta", id="offsets-device"),
    pytest.param(lambda: _tbe(offsets=[0, 1, 2, 3, 3, 5, 6], ragged=True), TypeError,
                 "offsets must be a torch.Tensor, got list", id="offsets-list"),
    pytest.param(lambda: _tbe(ids=torch.zeros(2, 3, dtype=I64, device=DEV), ragged=True), ValueError,
                 r"with offsets, ids must be 1-D \[nnz\].*got \(2, 3\)", id="ragged-ids-2d"),
    # ids
    pytest.param(lambda: _tbe(ids=torch.zeros(2, 3, dtype=I32, device=DEV)), TypeError,
                 "ids must be int64, got torch.int32", id="ids-int32"),
    pytest.param(lambda: _tbe(ids=torch.zeros(2, 4, dtype=I64, device=DEV)), ValueError,
                 r"ids must be \[B, 3\] or \[B, 3, L\], got \(2, 4\)", id="ids-features"),
    pytest.param(lambda: _tbe(ids=torch.zeros(6, dtype=I64, device=DEV)), ValueError,
                 r"ids must be \[B, 3\] or \[B, 3, L\], got \(6,\)", id="ids-1d-without-offsets"),
    pytest.param(lambda: _tbe(ids=torch.zeros(2, 3, dtype=I64, device=OTHER)), ValueError,
                 "ids is on meta but weight is on", id="ids-device"),
    pytest.param(lambda: _tbe(ids=[[0, 0, 0]]), TypeError, "ids must be a torch.Tensor, got list",
                 id="ids-list"),
    pytest.param(lambda: _tbe(ids=torch.tensor([[0, 1, 3]], device=DEV)), IndexError,
                 "id 1 of feature 1 is out of range for its table of 1 rows", id="ids-out-of-range"),
    # weight
    pytest.param(lambda: _tbe(weight=rand(D, R).t()), ValueError,
                 r"weight must have contiguous rows \(stride 1 along D\), got strides \(1, 8\)",
                 id="weight-transposed"),
    pytest.param(lambda: _tbe(weight=rand(R, 2 * D)[:, ::2]), ValueError, "weight must have contiguous rows",
                 id="weight-column-stride-2"),
    pytest.param(lambda: _tbe(weight=rand(R, D, dtype=F64)), TypeError,
                 "weight has dtype torch.float64, not supported", id="weight-f64"),
    pytest.param(lambda: _tbe(weight=torch.zeros(R, D, dtype=I64, device=DEV)), TypeError,
                 "weight has dtype torch.int64, not supported", id="weight-int64"),
    pytest.param(lambda: _tbe(weight=rand(R * D)), ValueError, r"weight must be \[R, D\].*got shape \(32,\)",
                 id="weight-1d"),
    pytest.param(lambda: _tbe(weight=rand(R, D, device=OTHER)), ValueError, "weight is on meta",
                 id="weight-device"),
    pytest.param(lambda: _tbe(weight=torch.empty(R, MAX_DIM + 1, device=DEV)), ValueError,
                 f"D = {MAX_DIM + 1} is above MAX_DIM = {MAX_DIM}", id="weight-too-wide"),
    pytest.param(lambda: _tbe(weight=rand(1, D).expand(R, D), **SGD), ValueError,
                 "weight has elements that share memory", id="weight-broadcast-rows-updated"),
    pytest.param(lambda: _tbe(weight="w"), TypeError, "weight must be a torch.Tensor, got str",
                 id="weight-str"),
    # table_offsets
    pytest.param(lambda: _tbe(table_offsets=table_offsets_for(SIZES, DEV).int()), TypeError,
                 "table_offsets must be int64, got torch.int32", id="table_offsets-int32"),
    pytest.param(lambda: _tbe(table_offsets=_offsets(0, 0, 3, 3, 4, 4, 8, 8)[::2]), ValueError,
                 "table_offsets must be contiguous, got stride 2", id="table_offsets-strided"),
    pytest.param(lambda: _tbe(table_offsets=_offsets(0)), ValueError,
                 r"table_offsets must be 1-D \[F\+1\] with F >= 1.*got shape \(1,\)",
                 id="table_offsets-no-table"),
    pytest.param(lambda: _tbe(table_offsets=_offsets(0, 3, 4, 8).view(2, 2)), ValueError,
                 r"table_offsets must be 1-D \[F\+1\]", id="table_offsets-2d"),
    pytest.param(lambda: _tbe(table_offsets=torch.zeros(4, dtype=I64, device=OTHER)), ValueError,
                 "table_offsets is on meta", id="table_offsets-device"),
    pytest.param(
        lambda: _tbe(table_offsets=_offsets(0, 3, 4, 20)),
        ValueError,
        r"table_offsets must be non-decreasing, from >= 0 to <= weight.shape\[0\] = 8.*got \[0, 3, 4, 20\]",
        id="table_offsets-past-the-weight",
    ),
    pytest.param(lambda: _tbe(table_offsets=_offsets(0, 3, 2, 8)), ValueError,
                 r"table_offsets must be non-decreasing.*got \[0, 3, 2, 8\]", id="table_offsets-decreasing"),
    pytest.param(lambda: _tbe(table_offsets=_offsets(-3, 3, 4, 8)), ValueError,
                 r"table_offsets must be non-decreasing, from >= 0", id="table_offsets-negative"),
    # optimizer arguments
    pytest.param(lambda: _tbe(optimizer="adam", lr=0.1), ValueError, "optimizer 'adam' is not one of",
                 id="optimizer"),
    pytest.param(lambda: _tbe(pooling="max"), ValueError, "pooling 'max' is not one of", id="pooling"),
    pytest.param(lambda: _tbe(optimizer="sgd"), ValueError, "an optimizer needs lr", id="lr-missing"),
    pytest.param(lambda: _tbe(optimizer="sgd", lr="0.1"), TypeError, "lr must be a float or a 1-element",
                 id="lr-str"),
    pytest.param(lambda: _tbe(optimizer="sgd", lr=torch.full((1,), 0.1, dtype=F64, device=DEV)), TypeError,
                 "an lr tensor must be float32, got torch.float64", id="lr-f64"),
    pytest.param(lambda: _tbe(optimizer="sgd", lr=torch.full((2,), 0.1, device=DEV)), ValueError,
                 r"an lr tensor must have 1 element, got shape \(2,\)", id="lr-two-elements"),
    pytest.param(lambda: _tbe(optimizer="sgd", lr=torch.empty(0, device=DEV)), ValueError,
                 r"an lr tensor must have 1 element, got shape \(0,\)", id="lr-empty"),
    pytest.param(lambda: _tbe(optimizer="sgd", lr=torch.full((1,), 0.1, device=OTHER)), ValueError,
                 "lr is on meta", id="lr-device"),
    pytest.param(lambda: _tbe(**ADAGRAD), ValueError, r"rowwise_adagrad needs state, an fp32 \[8\] tensor",
                 id="state-missing"),
    pytest.param(lambda: _tbe(**ADAGRAD, state=torch.zeros(R, dtype=F16, device=DEV)), TypeError,
                 "state must be float32, got torch.float16", id="state-f16"),
    pytest.param(lambda: _tbe(**ADAGRAD, state=torch.zeros(R + 1, device=DEV)), ValueError,
                 r"state must have shape \(8,\).*got \(9,\)", id="state-length"),
    pytest.param(lambda: _tbe(**ADAGRAD, state=torch.zeros(2 * R, device=DEV)[::2]), ValueError,
                 "state must be contiguous, got stride 2", id="state-strided"),
    pytest.param(lambda: _tbe(**ADAGRAD, state=torch.zeros(R, device=OTHER)), ValueError, "state is on meta",
                 id="state-device"),
    pytest.param(lambda: _tbe(**ADAGRAD, state=[0.0] * R), TypeError, "state must be a torch.Tensor",
                 id="state-list"),
    pytest.param(lambda: _tbe(**ADAGRAD, eps=-1.0, state=torch.zeros(R, device=DEV)), ValueError,
                 "eps must be a number >= 0, got -1.0", id="eps-negative"),
    pytest.param(lambda: _tbe(**ADAGRAD, deterministic=False, state=torch.zeros(R, device=DEV)), ValueError,
                 "deterministic=False.*rowwise_adagrad", id="atomic-adagrad"),
    # the module
    pytest.param(lambda: TableBatchedEmbedding(SIZES, D, dtype=F64), TypeError,
                 "TableBatchedEmbedding: dtype torch.float64 is not supported", id="module-dtype"),
    pytest.param(lambda: TableBatchedEmbedding(SIZES, 0), ValueError,
                 f"TableBatchedEmbedding: dim must be an int in 1..{MAX_DIM}", id="module-dim-0"),
    pytest.param(lambda: TableBatchedEmbedding(SIZES, 4.0), ValueError, "dim must be an int",
                 id="module-dim-float"),
    pytest.param(lambda: TableBatchedEmbedding(SIZES, D, lr="fast"), TypeError, "lr must be a number",
                 id="module-lr"),
    pytest.param(lambda: TableBatchedEmbedding(SIZES, D, eps=-1.0), ValueError, "eps must be a number >= 0",
                 id="module-eps"),
    pytest.param(lambda: TableBatchedEmbedding([3, 0], D), ValueError, "need >= 1 table of >= 1 row",
                 id="module-empty-table"),
]
# fmt: on


@pytest.mark.parametrize("call, error, pattern", TBE_BAD_INPUTS)
def test_embedding_tbe_bad_inputs(call, error, pattern):
    _expect(call, error, pattern)


def test_embedding_tbe_refused_update_leaves_weight_and_state_unchanged():
    """A bad lr / state / offsets with an optimizer: refused before the forward, so no backward ever runs."""
    weight, t, _, flat, _ = _tbe_args()
    state = torch.rand(R, device=DEV)
    before = weight.clone(), state.clone()
    calls = [
        lambda: embedding_tbe(weight, t, flat, _offsets(0, 1, 2, 3, 3, 5, 7), **ADAGRAD, state=state),
        lambda: embedding_tbe(
            weight,
            t,
            flat,
            _offsets(0, 1, 2, 3, 3, 5, 6),
            optimizer="rowwise_adagrad",
            lr=torch.zeros(2, device=DEV),
            state=state,
        ),
        lambda: embedding_tbe(
            weight, t, flat, _offsets(0, 1, 2, 3, 3, 5, 6), **ADAGRAD, state=weight.view(-1)[:R]
        ),  # the state would update the weight's memory
    ]
    for call in calls:
        with pytest.raises(ValueError, match="offsets|lr|state"):
            call().sum().backward()
    assert torch.equal(weight, before[0]) and torch.equal(state, before[1])


def test_embedding_tbe_too_many_bags_for_int32(monkeypatch):
    monkeypatch.setattr(launch, "INT32_LIMIT", 20)  # the forward numbers bags in int32: B·F + 16 < 2**31
    with pytest.raises(ValueError, match=r"B\*F = 2\*3 bags is above the kernel's int32 bag numbers"):
        _tbe()


def test_embedding_tbe_kernels_stay_in_bounds_with_unchecked_values(seed):
    """What no host check saw (inside a CUDA graph capture, or table offsets on a GPU without check_ids)
    never makes a kernel read outside its buffers: the forward clamps bags to the ids and rows to the weight.
    Called below the checks (``_forward``); the ids and weight are views into larger buffers whose
    neighbours are NaN, so a read outside either would show."""
    weight_buf = torch.full((R + 4, D), float("nan"), device=DEV)
    weight = weight_buf[2 : 2 + R]
    weight.copy_(rand(R, D))
    # id 0 around the ids: a valid row, so a bag that read past the ids would add it to its sum
    ids_buf = torch.zeros(10, dtype=I64, device=DEV)
    flat = ids_buf[2:8]
    flat.copy_(torch.tensor([0, 0, 3, 0, 0, 2]))
    t = table_offsets_for(SIZES, DEV)
    # offsets past both ends of the ids: each bag is clamped to [0, nnz)
    offsets = _offsets(-3, 1, 2, 3, 3, 5, 9)
    out = tbe_module._forward(weight, t, flat, offsets, B, 0, False)
    clamped = _offsets(0, 1, 2, 3, 3, 5, 6)
    torch.testing.assert_close(out, reference.embedding_tbe(weight, t, flat, clamped))
    # table offsets past the weight's rows: those rows pool as zeros, never read past the weight
    bad_t = _offsets(0, 3, 4, R + 2)  # table 2 claims rows 4..9 of an 8-row weight
    ids = torch.tensor([[0, 0, 5], [2, 0, 3]], device=DEV)  # id 5 of table 2: row 9, outside the weight
    out = tbe_module._forward(weight, bad_t, ids.reshape(-1), None, B, 1, False)
    assert not out.isnan().any()
    assert torch.equal(out[0, 2], torch.zeros(D, device=DEV)) and torch.equal(out[1, 2], weight[7])


def test_embedding_tbe_handles_empty_inputs():
    weight, t, ids, _, _ = _tbe_args()
    assert _tbe(ids=ids[:0]).shape == (0, 3, D)  # B = 0
    out = _tbe(ids=torch.zeros(0, dtype=I64, device=DEV), offsets=_offsets(0), ragged=True)
    assert out.shape == (0, 3, D)
    empty_bags = _tbe(ids=torch.zeros(0, dtype=I64, device=DEV), offsets=_offsets(0, 0, 0, 0), ragged=True)
    assert torch.equal(empty_bags, torch.zeros(1, 3, D, device=DEV))  # every bag empty: zeros


# ---- lora_linear ---------------------------------------------------------------------------------------

M_, K_, N_, r_ = 6, 8, 8, 2


def _lora(x=None, weight=None, lora_a=None, lora_b=None, scale=0.5, bias=None, **kwargs):
    return lora_linear(
        rand(M_, K_) if x is None else x,
        rand(N_, K_) if weight is None else weight,
        rand(r_, K_) if lora_a is None else lora_a,
        rand(N_, r_) if lora_b is None else lora_b,
        scale,
        rand(N_) if bias is None else bias,
        **kwargs,
    )


# fmt: off
LORA_BAD_INPUTS = [
    pytest.param(lambda: _lora(x=[[1.0] * K_]), TypeError, "x must be a torch.Tensor, got list", id="x-list"),
    pytest.param(lambda: _lora(x=rand(M_, K_, dtype=F64)), TypeError,
                 "x has dtype torch.float64, not supported", id="x-f64"),
    pytest.param(lambda: _lora(x=torch.zeros(M_, K_, dtype=I32, device=DEV)), TypeError,
                 "x has dtype torch.int32, not supported", id="x-int32"),
    pytest.param(lambda: _lora(lora_a=rand(r_, K_, dtype=F16)), TypeError,
                 "lora_a has dtype torch.float16 but x has torch.float32", id="lora_a-dtype"),
    pytest.param(lambda: _lora(bias=rand(N_, dtype=F16)), TypeError, "bias has dtype torch.float16",
                 id="bias-dtype"),
    pytest.param(lambda: _lora(weight=rand(N_, K_, device=OTHER)), ValueError,
                 "weight is on meta but x is on", id="weight-device"),
    pytest.param(lambda: _lora(lora_b=rand(N_, r_, device=OTHER)), ValueError, "lora_b is on meta",
                 id="lora_b-device"),
    pytest.param(lambda: _lora(x=rand(())), ValueError, r"x must be \[\.\.\., K\] with K ≥ 1, got shape \(\)",
                 id="x-0d"),
    pytest.param(lambda: _lora(x=rand(M_, 0)), ValueError,
                 r"x must be \[\.\.\., K\] with K ≥ 1, got shape \(6, 0\)", id="x-K-0"),
    pytest.param(lambda: _lora(weight=rand(N_, K_ + 1)), ValueError,
                 r"weight must be \[N, K\] with K = .* = 8", id="weight-K"),
    pytest.param(lambda: _lora(weight=rand(0, K_), lora_b=rand(0, r_), bias=rand(0)), ValueError,
                 r"weight must be \[N, K\]", id="weight-N-0"),
    pytest.param(lambda: _lora(lora_a=rand(0, K_), lora_b=rand(N_, 0)), ValueError,
                 "lora_a must be \\[r, K\\] with r ≥ 1", id="rank-0"),
    pytest.param(lambda: _lora(lora_a=rand(r_, K_ + 1)), ValueError, r"lora_a must be \[r, K\].*K = 8",
                 id="lora_a-K"),
    pytest.param(lambda: _lora(lora_b=rand(N_ + 1, r_)), ValueError,
                 r"lora_b must be \[N, r\] with N = .* = 8", id="lora_b-N"),
    pytest.param(lambda: _lora(lora_b=rand(N_, r_ + 1)), ValueError,
                 "rank mismatch: lora_a .* r = 2 but lora_b .* r = 3", id="rank-mismatch"),
    pytest.param(lambda: _lora(bias=rand(N_ + 1)), ValueError, r"bias must have shape \(8,\).*got \(9,\)",
                 id="bias-shape"),
    pytest.param(lambda: _lora(scale=torch.tensor(0.5)), TypeError, "scale must be a Python number",
                 id="scale-tensor"),
    pytest.param(lambda: _lora(scale="0.5"), TypeError, "scale must be a Python number .*got str",
                 id="scale-str"),
    pytest.param(lambda: _lora(weight=rand(N_, K_).requires_grad_()), RuntimeError, "weight requires grad",
                 id="weight-requires-grad"),
    pytest.param(lambda: _lora(version="v9"), ValueError, "version='v9' is not one of", id="version"),
    pytest.param(lambda: _lora(x=rand(M_, 7), weight=rand(N_, 7), lora_a=rand(r_, 7), version="v3"),
                 ValueError, "version='v3' cannot run: K = 7", id="v3-odd-K"),
    pytest.param(lambda: _lora(fwd_config=MlpConfig()), TypeError,
                 "fwd_config must be a GemmConfig or BranchConfig .*got MlpConfig", id="fwd_config-type"),
    pytest.param(lambda: _lora(bwd_config=BranchConfig()), TypeError, "bwd_config must be a GemmConfig",
                 id="bwd_config-type"),
]
# fmt: on


@pytest.mark.parametrize("call, error, pattern", LORA_BAD_INPUTS)
def test_lora_linear_bad_inputs(call, error, pattern):
    _expect(call, error, pattern)


@pytest.mark.parametrize("version", ["v0", "v1", "v3"])
def test_lora_linear_strided_bias_is_read_through_its_stride(version, seed):
    """The v2/v3 epilogue reads bias[cols] with unit stride: a strided bias gave wrong sums there."""
    x, w, a, b = rand(32, 64), rand(64, 64), rand(8, 64), rand(64, 8)
    bias = rand(128)[::2]
    out = lora_linear(x, w, a, b, 0.5, bias, version=version)
    torch.testing.assert_close(out, reference.lora_linear(x, w, a, b, 0.5, bias), atol=1e-4, rtol=1e-4)


# ---- add_multi_lora / build_meta ----------------------------------------------------------------------

T_, KM, NM, RM, L_ = 5, 8, 6, 2, 3


def _ids():
    return torch.tensor([0, 2, -1, 1, 2], device=DEV)


def _ml(y=None, x=None, lora_a=None, lora_b=None, adapter_ids=None, scale=0.5, **kwargs):
    return add_multi_lora(
        rand(T_, NM) if y is None else y,
        rand(T_, KM) if x is None else x,
        rand(L_, RM, KM) if lora_a is None else lora_a,
        rand(L_, NM, RM) if lora_b is None else lora_b,
        _ids() if adapter_ids is None else adapter_ids,
        scale,
        **kwargs,
    )


def _shared_buffer():
    """x and y as column bands of one buffer, y's band overlapping x's last column."""
    buf = rand(T_, KM + NM)
    return buf[:, KM - 1 : KM - 1 + NM], buf[:, :KM]


# fmt: off
MULTI_LORA_BAD_INPUTS = [
    pytest.param(lambda: _ml(y=rand(1, NM).expand(T_, NM)), ValueError, "y has elements that share memory",
                 id="y-broadcast"),
    pytest.param(lambda: _ml(*_shared_buffer()), ValueError, r"y \(shape \(5, 6\).*overlaps x",
                 id="y-overlaps-x"),
    pytest.param(lambda: (lambda y: _ml(y=y, scale=y[0, :L_]))(rand(T_, NM)), ValueError,
                 "y .* overlaps scale", id="y-overlaps-scale"),
    pytest.param(lambda: _ml(y=rand(T_, NM, dtype=F16)), TypeError, "y has dtype torch.float16 but x has",
                 id="y-dtype"),
    pytest.param(lambda: _ml(x=rand(T_, KM, dtype=F64), y=rand(T_, NM, dtype=F64)), TypeError,
                 "x has dtype torch.float64, not supported", id="x-f64"),
    pytest.param(lambda: _ml(y=rand(T_, NM, device=OTHER)), ValueError, "y is on meta", id="y-device"),
    pytest.param(lambda: _ml(y=rand(T_ - 1, NM)), ValueError, "y has 4 rows but x has 5", id="y-rows"),
    pytest.param(lambda: _ml(y=rand(T_, NM + 1)), ValueError, r"widths \[6\] sum to 6, but y has 7 columns",
                 id="y-columns"),
    pytest.param(lambda: _ml(x=rand(T_ * KM)), ValueError, "x must be a 2-D tensor", id="x-1d"),
    pytest.param(lambda: _ml(x=[[0.0] * KM] * T_), TypeError, "x must be a torch.Tensor, got list",
                 id="x-list"),
    pytest.param(lambda: _ml(lora_a=rand(RM, KM)), ValueError, r"lora_a must be \[L, r, K\]", id="lora_a-2d"),
    pytest.param(lambda: _ml(lora_a=rand(L_, RM, KM + 1)), ValueError, "lora_a has K = 9 but x has K = 8",
                 id="lora_a-K"),
    pytest.param(lambda: _ml(lora_b=rand(L_, NM, RM + 1)), ValueError,
                 "mismatched ranks: lora_a has r = 2 but lora_b has r = 3", id="rank-mismatch"),
    pytest.param(lambda: _ml(lora_b=rand(L_ + 1, NM, RM)), ValueError, "every stack must hold the same L = 3",
                 id="adapters-mismatch"),
    pytest.param(lambda: _ml(lora_a=rand(L_, 129, KM), lora_b=rand(L_, NM, 129)), ValueError,
                 r"rank r = 129 is not supported \(1 ≤ r ≤ 128", id="rank-above-MAX_RANK"),
    pytest.param(lambda: _ml(lora_a=rand(L_, RM, KM, dtype=F16)), TypeError, "lora_a has dtype torch.float16",
                 id="lora_a-dtype"),
    pytest.param(lambda: _ml(lora_b=rand(L_, NM, RM, device=OTHER)), ValueError, "lora_b is on meta",
                 id="lora_b-device"),
    pytest.param(lambda: _ml(lora_a=[rand(L_, RM, KM)], lora_b=rand(L_, NM, RM)), TypeError,
                 "lora_a and lora_b must both be tensors or both be sequences", id="slices-mixed"),
    pytest.param(lambda: _ml(lora_a=[rand(L_, RM, KM)] * 2, lora_b=[rand(L_, 3, RM)]), ValueError,
                 "sequences of the same length", id="slices-count"),
    pytest.param(lambda: _ml(lora_a=[], lora_b=[]), ValueError, "no slices", id="slices-none"),
    pytest.param(
        lambda: _ml(
            lora_a=[rand(L_, RM, KM), rand(L_, RM, 2 * KM)[:, :, ::2]],
            lora_b=[rand(L_, 3, RM), rand(L_, 3, RM)],
        ),
        ValueError,
        r"slices must share their innermost strides.*lora_a\[1\]",
        id="slices-inner-strides",
    ),
    pytest.param(lambda: _ml(adapter_ids=_ids()[:4]), ValueError,
                 r"adapter_ids must be a \[T\] = \[5\] tensor", id="adapter_ids-length"),
    pytest.param(lambda: _ml(adapter_ids=_ids().float()), TypeError, "adapter_ids has dtype torch.float32",
                 id="adapter_ids-float"),
    pytest.param(lambda: _ml(adapter_ids=_ids().to(OTHER)), ValueError, "adapter_ids is on meta",
                 id="adapter_ids-device"),
    pytest.param(lambda: _ml(scale=rand(L_ + 1)), ValueError,
                 r"a scale tensor must be floating point of shape \[L\] = \[3\]", id="scale-shape"),
    pytest.param(lambda: _ml(scale=torch.ones(L_, dtype=I32, device=DEV)), ValueError,
                 "a scale tensor must be floating point", id="scale-int"),
    pytest.param(lambda: _ml(scale=rand(L_, device=OTHER)), ValueError, "scale is on meta",
                 id="scale-device"),
    pytest.param(lambda: _ml(scale="0.5"), TypeError, "scale must be a float or an \\[L\\] tensor, got str",
                 id="scale-str"),
    pytest.param(lambda: _ml(meta=build_meta(_ids()[:4], L_)), ValueError, "meta is for 4 tokens",
                 id="meta-tokens"),
    pytest.param(lambda: _ml(meta={"counts": None}), TypeError,
                 "meta must be build_meta.s MultiLoRAMeta or None, got dict", id="meta-type"),
    pytest.param(lambda: _ml(path="sgmv"), ValueError, "path='sgmv' must be", id="path"),
]
# fmt: on


@pytest.mark.parametrize("call, error, pattern", MULTI_LORA_BAD_INPUTS)
def test_add_multi_lora_bad_inputs(call, error, pattern):
    _expect(call, error, pattern)


def test_add_multi_lora_refused_call_leaves_y_unchanged(monkeypatch):
    """y is written in place: every refusal comes before a kernel touches it (ids out of range included,
    checked on a GPU under FUSED_KERNELS_DEBUG=1)."""
    monkeypatch.setenv(DEBUG_ENV, "1")
    y_buf, x_buf = rand(T_, NM), rand(T_, KM)
    base = rand(1, NM)
    cases = [
        (
            y_buf,
            lambda: _ml(y=y_buf, adapter_ids=torch.tensor([0, 3, -1, 1, 2], device=DEV)),
            "adapter_ids\\[1\\] = 3",
        ),
        (y_buf, lambda: _ml(y=y_buf, scale=rand(L_ + 1)), "scale"),
        (y_buf, lambda: _ml(y=y_buf, lora_b=rand(L_, NM, RM + 1)), "lora_b has r = 3"),
        (base, lambda: _ml(y=base.expand(T_, NM)), "y has elements that share memory"),
        (x_buf, lambda: _ml(y=x_buf[:, :NM], x=x_buf), "y .* overlaps x"),
    ]
    for watched, call, pattern in cases:
        before = watched.clone()
        with pytest.raises(ValueError, match=pattern):
            call()
        assert torch.equal(watched, before), pattern


def test_add_multi_lora_handles_strided_scale_and_column_bands(seed):
    """A strided [L] scale tensor (the kernels index scale[adapter]) and x, y as separate column bands of one
    buffer (allowed: they share no element) give the reference's answer."""
    ids, a, b = _ids(), rand(L_, RM, KM), rand(L_, NM, RM)
    scale = rand(2 * L_)[::2]
    buf = rand(T_, KM + NM)
    x, y = buf[:, :KM], buf[:, KM:]
    want = reference.multi_lora(y.double(), x.double(), a.double(), b.double(), ids, scale.double())
    add_multi_lora(y, x, a, b, ids, scale)
    torch.testing.assert_close(y, want.float(), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(x, buf[:, :KM])  # x itself untouched (a view of the same buffer)


# fmt: off
BUILD_META_BAD_INPUTS = [
    pytest.param(lambda: build_meta(_ids().view(1, -1), L_), ValueError,
                 r"adapter_ids must be a 1-D tensor \[T\]", id="ids-2d"),
    pytest.param(lambda: build_meta([0, 1], L_), ValueError, "adapter_ids must be a 1-D tensor",
                 id="ids-list"),
    pytest.param(lambda: build_meta(_ids().float(), L_), TypeError, "adapter_ids has dtype torch.float32",
                 id="ids-float"),
    pytest.param(lambda: build_meta(_ids(), 0), ValueError, "num_adapters=0 must be an int ≥ 1", id="L-0"),
    pytest.param(lambda: build_meta(_ids(), 3.0), ValueError, "num_adapters=3.0 must be an int",
                 id="L-float"),
    pytest.param(lambda: build_meta(torch.tensor([0, 7, 1], device=DEV), L_, validate=True), ValueError,
                 r"adapter_ids\[1\] = 7 is out of range", id="ids-out-of-range"),
    pytest.param(lambda: build_meta(torch.tensor([0, -2], device=DEV), L_, validate=True), ValueError,
                 r"adapter_ids\[1\] = -2 is out of range", id="ids-below-minus-1"),
    pytest.param(lambda: build_meta(_ids(), 2**17), ValueError,
                 "num_adapters=131072 are too many for the one-pass grouping", id="L-too-many"),
    pytest.param(lambda: build_meta(_ids().to(OTHER), L_), ValueError, "adapter_ids is on meta",
                 id="ids-device"),
]
# fmt: on


@pytest.mark.parametrize("call, error, pattern", BUILD_META_BAD_INPUTS)
def test_build_meta_bad_inputs(call, error, pattern):
    _expect(call, error, pattern)


# ---- interaction_dot -----------------------------------------------------------------------------------

# fmt: off
INTERACTION_BAD_INPUTS = [
    pytest.param(lambda: interaction_dot([[0.0] * 4] * 2, rand(2, 3, 4)), TypeError,
                 "dense must be a torch.Tensor, got list", id="dense-list"),
    pytest.param(lambda: interaction_dot(rand(2, 4), None), TypeError,
                 "sparse must be a torch.Tensor, got NoneType", id="sparse-none"),
    pytest.param(lambda: interaction_dot(rand(2, 4, dtype=F64), rand(2, 3, 4, dtype=F64)), TypeError,
                 "dense has dtype torch.float64, not supported", id="dense-f64"),
    pytest.param(lambda: interaction_dot(rand(2, 4), rand(2, 3, 4, dtype=F16)), TypeError,
                 "sparse has dtype torch.float16 but dense has torch.float32", id="sparse-dtype"),
    pytest.param(lambda: interaction_dot(rand(2, 4), rand(2, 3, 4, device=OTHER)), ValueError,
                 "sparse is on meta", id="sparse-device"),
    pytest.param(lambda: interaction_dot(rand(8), rand(2, 3, 4)), ValueError, r"dense must be \[B, D\]",
                 id="dense-1d"),
    pytest.param(lambda: interaction_dot(rand(2, 4), rand(2, 12)), ValueError, r"sparse \[B, Fs, D\]",
                 id="sparse-2d"),
    pytest.param(lambda: interaction_dot(rand(2, 4), rand(3, 3, 4)), ValueError,
                 r"sparse \(3, 3, 4\) does not match dense", id="B-mismatch"),
    pytest.param(lambda: interaction_dot(rand(2, 4), rand(2, 3, 5)), ValueError,
                 "does not match dense .* in B or D", id="D-mismatch"),
    pytest.param(lambda: interaction_dot(rand(1, 1), rand(1, 1024, 1)), ValueError,
                 "F = 1025 vectors of D = 1 do not fit one program's tiles", id="F-too-large"),
    pytest.param(lambda: interaction_dot(rand(1, 2**20 + 1), rand(1, 0, 2**20 + 1)), ValueError,
                 "D = 1048577 do not fit", id="D-too-large"),
]
# fmt: on


@pytest.mark.parametrize("call, error, pattern", INTERACTION_BAD_INPUTS)
def test_interaction_dot_bad_inputs(call, error, pattern):
    _expect(call, error, pattern)


def test_interaction_dot_handles_edge_shapes(seed):
    dense = rand(3, 5)
    torch.testing.assert_close(interaction_dot(dense, rand(3, 0, 5)), dense)  # Fs = 0: no pairs
    assert interaction_dot(rand(0, 5), rand(0, 2, 5)).shape == (0, 5 + 3)  # B = 0
    sparse = rand(3, 2, 5)
    torch.testing.assert_close(interaction_dot(dense, sparse), reference.interaction_dot(dense, sparse))


# ---- bias_relu, add_mul_act, vector_add ---------------------------------------------------------------

# fmt: off
BIAS_RELU_BAD_INPUTS = [
    pytest.param(lambda: bias_relu([[1.0] * 8], rand(8)), TypeError, "x must be a torch.Tensor, got list",
                 id="x-list"),
    pytest.param(lambda: bias_relu(rand(4, 8), 0.5), TypeError, "bias must be a torch.Tensor, got float",
                 id="bias-float"),
    pytest.param(lambda: bias_relu(rand(4, 8), rand(8), out="out"), TypeError, "out must be a torch.Tensor",
                 id="out-str"),
    pytest.param(lambda: bias_relu(rand(4, 8, dtype=F64), rand(8, dtype=F64)), TypeError,
                 "x has dtype torch.float64, not supported", id="x-f64"),
    pytest.param(lambda: bias_relu(rand(4, 8), rand(8, dtype=F16)), TypeError,
                 "bias has dtype torch.float16 but x has torch.float32", id="bias-dtype"),
    pytest.param(lambda: bias_relu(rand(4, 8), rand(8, device=OTHER)), ValueError, "bias is on meta",
                 id="bias-device"),
    pytest.param(lambda: bias_relu(rand(4, 8), rand(7)), ValueError,
                 r"bias must have shape \(8,\).*got \(7,\)", id="bias-len"),
    pytest.param(lambda: bias_relu(rand(4, 8), rand(1, 8)), ValueError, r"bias must have shape \(8,\)",
                 id="bias-2d"),
    pytest.param(lambda: bias_relu(rand(()), rand(1)), ValueError, "x must have at least 1 dimension",
                 id="x-0d"),
    pytest.param(lambda: bias_relu(rand(4, 8), rand(8), out=rand(4, 9)), ValueError,
                 r"out has shape \(4, 9\)", id="out-shape"),
    pytest.param(lambda: bias_relu(rand(4, 8), rand(8), out=rand(4, 8, dtype=F16)), TypeError,
                 "out has dtype torch.float16", id="out-dtype"),
    pytest.param(lambda: bias_relu(rand(4, 8), rand(8), out=rand(4, 8, device=OTHER)), ValueError,
                 "out is on meta", id="out-device"),
    pytest.param(lambda: bias_relu(rand(4, 8), rand(8), out=rand(4, 8), inplace=True), ValueError, "not both",
                 id="out-and-inplace"),
    pytest.param(lambda: bias_relu(rand(4, 8).requires_grad_(), rand(8), out=rand(4, 8)), RuntimeError,
                 "out= does not support autograd", id="out-autograd"),
    pytest.param(lambda: bias_relu(rand(2, 8, 6).transpose(0, 1), rand(6), inplace=True), ValueError,
                 "x of shape .* cannot be flattened to 2-D without a copy", id="inplace-not-viewable"),
]
# fmt: on


@pytest.mark.parametrize("call, error, pattern", BIAS_RELU_BAD_INPUTS)
def test_bias_relu_bad_inputs(call, error, pattern):
    _expect(call, error, pattern)


# (what is written, the call, the pattern): the call must raise ValueError and leave `written` unchanged.
# fmt: off
BIAS_RELU_IN_PLACE = [
    pytest.param(lambda b: (b, lambda: bias_relu(rand(4, 8), rand(8), out=b[:8].expand(4, 8))),
                 "out has elements that share memory", id="out-broadcast"),
    pytest.param(lambda b: (b, lambda: bias_relu(b[:8].expand(4, 8), rand(8), inplace=True)),
                 "x has elements that share memory", id="inplace-broadcast-x"),
    pytest.param(lambda b: (b, lambda: bias_relu(b.view(4, 8)[:, :7], rand(7), out=b.view(4, 8)[:, 1:])),
                 r"out \(shape \(4, 7\).*overlaps x", id="out-shifted-over-x"),
    pytest.param(lambda b: (b, lambda: bias_relu(b.view(4, 8)[:, :4].t(), rand(4), out=b.view(4, 8)[:, :4])),
                 r"out \(shape \(4, 4\), strides \(8, 1\)\) overlaps x \(shape \(4, 4\), strides \(1, 8\)\)",
                 id="out-is-x-transposed"),
    pytest.param(lambda b: (b, lambda: bias_relu(rand(4, 8), b[:8], out=b.view(4, 8))),
                 "out .* overlaps bias", id="out-overlaps-bias"),
    pytest.param(lambda b: (b, lambda: bias_relu(b.view(4, 8), b[8:16], inplace=True)), "x .* overlaps bias",
                 id="inplace-bias-is-a-row-of-x"),
]
# fmt: on


@pytest.mark.parametrize("make, pattern", BIAS_RELU_IN_PLACE)
def test_bias_relu_refused_in_place_write_changes_nothing(make, pattern):
    buf = rand(32)
    written, call = make(buf)
    before = written.clone()
    with pytest.raises(ValueError, match=pattern):
        call()
    assert torch.equal(written, before)


def test_bias_relu_in_place_on_x_itself_is_allowed(seed):
    x, bias = rand(4, 8), rand(8)
    want = reference.bias_relu(x, bias)
    assert bias_relu(x, bias, out=x) is x  # out *is* x: each element read, then written, by one program
    torch.testing.assert_close(x, want, atol=0, rtol=0)
    x = rand(2, 16)
    want = reference.bias_relu(x.view(4, 8), bias)
    bias_relu(x.view(4, 8), bias, out=x.view(4, 8))  # another object, the same view: in place too
    torch.testing.assert_close(x.view(4, 8), want, atol=0, rtol=0)


# fmt: off
ADD_MUL_ACT_BAD_INPUTS = [
    pytest.param(lambda: add_mul_act(rand(4, 8), rand(8), rand(4, 8), activation="tanh"), ValueError,
                 "activation 'tanh' is not one of", id="activation"),
    pytest.param(lambda: add_mul_act(rand(4, 8), rand(8), rand(4, 8), alpha=torch.tensor(1.0)), TypeError,
                 "alpha must be a Python float .*got Tensor", id="alpha-tensor"),
    pytest.param(lambda: add_mul_act(rand(4, 8), rand(8), rand(4, 8), alpha="1"), TypeError,
                 "alpha must be a Python float .*got str", id="alpha-str"),
    pytest.param(lambda: add_mul_act(rand(4, 8), rand(8), [[0.0] * 8] * 4), TypeError,
                 "y must be a torch.Tensor", id="y-list"),
    pytest.param(lambda: add_mul_act(rand(4, 8, dtype=F64), rand(8, dtype=F64), rand(4, 8, dtype=F64)),
                 TypeError, "x has dtype torch.float64, not supported", id="x-f64"),
    pytest.param(lambda: add_mul_act(rand(4, 8), rand(8), rand(4, 8, dtype=F16)), TypeError,
                 "y has dtype torch.float16 but x has torch.float32", id="y-dtype"),
    pytest.param(lambda: add_mul_act(rand(4, 8), rand(8), rand(4, 8, device=OTHER)), ValueError,
                 "y is on meta", id="y-device"),
    pytest.param(lambda: add_mul_act(rand(4, 8), rand(8), rand(4, 9)), ValueError, r"y has shape \(4, 9\)",
                 id="y-shape"),
    pytest.param(lambda: add_mul_act(rand(4, 8), rand(9), rand(4, 8)), ValueError,
                 r"bias must have shape \(8,\)", id="bias-shape"),
    pytest.param(lambda: add_mul_act(rand(()), rand(1), rand(())), ValueError,
                 "x must have at least 1 dimension", id="x-0d"),
]
# fmt: on


@pytest.mark.parametrize("call, error, pattern", ADD_MUL_ACT_BAD_INPUTS)
def test_add_mul_act_bad_inputs(call, error, pattern):
    _expect(call, error, pattern)


# fmt: off
VECTOR_ADD_BAD_INPUTS = [
    pytest.param(lambda: vector_add([1.0], rand(1)), TypeError, "x must be a torch.Tensor", id="x-list"),
    pytest.param(lambda: vector_add(rand(3), rand(4)), ValueError, r"shapes differ, x \(3,\) vs y \(4,\)",
                 id="shape"),
    pytest.param(lambda: vector_add(rand(3), rand(3, dtype=F64)), TypeError, "dtypes differ", id="dtype"),
    pytest.param(lambda: vector_add(rand(3), rand(3, device=OTHER)), ValueError,
                 "devices differ, x on .* y on meta", id="device"),
    pytest.param(lambda: vector_add(rand(3, device=OTHER), rand(3, device=OTHER)), ValueError,
                 "x is on meta; Triton kernels need CUDA tensors", id="meta"),
    pytest.param(lambda: vector_add(rand(3, dtype=torch.complex64), rand(3, dtype=torch.complex64)),
                 TypeError, "x has dtype torch.complex64, not supported", id="complex"),
    pytest.param(lambda: vector_add(*torch.ones(2, 3, dtype=torch.bool, device=DEV)), TypeError,
                 "x has dtype torch.bool, not supported", id="bool"),
    pytest.param(lambda: vector_add(rand(3), rand(3), block=100), ValueError,
                 "block must be a power of two from 1 to 1048576 .*got 100", id="block-not-pow2"),
    pytest.param(lambda: vector_add(rand(3), rand(3), block=0), ValueError, "block must be a power of two",
                 id="block-0"),
    pytest.param(lambda: vector_add(rand(3), rand(3), block=2**21), ValueError,
                 "block must be a power of two", id="block-too-large"),
]
# fmt: on


@pytest.mark.parametrize("call, error, pattern", VECTOR_ADD_BAD_INPUTS)
def test_vector_add_bad_inputs(call, error, pattern):
    _expect(call, error, pattern)


# ---- fused_mlp -----------------------------------------------------------------------------------------


def _mlp(x=None, w1=None, b1=None, w2=None, b2=None, **kwargs):
    with torch.no_grad():
        return fused_mlp(
            rand(4, 8) if x is None else x,
            rand(16, 8) if w1 is None else w1,
            rand(16) if b1 is None else b1,
            rand(3, 16) if w2 is None else w2,
            rand(3) if b2 is None else b2,
            **kwargs,
        )


# fmt: off
FUSED_MLP_BAD_INPUTS = [
    pytest.param(lambda: _mlp(final_activation="tanh"), ValueError, "final_activation 'tanh' is not one of",
                 id="activation"),
    pytest.param(lambda: _mlp(w1=[[0.0]]), TypeError, "w1 must be a torch.Tensor, got list", id="w1-list"),
    pytest.param(lambda: _mlp(x=rand(4, 8, dtype=F64)), TypeError, "x has dtype torch.float64, not supported",
                 id="x-f64"),
    pytest.param(lambda: _mlp(b2=rand(3, dtype=F16)), TypeError, "b2 has dtype torch.float16 but x has",
                 id="b2-dtype"),
    pytest.param(lambda: _mlp(w2=rand(3, 16, device=OTHER)), ValueError, "w2 is on meta", id="w2-device"),
    pytest.param(lambda: _mlp(x=rand(())), ValueError, "x must have at least 1 dimension", id="x-0d"),
    pytest.param(lambda: _mlp(w1=rand(16, 9)), ValueError, r"w1 must be \[H, K\] with K = .* = 8", id="w1-K"),
    pytest.param(lambda: _mlp(b1=rand(15)), ValueError, r"b1 must have shape \(16,\)", id="b1-shape"),
    pytest.param(lambda: _mlp(w2=rand(3, 15)), ValueError, r"w2 must be \[N, H\] with H = 16", id="w2-H"),
    pytest.param(lambda: _mlp(b2=rand(4)), ValueError, r"b2 must have shape \(3,\)", id="b2-shape"),
    pytest.param(lambda: _mlp(w1=rand(257, 8), b1=rand(257), w2=rand(3, 257)), ValueError,
                 "hidden width H=257 is outside 1..256", id="H-too-wide"),
    pytest.param(lambda: _mlp(w1=rand(0, 8), b1=rand(0), w2=rand(3, 0)), ValueError,
                 "hidden width H=0 is outside 1..256", id="H-0"),
    pytest.param(lambda: _mlp(config={"block_m": 16}), TypeError, "config must be an MlpConfig .*got dict",
                 id="config-type"),
    pytest.param(lambda: _mlp(config=MlpConfig(block_h=8)), ValueError, "config.block_h=8 does not cover",
                 id="block_h"),
    pytest.param(lambda: _mlp(config=MlpConfig(block_m=8)), ValueError, r"config \{'block_m': 8\} below 16",
                 id="block_m-8"),
    pytest.param(lambda: _mlp(config=MlpConfig(block_m=8192, block_h=256)), ValueError,
                 "block_m \\* block_h = 2097152 is above", id="tile-too-large"),
    pytest.param(lambda: fused_mlp(rand(4, 8).requires_grad_(), rand(16, 8), rand(16), rand(3, 16), rand(3)),
                 RuntimeError, "forward-only", id="requires-grad"),
]
# fmt: on


@pytest.mark.parametrize("call, error, pattern", FUSED_MLP_BAD_INPUTS)
def test_fused_mlp_bad_inputs(call, error, pattern):
    _expect(call, error, pattern)


def test_fused_mlp_handles_empty_reductions(seed):
    """K = 0 (x W1ᵀ is all zeros: h = relu(b1)) and M = 0, with an N-D x."""
    w1, b1, w2, b2 = rand(16, 0), rand(16), rand(3, 16), rand(3)
    x = rand(2, 3, 0)
    with torch.no_grad():
        out = fused_mlp(x, w1, b1, w2, b2)
        assert fused_mlp(rand(0, 5, 0), w1, b1, w2, b2).shape == (0, 5, 3)
    torch.testing.assert_close(out, reference.fused_mlp(x, w1, b1, w2, b2), atol=1e-5, rtol=1e-5)


# ---- offsets that would overflow int32 (the limit lowered: the same code path, tiny tensors) -----------
# A kernel indexes columns in int32: an input whose ``index * stride`` reaches the limit is copied (the same
# result), an output written in place is refused (unchanged). INT32_LIMIT is 2**31; lowered to 16 here, the
# transposed tiny tensors below cross it.


@pytest.fixture
def small_int32(monkeypatch):
    monkeypatch.setattr(launch, "INT32_LIMIT", 16)


def test_int32_offsets_pointwise(small_int32, seed):
    xt, bias, yt = rand(16, 8).t(), rand(16), rand(16, 8).t()  # [8, 16], column stride 8: 15 * 8 >= 16
    torch.testing.assert_close(bias_relu(xt, bias), reference.bias_relu(xt, bias), atol=0, rtol=0)
    want = reference.add_mul_act(xt, bias, yt, 0.5, "silu")
    torch.testing.assert_close(add_mul_act(xt, bias, yt, 0.5, "silu"), want, atol=1e-6, rtol=1e-5)
    before = xt.clone()
    with pytest.raises(
        ValueError, match=r"x \(shape \(8, 16\), strides \(1, 8\)\) is too large for .* int32"
    ):
        bias_relu(xt, bias, inplace=True)
    assert torch.equal(xt, before)
    out = rand(16, 8).t()
    before = out.clone()
    with pytest.raises(ValueError, match="out .* is too large for the kernel's int32 offsets"):
        bias_relu(xt, bias, out=out)
    assert torch.equal(out, before)


def test_int32_offsets_interaction_mlp_lora(small_int32, seed):
    dense, sparse = rand(3, 5), rand(5, 3, 3).permute(2, 1, 0)  # sparse [3, 3, 5], strides (1, 3, 9)
    torch.testing.assert_close(interaction_dot(dense, sparse), reference.interaction_dot(dense, sparse))
    x, w1, b1, w2, b2 = rand(12, 4).t(), rand(16, 12), rand(16), rand(3, 16), rand(3)
    with torch.no_grad():
        want = reference.fused_mlp(x, w1, b1, w2, b2)
        torch.testing.assert_close(fused_mlp(x, w1, b1, w2, b2), want, atol=1e-5, rtol=1e-5)
    x, w, a, b = rand(8, 6).t(), rand(8, 8), rand(2, 8), rand(8, 2)
    want = reference.lora_linear(x, w, a, b, 0.5)
    torch.testing.assert_close(lora_linear(x, w, a, b, 0.5, version="v1"), want, atol=1e-5, rtol=1e-5)


def test_int32_offsets_multi_lora(small_int32, seed):
    ids, a, b = _ids(), rand(L_, RM, KM), rand(L_, NM, RM)
    x, y = rand(KM, T_).t(), rand(T_, NM)  # x's column stride 5: 7 * 5 >= 16
    want = reference.multi_lora(y.double(), x.double(), a.double(), b.double(), ids, 0.5)
    add_multi_lora(y, x, a, b, ids, 0.5)
    torch.testing.assert_close(y, want.float(), atol=1e-5, rtol=1e-5)
    y = rand(NM, T_).t()  # written in place: refused
    before = y.clone()
    with pytest.raises(ValueError, match="y .* is too large for the kernel's int32 offsets"):
        add_multi_lora(y, x, a, b, ids, 0.5)
    assert torch.equal(y, before)


def test_int32_offsets_vector_add(monkeypatch):
    monkeypatch.setattr(launch, "INT32_LIMIT", 2000)  # pid * BLOCK + arange in int32: n + BLOCK <= 2**31
    with pytest.raises(
        ValueError, match="x has 1000 elements; this kernel's int32 offsets cover at most 976"
    ):
        vector_add(rand(1000), rand(1000))


# ---- kernels.cuda: the Python checks (the C++ ones: tests/kernels/test_cuda_binding.py, on a GPU) -------


def _cuda_check(x, bias, y=None):
    kernels_cuda.check_inputs("add_mul_relu" if y is not None else "bias_relu", x, bias, y, need_cuda=False)


CPU = "cpu"
# fmt: off
CUDA_PYTHON_BAD_INPUTS = [
    pytest.param(lambda: kernels_cuda.check_inputs("bias_relu", rand(4, 8, device=CPU), rand(8, device=CPU)),
                 ValueError, r"bias_relu: x must be a CUDA tensor, got one on cpu \(these are CUDA kernels",
                 id="cpu"),
    pytest.param(lambda: _cuda_check(rand(4, 8, device=CPU), rand(8, device=OTHER)), ValueError,
                 "bias_relu: bias is on meta but x is on cpu", id="bias-device"),
    pytest.param(lambda: _cuda_check(rand(4, 8, dtype=F64, device=CPU), rand(8, dtype=F64, device=CPU)),
                 TypeError,
                 r"bias_relu: dtype torch.float64 is not supported \(use float32, float16 or bfloat16\)",
                 id="f64"),
    pytest.param(lambda: _cuda_check(rand(4, 8, device=CPU), rand(8, dtype=F16, device=CPU)), TypeError,
                 "bias_relu: bias has dtype torch.float16 but x has torch.float32", id="bias-dtype"),
    pytest.param(
        lambda: _cuda_check(rand(4, 8, device=CPU), rand(7, device=CPU)),
        ValueError,
        r"bias_relu: bias must have shape \[8\] \(the last dim of x, whose shape is \[4, 8\]\), got \[7\]$",
        id="bias-len",
    ),
    pytest.param(lambda: _cuda_check(rand(4, 8, device=CPU), rand(1, 8, device=CPU)), ValueError,
                 r"got \[1, 8\]$", id="bias-2d"),
    pytest.param(
        lambda: _cuda_check(rand(8, 4, device=CPU).t(), rand(8, device=CPU)),
        ValueError,
        r"x must be contiguous, got shape \[4, 8\] with strides \[1, 4\]; call .contiguous\(\) first",
        id="x-transposed",
    ),
    pytest.param(lambda: _cuda_check(rand(4, 8, device=CPU), rand(16, device=CPU)[::2]), ValueError,
                 r"bias must be contiguous, got strides \[2\]$", id="bias-strided"),
    pytest.param(lambda: _cuda_check(rand((), device=CPU), rand(1, device=CPU)), ValueError,
                 "x must have at least 1 dimension, got a 0-d tensor", id="0d"),
    pytest.param(lambda: _cuda_check(rand(4, 8, device=CPU), rand(8, device=CPU), rand(4, 9, device=CPU)),
                 ValueError, r"add_mul_relu: y must have x's shape \[4, 8\], got \[4, 9\]$", id="y-shape"),
    pytest.param(
        lambda: _cuda_check(rand(4, 8, device=CPU), rand(8, device=CPU), rand(4, 8, dtype=F16, device=CPU)),
        TypeError,
        "y has dtype torch.float16 but x has torch.float32",
        id="y-dtype",
    ),
    pytest.param(lambda: _cuda_check(rand(4, 8, device=CPU), rand(8, device=CPU), rand(8, 4, device=CPU).t()),
                 ValueError, r"y must be contiguous, got strides \[1, 4\]", id="y-transposed"),
    pytest.param(lambda: _cuda_check(rand(4, 8, device=CPU), rand(8, device=CPU), rand(4, 8, device=OTHER)),
                 ValueError, "y is on meta but x is on cpu", id="y-device"),
    pytest.param(lambda: _cuda_check(rand(4, 8, device=CPU), "bias"), TypeError,
                 "bias must be a torch.Tensor", id="bias-str"),
]
# fmt: on


@pytest.mark.parametrize("call, error, pattern", CUDA_PYTHON_BAD_INPUTS)
def test_cuda_python_checks(call, error, pattern):
    """kernels.cuda checks in Python with the C++ binding's words: runs on every machine."""
    _expect(call, error, pattern)
