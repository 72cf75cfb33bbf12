"""DLRM end to end: shapes for both interactions, logits vs probabilities, gradients, metadata factory."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from dlrm_test_data import random_batch, random_metadata

from lecture_code.model import DLRM, BatchedVocabularyHash, DLRMConfig, VocabularyHash


@pytest.mark.parametrize("hashing", ["vocabulary", "index", "modulus"])
def test_dot_dlrm_shapes_lecture_sizes(rng, hashing):
    metadata = random_metadata(rng, num_features=26)
    model = DLRM.from_metadata(metadata, preset="small", hashing=hashing)
    dense, sparse = random_batch(rng, metadata, batch=11)
    assert model.inter_arch.output_dim == 367
    assert model.over_arch.model[0].in_features == 367
    x = model.dense_arch(dense)
    e = model.sparse_arch(sparse)
    assert x.shape == (11, 16) and e.shape == (11, 26, 16)
    assert model.inter_arch(x, e).shape == (11, 367)
    assert model(dense, sparse).shape == (11,)


def test_outer_dlrm_shapes_lecture_sizes(rng):
    metadata = random_metadata(rng, num_features=26, max_vocab=4)  # tiny tables, tiny top MLP: cheap
    model = DLRM.from_metadata(metadata, interaction="outer", over_arch_layer_sizes=(2, 1))
    dense, sparse = random_batch(rng, metadata, batch=3)
    assert model.inter_arch(model.dense_arch(dense), model.sparse_arch(sparse)).shape == (3, 186_624)
    assert model.over_arch.model[0].in_features == 186_624
    assert model(dense, sparse).shape == (3,)


def test_kaggle_preset_builds_stated_layers(rng):
    metadata = random_metadata(rng, num_features=26, max_vocab=4)
    model = DLRM.from_metadata(metadata, preset="kaggle")
    dense_sizes = [
        (m.in_features, m.out_features) for m in model.dense_arch.modules() if isinstance(m, torch.nn.Linear)
    ]
    over_sizes = [
        (m.in_features, m.out_features) for m in model.over_arch.modules() if isinstance(m, torch.nn.Linear)
    ]
    assert dense_sizes == [(13, 512), (512, 256), (256, 64), (64, 16)]
    assert over_sizes == [(367, 512), (512, 256), (256, 1)]
    assert all(t.embedding_dim == 16 for t in model.sparse_arch.embeddings)


def test_predict_proba_applies_sigmoid_exactly_once(rng):
    metadata = random_metadata(rng, num_features=4)
    model = DLRM.from_metadata(metadata)
    dense, sparse = random_batch(rng, metadata, batch=64)
    logits = model(dense, sparse)
    proba = model.predict_proba(dense, sparse)
    assert torch.equal(proba, torch.sigmoid(logits.detach()))
    assert ((proba > 0) & (proba < 1)).all()
    assert not torch.allclose(proba, torch.sigmoid(proba))  # a second sigmoid would change it
    assert not proba.requires_grad
    assert not any(isinstance(m, torch.nn.Sigmoid) for m in model.modules())  # forward returns logits


@pytest.mark.parametrize("interaction", ["dot", "outer"])
@pytest.mark.parametrize("hashing", ["vocabulary", "index", "modulus"])
def test_gradients_reach_every_parameter(rng, interaction, hashing):
    metadata = random_metadata(rng, num_features=5, max_vocab=8)
    model = DLRM.from_metadata(metadata, interaction=interaction, hashing=hashing)
    dense, sparse = random_batch(rng, metadata, batch=32)
    labels = torch.from_numpy((rng.random(32) < 0.3).astype("float32"))
    torch.nn.BCEWithLogitsLoss()(model(dense, sparse), labels).backward()
    for name, param in model.named_parameters():
        assert param.grad is not None, name
        assert torch.isfinite(param.grad).all(), name
        assert param.grad.abs().sum() > 0, name


def test_short_training_run_lowers_the_loss(rng):
    """A learnable signal (one sparse feature and one dense feature decide the click): loss must fall."""
    torch.manual_seed(int(rng.integers(1 << 30)))
    metadata = random_metadata(rng, num_features=3, max_vocab=30)
    model = DLRM.from_metadata(metadata)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    loss_fn = torch.nn.BCEWithLogitsLoss()
    clicky = set(metadata.vocabularies[0][::2].tolist())  # every other id of feature 0 "clicks"

    def batch():
        dense, sparse = random_batch(rng, metadata, batch=64)
        signal = torch.tensor([i in clicky for i in sparse[:, 0].tolist()]) | (dense[:, 1] > 2.5)
        return dense, sparse, signal.float()

    losses = []
    for _ in range(80):
        dense, sparse, label = batch()
        loss = loss_fn(model(dense, sparse), label)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    # The last ten steps' mean over the first ten's, 40 seeds: median 0.22, at most 0.35 (after 40 steps
    # it was 0.34 and 0.62, and one CI seed in many reached 0.70: too close to the bound)
    assert sum(losses[-10:]) / 10 < 0.7 * sum(losses[:10]) / 10


def test_from_metadata_modulus_needs_no_vocabularies():
    metadata = SimpleNamespace(num_embeddings_per_feature=(10, 20, 30))  # no `vocabularies` attribute
    model = DLRM.from_metadata(metadata, hashing="modulus", embedding_dim=8, dense_arch_layer_sizes=(8,))
    assert [t.num_embeddings for t in model.sparse_arch.embeddings] == [10, 20, 30]
    assert model.config.embedding_dim == 8


def test_vocabulary_errors(rng):
    metadata = random_metadata(rng, num_features=3)
    config = DLRMConfig.preset("small", metadata.num_embeddings_per_feature)
    with pytest.raises(ValueError, match="needs vocabularies"):
        DLRM(config)
    with pytest.raises(ValueError, match="needs vocabularies"):
        DLRM(config, [])  # metadata loaded without its vocabularies
    with pytest.raises(ValueError, match="2 vocabularies for 3"):
        DLRM(config, metadata.vocabularies[:2])
    wrong = SimpleNamespace(
        vocabularies=metadata.vocabularies,
        num_embeddings_per_feature=tuple(n + 1 for n in metadata.num_embeddings_per_feature),
    )
    with pytest.raises(ValueError, match="len\\(vocabulary\\) \\+ 1"):
        DLRM.from_metadata(wrong)


def test_vocabulary_hashing_is_one_batched_lookup_equal_to_per_feature(rng):
    """``hashing="vocabulary"`` builds one BatchedVocabularyHash; swapping in per-feature hashes changes
    nothing, and the state dict holds one ``keys`` buffer instead of F vocabularies."""
    metadata = random_metadata(rng, num_features=6)
    model = DLRM.from_metadata(metadata).eval()
    assert isinstance(model.sparse_arch.hashes, BatchedVocabularyHash)
    assert [k for k in model.state_dict() if "hashes" in k] == ["sparse_arch.hashes.keys"]
    dense, sparse = random_batch(rng, metadata, batch=29)
    with torch.no_grad():
        logits = model(dense, sparse)
        model.sparse_arch.hashes = torch.nn.ModuleList(
            VocabularyHash(v, n)
            for v, n in zip(metadata.vocabularies, metadata.num_embeddings_per_feature, strict=True)
        )
        assert torch.equal(model(dense, sparse), logits)


@pytest.mark.parametrize("hashing", ["vocabulary", "index", "modulus"])
def test_dlrm_compiles_fullgraph(rng, hashing):
    """No graph break with any hashing (``fullgraph=True``); the compiled logits equal the eager ones.
    ``aot_eager`` traces forward and backward like inductor does, without compiling C++ (fast on a CPU)."""
    metadata = random_metadata(rng, num_features=4, max_vocab=12)
    model = DLRM.from_metadata(metadata, hashing=hashing)
    dense, sparse = random_batch(rng, metadata, batch=16)
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    expected = model(dense, sparse)
    actual = compiled(dense, sparse)
    torch.testing.assert_close(actual, expected, atol=1e-6, rtol=1e-6)
    actual.sum().backward()  # the backward graph traces too
    assert all(p.grad is not None for p in model.parameters())
