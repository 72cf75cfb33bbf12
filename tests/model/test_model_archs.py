"""DenseArch, SparseArch, OverArch: shapes, values against direct formulas, DLRM's initialisation."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from dlrm_test_data import random_batch, random_metadata

from lecture_code.model import BatchedVocabularyHash, DenseArch, OverArch, SparseArch, make_hash, make_mlp

# fp32 on CPU: the reference is the same matmuls done op by op; only summation order may differ.
ATOL, RTOL = 1e-5, 1e-5


def _linears(module):
    return [m for m in module.modules() if isinstance(m, torch.nn.Linear)]


@pytest.mark.parametrize(("batch", "sizes"), [(32, (64, 32, 16)), (7, (5, 3))])
def test_dense_arch_shape_and_values(seed, batch, sizes):
    arch = DenseArch(13, sizes)
    dense = torch.randn(batch, 13)
    out = arch(dense)
    assert out.shape == (batch, sizes[-1])
    expected = dense
    for linear in _linears(arch):
        expected = F.relu(expected @ linear.weight.T + linear.bias)  # ReLU after every layer, last included
    torch.testing.assert_close(out, expected, atol=ATOL, rtol=RTOL)


@pytest.mark.parametrize(("batch", "in_features", "sizes"), [(32, 367, (128, 64, 1)), (5, 11, (1,))])
def test_over_arch_outputs_logits(seed, batch, in_features, sizes):
    arch = OverArch(in_features, sizes)
    features = torch.randn(batch, in_features)
    logits = arch(features)
    assert logits.shape == (batch,)
    expected = features
    linears = _linears(arch)
    for i, linear in enumerate(linears):
        expected = expected @ linear.weight.T + linear.bias
        if i < len(linears) - 1:
            expected = F.relu(expected)  # no activation after the last layer
    torch.testing.assert_close(logits, expected.squeeze(-1), atol=ATOL, rtol=RTOL)
    assert not isinstance(list(arch.model)[-1], torch.nn.ReLU | torch.nn.Sigmoid)
    with pytest.raises(ValueError, match="one logit"):
        OverArch(in_features, (8, 2))


def test_mlp_uses_dlrm_init(seed):
    mlp = make_mlp(512, (256,), final_activation=False)
    (linear,) = _linears(mlp)
    assert math.isclose(linear.weight.std().item(), math.sqrt(2 / (512 + 256)), rel_tol=0.05)
    assert math.isclose(linear.bias.std().item(), math.sqrt(1 / 256), rel_tol=0.25)


@pytest.mark.parametrize("kind", ["vocabulary", "index", "modulus"])
def test_sparse_arch_hashes_then_looks_up(rng, kind):
    metadata = random_metadata(rng, num_features=5)
    tables = metadata.num_embeddings_per_feature
    hashes = [make_hash(kind, v, n) for v, n in zip(metadata.vocabularies, tables, strict=True)]
    arch = SparseArch(tables, 6, hashes)
    _, sparse = random_batch(rng, metadata, batch=9)
    out = arch(sparse)
    assert out.shape == (9, 5, 6)
    rows = arch.rows(sparse)
    assert rows.shape == (9, 5)
    for f, (h, table) in enumerate(zip(hashes, arch.embeddings, strict=True)):
        assert torch.equal(rows[:, f], h(sparse[:, f].contiguous()))
        assert torch.equal(out[:, f], table.weight[rows[:, f]])


def test_sparse_arch_batched_hash_equals_per_feature(rng):
    """One BatchedVocabularyHash for all features: same rows and embeddings as F VocabularyHash modules."""
    metadata = random_metadata(rng, num_features=7)
    tables = metadata.num_embeddings_per_feature
    per_feature = SparseArch(
        tables, 5, [make_hash("vocabulary", v, n) for v, n in zip(metadata.vocabularies, tables, strict=True)]
    )
    batched = SparseArch(tables, 5, BatchedVocabularyHash(metadata.vocabularies, tables))
    assert batched.batched_hash and not per_feature.batched_hash
    batched.embeddings.load_state_dict(per_feature.embeddings.state_dict())
    _, sparse = random_batch(rng, metadata, batch=37)
    assert torch.equal(batched.rows(sparse), per_feature.rows(sparse))
    out = batched(sparse)
    assert out.shape == (37, 7, 5)
    assert torch.equal(out, per_feature(sparse))
    with pytest.raises(ValueError, match="batched hash must produce rows for every table"):
        SparseArch(tables[:-1], 5, BatchedVocabularyHash(metadata.vocabularies, tables))


def test_sparse_arch_dlrm_init_and_errors(rng):
    tables = (5, 400)
    arch = SparseArch(tables, 8, [make_hash("modulus", None, n) for n in tables])
    for n, table in zip(tables, arch.embeddings, strict=True):
        bound = math.sqrt(1 / n)
        assert table.weight.abs().max() <= bound
        assert table.weight.abs().max() > 0.5 * bound  # spread over the range (fails w.p. 2^-40)
    with pytest.raises(ValueError, match="one hash per feature"):
        SparseArch(tables, 8, [make_hash("modulus", None, 5)])
    with pytest.raises(ValueError, match="its table has"):
        SparseArch(tables, 8, [make_hash("modulus", None, 5), make_hash("modulus", None, 9)])
