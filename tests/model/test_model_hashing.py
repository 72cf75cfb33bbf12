"""Hashing raw ids to rows: IndexHash == VocabularyHash == BatchedVocabularyHash exactly; row 0 for
missing/unseen; modulus range; BatchedModulusHash == one ModulusHash per feature."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from dlrm_test_data import ID_SPACE, random_ids, random_vocabulary

from lecture_code.model import (
    BatchedModulusHash,
    BatchedVocabularyHash,
    IndexHash,
    ModulusHash,
    VocabularyHash,
    binary_search_lower_bound,
    make_hash,
)

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


# --------------------------------------------------------------------------------------------------------
# BatchedVocabularyHash: all features in one search, equal to F separate VocabularyHash lookups
# --------------------------------------------------------------------------------------------------------


def _per_feature_rows(vocabularies, sparse: torch.Tensor) -> torch.Tensor:
    """The reference: one VocabularyHash per feature on its own column, stacked to ``[B, F]``."""
    hashes = [VocabularyHash(v, len(v) + 1) for v in vocabularies]
    return torch.stack([h(sparse[:, f].contiguous()) for f, h in enumerate(hashes)], dim=1)


def _batched(vocabularies) -> BatchedVocabularyHash:
    return BatchedVocabularyHash(vocabularies, [len(v) + 1 for v in vocabularies])


def _edge_vocabularies(rng):
    """Empty vocabularies first, in the middle and last; ids 0 and 2^32 - 1 at the block boundaries, so a
    missing id of the next feature (key ``f·2^32 - 1``) sits right after a real key of the previous one."""
    vocabularies = [random_vocabulary(rng, size) for size in (0, 1, 9, 0, 64, 257, 3, 0)]
    vocabularies[1] = np.array([ID_SPACE - 1], dtype=np.int64)
    vocabularies[2] = np.unique(np.append(vocabularies[2][1:], [0, ID_SPACE - 1]))
    vocabularies[4] = np.unique(np.append(vocabularies[4][1:], ID_SPACE - 1))
    return vocabularies


@pytest.mark.parametrize("export_path", [False, True], ids=["searchsorted", "onnx-binary-search"])
def test_batched_vocabulary_hash_equals_per_feature(rng, monkeypatch, export_path):
    vocabularies = _edge_vocabularies(rng)
    sparse = torch.stack([random_ids(rng, v, batch=409) for v in vocabularies], dim=1)  # [B, F], odd B
    assert (sparse >= 1 << 31).any() and (sparse == -1).any()  # the batch covers the hard cases
    expected = _per_feature_rows(vocabularies, sparse)
    hasher = _batched(vocabularies)
    if export_path:  # under torch.onnx.export the search is binary_search_lower_bound: same rows
        monkeypatch.setattr(torch.onnx, "is_in_onnx_export", lambda: True)
    actual = hasher(sparse)
    assert actual.dtype == torch.int64 and actual.shape == sparse.shape
    assert torch.equal(actual, expected)
    assert torch.equal(hasher(sparse.t().contiguous().t()), expected)  # a non-contiguous [B, F] view
    # And both equal the definition, computed independently with one Python dict per feature.
    for f, vocab in enumerate(vocabularies):
        row_of = {int(v): i + 1 for i, v in enumerate(vocab)}
        assert actual[:, f].tolist() == [row_of.get(i, 0) for i in sparse[:, f].tolist()]


def test_batched_vocabulary_hash_every_entry_and_out_of_range_ids(rng):
    """Every vocabulary entry of every feature → its own row; ids outside [0, 2^32) → row 0 (as
    VocabularyHash), even where ``f·2^32 + id`` lands exactly on another feature's key."""
    vocabularies = _edge_vocabularies(rng)
    hasher = _batched(vocabularies)
    longest = max(len(v) for v in vocabularies)
    columns, expected = [], []
    for vocab in vocabularies:  # each column: the whole vocabulary, shuffled, padded with unseen ids
        order = rng.permutation(longest)
        padded = np.concatenate([vocab, np.full(longest - len(vocab), -7)])[order]
        columns.append(padded)
        expected.append(np.where(order < len(vocab), order + 1, 0))
    sparse = torch.from_numpy(np.stack(columns, axis=1).astype(np.int64))
    assert torch.equal(hasher(sparse), torch.from_numpy(np.stack(expected, axis=1)))

    # Ids outside [0, 2^32) whose key f·2^32 + id is a real key of a neighbouring feature: -1 in feature 2
    # is feature 1's id 2^32 - 1; 2^32 in feature 1 and -2^32 in feature 3 are feature 2's id 0. Plus
    # ids far outside, up to int64's extremes (where f·2^32 + id wraps around).
    assert vocabularies[1][-1] == ID_SPACE - 1 and vocabularies[2][0] == 0
    sparse = torch.full((4, len(vocabularies)), -5, dtype=torch.int64)
    sparse[0, 2], sparse[1, 1], sparse[2, 3] = -1, ID_SPACE, -ID_SPACE
    far = [1 << 40, -(1 << 40), 2**63 - 1, -(2**63), ID_SPACE + 5, -ID_SPACE - 5, 2**62, -1]
    sparse[3] = torch.tensor(far)
    assert torch.equal(hasher(sparse), torch.zeros_like(sparse))
    assert torch.equal(hasher(sparse), _per_feature_rows(vocabularies, sparse))


