"""The three profiling findings measure the models they say they measure, the way they say they do."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from lecture_code.model import BatchedModulusHash, IndexHash, ModulusHash, VocabularyHash
from lecture_code.perf import host_sync
from lecture_code.perf.hash_cost import (
    ALL_FEATURE_HASHES,
    HASHES,
    all_feature_hashes,
    aten_ops_per_call,
    hash_inputs,
    make_hash_module,
    time_all_features,
    time_hashes,
)
from lecture_code.perf.hashing_stages import (
    MODULUS_PER_FEATURE,
    STAGES,
    HostVocabularyIndexHash,
    make_stage_model,
    measure_hashing_stages,
)
from lecture_code.perf.host_sync import ITEM_EVERY_STEP, ON_DEVICE, measure_host_sync


def test_stage_models_agree_where_the_lookup_is_exact(tiny_workload):
    batch = tiny_workload.batches[0]
    logits = {}
    for stage in STAGES:
        model = make_stage_model(tiny_workload, stage, seed=1)
        with torch.no_grad():
            logits[stage] = model(batch.dense, batch.sparse)
    host, device, vocab, modulus_each, modulus_batched = logits.values()
    torch.testing.assert_close(host, device, rtol=0, atol=0)
    torch.testing.assert_close(device, vocab, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(modulus_each, modulus_batched, rtol=0, atol=0)  # same rows, same model
    assert not torch.allclose(vocab, modulus_batched)  # different rows: a different model


def test_stage_models_hash_the_way_their_label_says(tiny_workload):
    hashes = {stage: make_stage_model(tiny_workload, stage).sparse_arch.hashes for stage in STAGES}
    host, device, _, each, batched = hashes.values()
    assert all(isinstance(h, HostVocabularyIndexHash) for h in host)
    assert all(isinstance(h, IndexHash) for h in device)
    assert (
        isinstance(each, nn.ModuleList) and len(each) == 26 and all(isinstance(h, ModulusHash) for h in each)
    )
    assert isinstance(batched, BatchedModulusHash)
    model = make_stage_model(tiny_workload, "index hash, vocabularies on the host")
    assert not any("vocabulary" in name for name, _ in model.named_buffers())  # model.to() cannot move them
    with pytest.raises(ValueError, match="unknown stage"):
        make_stage_model(tiny_workload, "no such stage")


def test_hashing_stages_time_every_stage_interleaved(tiny_workload):
    rows = measure_hashing_stages(tiny_workload, steps=1, warmup=0, repeats=2)
    assert [r.label for r in rows] == list(STAGES)
    assert MODULUS_PER_FEATURE in STAGES
    for r in rows:
        assert len(r.samples_ms) == 2 and r.ms_min <= r.ms_per_step <= r.ms_max


def test_host_sync_reads_the_loss_only_where_it_says(tiny_workload, monkeypatch):
    """Count the steps and the ``.item()`` calls on the *losses* (Adam calls ``.item()`` on its own
    step counters, which must not count): one per step for ITEM_EVERY_STEP, none for ON_DEVICE, with the
    two variants' repeats interleaved."""
    log, losses = [], []
    make_step = host_sync.make_step

    def counting_make_step(model, **kwargs):
        step = make_step(model, **kwargs)

        def wrapped(batch):
            loss = step(batch)
            losses.append(loss)
            log.append("step")
            return loss

        return wrapped

    original_item = torch.Tensor.item

    def item(self):
        if any(self is loss for loss in losses):
            log.append("item")
        return original_item(self)

    monkeypatch.setattr(host_sync, "make_step", counting_make_step)
    monkeypatch.setattr(torch.Tensor, "item", item)
    rows = measure_host_sync(tiny_workload, steps=2, warmup=1, repeats=2)
    assert [r.label for r in rows] == [ITEM_EVERY_STEP, ON_DEVICE]
    synced, kept = ["step", "item"], ["step"]
    expected = (
        synced * 2  # ITEM: first step, warm-up
        + kept * 2  # ON_DEVICE: first step, warm-up
        + (synced * 2 + kept * 2) * 2  # two interleaved repeats of two steps each
        + synced  # ITEM's memory step
        + kept  # ON_DEVICE's memory step
    )
    assert log == expected
    for r in rows:
        assert r.steps == 2 and len(r.samples_ms) == 2 and r.ms_min <= r.ms_per_step <= r.ms_max


