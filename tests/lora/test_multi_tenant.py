"""Multi-tenant DLRM scoring: one mixed pass through add_multi_lora against one merged model per market."""

from __future__ import annotations

import pytest
import torch
from lora_test_helpers import assert_close

from kernels.multi_lora.metadata import DEBUG_ENV, build_meta
from lecture_code.lora.multi_tenant import (
    make_setup,
    merged_models,
    over_arch_linears,
    score_mixed,
    score_per_market,
    time_serving,
)

# fp32 logits of O(1): merging reorders the sums of each over-arch layer (W + s·B A first, then · h) against
# h Wᵀ + s·(h Aᵀ) Bᵀ; measured ≤ 1e-6 of the largest logit, bound 2e-5 of it.
TOL = 2e-5


def _setup(batch, seed, markets=5, r=6):
    return make_setup(batch=batch, num_markets=markets, r=r, preset="small", seed=seed)


@pytest.mark.parametrize("batch", [1, 37, 129])
def test_a_mixed_batch_matches_one_merged_model_per_market(batch, seed):
    s = _setup(batch, seed)
    s.adapter_ids[0] = 2  # at least one request with an adapter, whatever the draw
    got = score_mixed(s.model, s.adapters, s.dense, s.sparse, s.adapter_ids)
    want = score_per_market(s.model, merged_models(s.model, s.adapters), s.dense, s.sparse, s.adapter_ids)
    assert got.shape == (batch,)
    assert_close(got, want, TOL, "mixed pass against merged models")
    base = s.model(s.dense, s.sparse)
    with_adapter = s.adapter_ids >= 0
    moved = (got[with_adapter] - base[with_adapter]).abs().max()  # else the test could not fail
    if batch > 1:  # one request's logit may by chance hardly move (3 in 150 draws at batch 1)
        assert moved > 100 * TOL * want.abs().max(), "the adapters hardly change the logits"


def test_rows_without_an_adapter_are_the_base_models_bitwise(seed):
    s = _setup(67, seed)
    s.adapter_ids[:3] = -1
    got = score_mixed(s.model, s.adapters, s.dense, s.sparse, s.adapter_ids)
    base = s.model(s.dense, s.sparse)
    none = s.adapter_ids < 0
    assert torch.equal(got[none], base[none])
    every = torch.full_like(s.adapter_ids, -1)
    assert torch.equal(score_mixed(s.model, s.adapters, s.dense, s.sparse, every), base)


def test_one_market_only_and_a_reused_meta(seed):
    s = _setup(33, seed, markets=3)
    ids = torch.full_like(s.adapter_ids, 2)
    merged = merged_models(s.model, s.adapters)
    want = merged[2](s.dense, s.sparse)
    assert_close(score_mixed(s.model, s.adapters, s.dense, s.sparse, ids), want, TOL, "one market")
    meta = build_meta(s.adapter_ids, 3)
    a = score_mixed(s.model, s.adapters, s.dense, s.sparse, s.adapter_ids, meta=meta)
    b = score_mixed(s.model, s.adapters, s.dense, s.sparse, s.adapter_ids)
    assert torch.equal(a, b)


def test_merging_leaves_the_base_model_alone(seed):
    s = _setup(8, seed, markets=2)
    before = {k: v.clone() for k, v in s.model.state_dict().items()}
    merged = merged_models(s.model, s.adapters)
    assert all(torch.equal(v, before[k]) for k, v in s.model.state_dict().items())
    w0 = over_arch_linears(s.model)["over_arch.model.0"].weight
    w_m = merged[1].over_arch.model[0].base.weight
    a, b, sc = s.adapters.lora_a[0][1], s.adapters.lora_b[0][1], float(s.adapters.scale[1])
    torch.testing.assert_close(w_m, w0 + sc * b @ a, atol=1e-6, rtol=1e-5)
    assert list(over_arch_linears(s.model)) == ["over_arch.model.0", "over_arch.model.2", "over_arch.model.4"]
    with pytest.raises(ValueError, match="LoRA-wrapped copy"):  # its linears sit inside LoRALinear
        over_arch_linears(merged[1])


def test_bad_inputs_raise_clear_errors(seed, monkeypatch):
    monkeypatch.setenv(
        DEBUG_ENV, "1"
    )  # on a GPU the id range check (a host sync) runs under the debug flag only
    s = _setup(9, seed, markets=3)
    args = (s.model, s.adapters, s.dense, s.sparse)
    with pytest.raises(ValueError, match=r"adapter_ids\[4\] = 3 is out of range"):
        bad = s.adapter_ids.clone()
        bad[4] = 3
        score_mixed(*args, bad)
    with pytest.raises(TypeError, match="use int32 or int64"):
        score_mixed(*args, s.adapter_ids.float())
    with pytest.raises(ValueError, match="must share B"):
        score_mixed(*args, s.adapter_ids[:-1])
    with pytest.raises(ValueError, match="1-D tensor"):
        score_mixed(*args, s.adapter_ids[None])
    other = make_setup(batch=9, num_markets=3, r=6, preset="kaggle", seed=seed)
    wrong = (
        r"over_arch.model.0 maps 367 → 512 features, but its adapters are A \(3, 6, 367\), B \(3, 128, 6\)"
    )
    with pytest.raises(ValueError, match=wrong):
        score_mixed(other.model, s.adapters, other.dense, other.sparse, other.adapter_ids)


def test_time_serving_reports_both_passes(seed):
    s = _setup(16, seed, markets=2)
    t = time_serving(s, cpu_reps=1)
    assert t.mixed_ms > 0 and t.per_market_ms > 0 and t.batch == 16 and t.markets == 2
    assert "one mixed pass" in str(t) and f"{t.speedup:.2f}x" in str(t)


@pytest.mark.gpu
def test_full_size_on_the_gpu():
    s = make_setup(device=torch.device("cuda"))  # kaggle preset, the full batch
    got = score_mixed(s.model, s.adapters, s.dense, s.sparse, s.adapter_ids)
    assert got.is_cuda
    want = score_per_market(s.model, merged_models(s.model, s.adapters), s.dense, s.sparse, s.adapter_ids)
    assert_close(got, want, TOL, "full size")
