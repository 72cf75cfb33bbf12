"""Hashing raw ids to rows: IndexHash == VocabularyHash exactly; row 0 for missing/unseen; modulus range."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from dlrm_test_data import ID_SPACE, random_ids, random_vocabulary

from lecture_code.model import IndexHash, ModulusHash, VocabularyHash, binary_search_lower_bound, make_hash

# Vocabulary sizes: empty, one entry, powers of two and their neighbours (binary-search edges), odd sizes.
VOCAB_SIZES = [0, 1, 2, 3, 7, 8, 9, 31, 64, 100, 257]


@pytest.mark.parametrize("size", VOCAB_SIZES)
def test_index_hash_equals_vocabulary_hash(rng, size):
    vocab = random_vocabulary(rng, size)
    ids = random_ids(rng, vocab, batch=301)
    assert (ids >= 1 << 31).any() and (ids == -1).any()  # the batch covers the hard cases
    expected = VocabularyHash(vocab, size + 1)(ids)
    actual = IndexHash(vocab, size + 1)(ids)
    assert actual.dtype == expected.dtype == torch.int64
    assert torch.equal(actual, expected)
    # And both equal the definition, computed independently with a Python dict.
    row_of = {int(v): i + 1 for i, v in enumerate(vocab)}
    assert expected.tolist() == [row_of.get(i, 0) for i in ids.tolist()]


@pytest.mark.parametrize("hash_cls", [IndexHash, VocabularyHash])
def test_every_vocabulary_entry_maps_to_its_row(rng, hash_cls):
    vocab = random_vocabulary(rng, 50)
    order = torch.from_numpy(rng.permutation(len(vocab)))
    rows = hash_cls(vocab, len(vocab) + 1)(torch.from_numpy(vocab)[order])
    assert torch.equal(rows, order + 1)  # entry i → row i + 1, whatever the batch order


@pytest.mark.parametrize("hash_cls", [IndexHash, VocabularyHash])
def test_missing_and_unseen_go_to_reserved_row_not_first_entry(rng, hash_cls):
    """The original IndexHash's bug: argmax of an all-False row is 0, aliasing unseen ids to entry 0."""
    vocab = random_vocabulary(rng, 10)
    kept = set(vocab.tolist())
    unseen = [
        i for i in (int(vocab[0]) - 1, int(vocab[0]) + 1, ID_SPACE - 1, 1 << 31) if i >= 0 and i not in kept
    ]
    ids = torch.tensor([-1, *unseen, int(vocab[0])])
    rows = hash_cls(vocab, len(vocab) + 1)(ids)
    assert rows.tolist() == [0] * (1 + len(unseen)) + [1]


def test_binary_search_lower_bound_equals_searchsorted(rng):
    for size in [1, 2, 3, 4, 5, 15, 16, 17, 63, 100]:
        sorted_values = torch.from_numpy(np.sort(rng.integers(-5, 40, size=size)))  # with duplicates
        values = torch.from_numpy(rng.integers(-10, 50, size=97))
        expected = torch.searchsorted(sorted_values, values)
        assert torch.equal(binary_search_lower_bound(sorted_values, values), expected), size
    empty = torch.empty(0, dtype=torch.int64)
    assert torch.equal(binary_search_lower_bound(empty, values), torch.zeros_like(values))


def test_vocabulary_hash_export_path_equals_eager(rng, monkeypatch):
    """Under torch.onnx.export the search runs as binary_search_lower_bound: same rows."""
    vocab = random_vocabulary(rng, 77)
    ids = random_ids(rng, vocab, batch=200)
    hasher = VocabularyHash(vocab, len(vocab) + 1)
    eager = hasher(ids)
    monkeypatch.setattr(torch.onnx, "is_in_onnx_export", lambda: True)
    assert torch.equal(hasher(ids), eager)


@pytest.mark.parametrize("num_embeddings", [1, 2, 97, 1000])
def test_modulus_hash_range_and_reserved_row(rng, num_embeddings):
    ids = random_ids(rng, random_vocabulary(rng, 20), batch=500)
    rows = ModulusHash(num_embeddings)(ids)
    assert rows.dtype == torch.int64
    assert int(rows.min()) >= 0 and int(rows.max()) < num_embeddings
    missing = ids < 0
    assert (rows[missing] == 0).all()
    if num_embeddings > 1:
        expected = [1 + i % (num_embeddings - 1) for i in ids[~missing].tolist()]
        assert rows[~missing].tolist() == expected
        assert (rows[~missing] >= 1).all()


def test_make_hash_and_vocabulary_is_a_buffer(rng):
    vocab = random_vocabulary(rng, 12)
    for kind, cls in [("vocabulary", VocabularyHash), ("index", IndexHash)]:
        hasher = make_hash(kind, vocab, 13)
        assert isinstance(hasher, cls)
        # A registered buffer moves with .to(device) and is saved in checkpoints.
        assert dict(hasher.named_buffers())["vocabulary"].tolist() == vocab.tolist()
        assert "vocabulary" in hasher.state_dict()
    assert isinstance(make_hash("modulus", None, 13), ModulusHash)
    with pytest.raises(ValueError, match="unknown hashing kind"):
        make_hash("sha1", vocab, 13)


@pytest.mark.parametrize(
    ("vocab", "num_embeddings", "error", "message"),
    [
        ([5, 3, 9], 4, ValueError, "sorted"),
        ([3, 3, 9], 4, ValueError, "duplicates"),
        ([3, 5, 9], 3, ValueError, r"len\(vocabulary\) \+ 1 = 4"),
        ([[3, 5]], 3, ValueError, "1-D"),
        ([3.0, 5.0], 3, TypeError, "integer"),
    ],
)
def test_invalid_vocabulary_raises(vocab, num_embeddings, error, message):
    with pytest.raises(error, match=message):
        VocabularyHash(np.array(vocab), num_embeddings)