def test_hash_modules_and_timing():
    vocab, ids = hash_inputs(500, 300, torch.device("cpu"))
    assert vocab.numel() == 500 and bool((vocab[1:] > vocab[:-1]).all())
    kinds = [type(make_hash_module(name, vocab)) for name in HASHES]
    assert kinds == [IndexHash, VocabularyHash, ModulusHash]
    index, search = (make_hash_module(name, vocab)(ids) for name in HASHES[:2])
    torch.testing.assert_close(index, search)
    assert 0.5 < (index > 0).float().mean() < 1.0  # ~80 % of the ids are in the vocabulary
    rows = time_hashes([10, 100], 64, torch.device("cpu"), timer=lambda fn, device: float(fn().numel()))
    assert [(r["hash"], r["vocabulary"], r["ms"]) for r in rows[:3]] == [(h, 10, 64.0) for h in HASHES]


def test_all_feature_hashes_agree_and_batching_cuts_the_ops(tiny_workload):
    sparse = tiny_workload.batches[0].sparse  # on the workload's device: the GPU on a GPU machine
    hashes = {name: h.to(sparse.device) for name, h in all_feature_hashes(tiny_workload.metadata).items()}
    assert list(hashes) == list(ALL_FEATURE_HASHES)
    rows = {name: h(sparse) for name, h in hashes.items()}
    each_mod, batched_mod, each_vocab, batched_vocab = rows.values()
    assert torch.equal(each_mod, batched_mod) and torch.equal(each_vocab, batched_vocab)
    assert not torch.equal(batched_mod, batched_vocab)
    f = sparse.shape[1]
    ops = {name: aten_ops_per_call(lambda h=h: h(sparse)) for name, h in hashes.items()}
    for kind in ("modulus", "vocabulary"):
        each, batched = ops[f"{kind}, one module per feature"], ops[f"{kind}, all features at once"]
        assert each >= 2 * f and batched < f, ops  # F rounds of ops against one round

    timed = time_all_features(
        tiny_workload.metadata, sparse, timer=lambda fn, d: 1.5, host_timer=lambda fn, d: None
    )
    assert [r["hash"] for r in timed] == list(ALL_FEATURE_HASHES)
    assert [r["aten_ops"] for r in timed] == list(ops.values())
    assert all(r["ms"] == 1.5 and r["host_us"] is None and r["features"] == f for r in timed)


def _op(name, *children):
    from types import SimpleNamespace

    return SimpleNamespace(name=name, cpu_children=list(children))


def _gpu_shaped_events():
    """``prof.events()`` of ``ids % n`` then ``torch.stack`` on CUDA, shaped as the profiler records them:
    every op that runs a kernel has a ``cudaLaunchKernel`` child; allocations have none."""
    launch = _op("cudaLaunchKernel")
    empty = _op("aten::empty_strided")
    remainder = _op("aten::remainder", _op("aten::empty"), _op("cudaLaunchKernel"))
    copy = _op("aten::copy_", _op("cudaMemcpyAsync"))
    to = _op("aten::to", _op("aten::_to_copy", _op("aten::empty_strided"), copy))
    cat = _op("aten::cat", _op("aten::resize_"), launch)
    stack = _op("aten::stack", _op("aten::unsqueeze", _op("aten::as_strided")), cat)
    roots = [remainder, to, stack]
    flat = []

    def walk(e):
        flat.append(e)
        for c in e.cpu_children:
            walk(c)

    for r in roots + [empty]:
        walk(r)
    return flat


def test_count_aten_ops_on_a_gpu_shaped_trace():
    """The ops that do the work: remainder, copy_, as_strided, cat. Counting ops with no child at all (the
    old rule) gives the allocations and as_strided instead: the GPU run's "132 ... 3" column."""
    from lecture_code.perf.hash_cost import count_aten_ops, count_launches

    events = _gpu_shaped_events()
    assert count_aten_ops(events) == 4
    no_child = [e.name for e in events if e.name.startswith("aten::") and not e.cpu_children]
    assert sorted(no_child) == sorted(
        ["aten::empty", "aten::empty_strided", "aten::as_strided", "aten::resize_", "aten::empty_strided"]
    )
    assert count_launches(events) == 2  # remainder's and cat's kernels; the copy is a memcpy


def test_kernel_launches_per_call_is_none_off_a_gpu():
    from lecture_code.perf.hash_cost import kernel_launches_per_call

    assert kernel_launches_per_call(lambda: torch.ones(3) + 1, torch.device("cpu")) is None