def test_batched_vocabulary_hash_all_empty_and_single_feature(rng):
    empty = [np.empty(0, dtype=np.int64)] * 3
    sparse = torch.stack([random_ids(rng, v, batch=17) for v in empty], dim=1)
    assert torch.equal(_batched(empty)(sparse), torch.zeros_like(sparse))
    vocab = [random_vocabulary(rng, 31)]
    sparse = random_ids(rng, vocab[0], batch=50)[:, None]
    assert torch.equal(_batched(vocab)(sparse), _per_feature_rows(vocab, sparse))


def test_batched_vocabulary_hash_buffers_and_errors(rng):
    vocabularies = [random_vocabulary(rng, s) for s in (4, 0, 6)]
    hasher = _batched(vocabularies)
    # One persistent buffer, the combined keys: the id → row mapping a checkpoint carries.
    assert list(hasher.state_dict()) == ["keys"]
    expected_keys = np.concatenate([v + (f << 32) for f, v in enumerate(vocabularies)])
    assert hasher.keys.tolist() == expected_keys.tolist()
    assert hasher.starts.tolist() == [0, 4, 4] and hasher.key_offsets.tolist() == [0, 1 << 32, 2 << 32]
    assert hasher.num_embeddings_per_feature == (5, 1, 7) and hasher.num_features == 3
    with pytest.raises(ValueError, match="one vocabulary per feature"):
        BatchedVocabularyHash(vocabularies, [5, 1])
    with pytest.raises(ValueError, match=r"feature 2: num_embeddings must be len\(vocabulary\) \+ 1"):
        BatchedVocabularyHash(vocabularies, [5, 1, 6])
    with pytest.raises(ValueError, match="feature 1: the vocabulary must be sorted"):
        BatchedVocabularyHash([[1, 2], [5, 3]], [3, 3])
    with pytest.raises(ValueError, match=r"feature 0: vocabulary ids must lie in \[0, 2\^32\)"):
        BatchedVocabularyHash([[3, 1 << 32]], [3])
    with pytest.raises(ValueError, match="vocabulary ids must lie"):
        BatchedVocabularyHash([[-1, 3]], [3])
    with pytest.raises(ValueError, match="at least one feature"):
        BatchedVocabularyHash([], [])


def test_batched_vocabulary_hash_compiles_fullgraph(rng):
    """No graph break (``fullgraph=True``), and the compiled rows equal the eager ones."""
    vocabularies = _edge_vocabularies(rng)
    hasher = _batched(vocabularies)
    sparse = torch.stack([random_ids(rng, v, batch=33) for v in vocabularies], dim=1)
    compiled = torch.compile(hasher, fullgraph=True, backend="aot_eager")
    assert torch.equal(compiled(sparse), hasher(sparse))


# --------------------------------------------------------------------------------------------------------
# BatchedModulusHash: all features in one remainder, equal to F separate ModulusHash modules
# --------------------------------------------------------------------------------------------------------

# One-row tables (only row 0), two rows (every id -> row 1), odd and power-of-two sizes, a Kaggle-sized one.
MODULUS_TABLES = (1, 2, 97, 1000, 1, 64, 10_131_228, 3)


def test_batched_modulus_hash_equals_per_feature(rng):
    sparse = torch.stack([random_ids(rng, random_vocabulary(rng, 20), batch=409) for _ in MODULUS_TABLES], 1)
    assert (sparse == -1).any() and (sparse >= 1 << 31).any()  # missing ids and large ids are covered
    hasher = BatchedModulusHash(MODULUS_TABLES)
    actual = hasher(sparse)
    expected = torch.stack(
        [ModulusHash(n)(sparse[:, f].contiguous()) for f, n in enumerate(MODULUS_TABLES)], 1
    )
    assert actual.dtype == torch.int64 and actual.shape == sparse.shape
    assert torch.equal(actual, expected)
    assert torch.equal(hasher(sparse.t().contiguous().t()), expected)  # a non-contiguous [B, F] view
    # And the definition, written out per element.
    for f, n in enumerate(MODULUS_TABLES):
        want = [0 if i < 0 or n == 1 else 1 + i % (n - 1) for i in sparse[:, f].tolist()]
        assert actual[:, f].tolist() == want, f


def test_batched_modulus_hash_buffers_and_errors():
    hasher = BatchedModulusHash([5, 1, 7])
    assert hasher.num_embeddings_per_feature == (5, 1, 7) and hasher.num_features == 3
    assert hasher.moduli.tolist() == [4, 1, 6] and hasher.hashed.tolist() == [True, False, True]
    assert list(hasher.state_dict()) == []  # derived from the table sizes: nothing to checkpoint
    with pytest.raises(ValueError, match="at least one feature"):
        BatchedModulusHash([])
    with pytest.raises(ValueError, match=r"\(1, 0\)"):
        BatchedModulusHash([3, 0])


def test_batched_modulus_hash_compiles_fullgraph(rng):
    hasher = BatchedModulusHash(MODULUS_TABLES)
    sparse = torch.stack([random_ids(rng, random_vocabulary(rng, 9), batch=33) for _ in MODULUS_TABLES], 1)
    compiled = torch.compile(hasher, fullgraph=True, backend="aot_eager")
    assert torch.equal(compiled(sparse), hasher(sparse))
