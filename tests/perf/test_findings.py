"""The three profiling findings and eager-vs-compiled measure the models they say they measure."""

from __future__ import annotations

import pytest
import torch

from lecture_code.model import IndexHash, ModulusHash, VocabularyHash
from lecture_code.perf.hash_cost import HASHES, hash_inputs, make_hash_module, time_hashes
from lecture_code.perf.hashing_stages import STAGES, HostVocabularyIndexHash, make_stage_model
from lecture_code.perf.host_sync import ITEM_EVERY_STEP, ON_DEVICE, measure_host_sync


def test_stage_models_agree_where_the_lookup_is_exact(tiny_workload):
    batch = tiny_workload.batches[0]
    logits = {}
    for stage in STAGES:
        model = make_stage_model(tiny_workload, stage, seed=1)
        with torch.no_grad():
            logits[stage] = model(batch.dense, batch.sparse)
    host, device, vocab, modulus = logits.values()
    torch.testing.assert_close(host, device, rtol=0, atol=0)
    torch.testing.assert_close(device, vocab, rtol=1e-6, atol=1e-6)
    assert not torch.allclose(vocab, modulus)  # different rows: a different model


def test_host_stage_keeps_its_vocabularies_off_the_module(tiny_workload):
    model = make_stage_model(tiny_workload, "index hash, vocabularies on the host")
    hashes = model.sparse_arch.hashes
    assert all(isinstance(h, HostVocabularyIndexHash) for h in hashes)
    assert not any("vocabulary" in name for name, _ in model.named_buffers())  # model.to() cannot move them
    with pytest.raises(ValueError, match="unknown stage"):
        make_stage_model(tiny_workload, "no such stage")


def test_host_sync_rows(tiny_workload):
    rows = measure_host_sync(tiny_workload, steps=2, warmup=0, repeats=1)
    assert [r.label for r in rows] == [ITEM_EVERY_STEP, ON_DEVICE]
    assert all(r.ms_per_step > 0 for r in rows)


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
