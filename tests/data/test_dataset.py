"""Tensors, splits and batches over a processed folder; the default data."""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

from lecture_code.data import (
    MISSING_ID,
    Batch,
    ensure_default_data,
    generate_criteo_tsv,
    iter_batches,
    iter_parquet_batches,
    load_metadata,
    load_tensors,
    num_batches,
    preprocess,
    split_indices,
    train_holdout_split,
    vocabulary_rows,
)
from lecture_code.data.metadata import PARQUET_FILE
from lecture_code.paths import REPO_ROOT


@pytest.fixture(scope="module")
def processed(tmp_path_factory):
    root = tmp_path_factory.mktemp("dataset")
    raw = generate_criteo_tsv(root / "raw.tsv", 5003, seed=11)  # an odd size: batches do not divide it
    preprocess(raw, root / "out", frequency_threshold=2, chunk_bytes=200_000, show_progress=False)
    return root / "out"


def test_tensors_have_the_documented_shapes_and_values(processed):
    data = load_tensors(processed)
    assert data.dense.shape == (5003, 13) and data.dense.dtype == torch.float32
    assert data.sparse.shape == (5003, 26) and data.sparse.dtype == torch.int64
    assert data.label.shape == (5003,) and data.label.dtype == torch.float32
    assert data.dense.is_contiguous() and data.sparse.is_contiguous()
    table = pq.read_table(processed / PARQUET_FILE)
    np.testing.assert_array_equal(data.sparse[:, 4].numpy(), table.column("C5").to_numpy())
    np.testing.assert_array_equal(data.dense[:, 12].numpy(), table.column("I13").to_numpy())
    assert set(data.label.unique().tolist()) == {0.0, 1.0}
    assert (data.sparse == MISSING_ID).any() and data.sparse.max() < 2**32


def test_split_is_deterministic_and_disjoint(seed):
    train, holdout = split_indices(1001, 0.2, seed=seed)
    again = split_indices(1001, 0.2, seed=seed)
    other = split_indices(1001, 0.2, seed=seed + 1)
    assert len(holdout) == 200 and len(train) == 801
    np.testing.assert_array_equal(train, again[0])
    np.testing.assert_array_equal(holdout, again[1])
    assert not np.array_equal(holdout, other[1])
    assert len(np.intersect1d(train, holdout)) == 0
    np.testing.assert_array_equal(np.sort(np.concatenate([train, holdout])), np.arange(1001))


def test_train_holdout_split_selects_those_rows(processed):
    data = load_tensors(processed)
    train, holdout = train_holdout_split(data, 0.1, seed=4)
    train_rows, holdout_rows = split_indices(len(data), 0.1, seed=4)
    assert torch.equal(holdout.sparse, data.sparse[torch.from_numpy(holdout_rows)])
    assert torch.equal(train.dense, data.dense[torch.from_numpy(train_rows)])


@pytest.mark.parametrize("drop_last", [True, False])
def test_batches_cover_an_epoch_once_and_resume_exactly(processed, seed, drop_last):
    data = load_tensors(processed)
    batch_size = 512
    batches = list(iter_batches(data, batch_size, seed=seed, epoch=3, drop_last=drop_last))
    assert len(batches) == num_batches(len(data), batch_size, drop_last) == (9 if drop_last else 10)
    assert all(isinstance(b, Batch) and b.dense.shape == (batch_size, 13) for b in batches[:9])
    if not drop_last:  # every row exactly once: compare the multiset of rows
        rows = torch.cat([torch.cat([b.dense, b.sparse.double(), b.label[:, None]], 1) for b in batches])
        full = torch.cat([data.dense, data.sparse.double(), data.label[:, None]], 1)
        assert torch.equal(rows.unique(dim=0), full.unique(dim=0)) and len(rows) == len(full)
    for start in (0, 4, len(batches) - 1):
        resumed = list(
            iter_batches(data, batch_size, seed=seed, epoch=3, start_batch=start, drop_last=drop_last)
        )
        assert len(resumed) == len(batches) - start
        for a, b in zip(resumed, batches[start:], strict=True):
            assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    other_epoch = next(iter_batches(data, batch_size, seed=seed, epoch=4))
    assert not torch.equal(other_epoch.sparse, batches[0].sparse)


def test_unshuffled_batches_are_in_file_order(processed):
    data = load_tensors(processed)
    first, second = list(iter_batches(data, 100, shuffle=False))[:2]
    assert torch.equal(second.sparse, data.sparse[100:200]) and torch.equal(first.label, data.label[:100])


def test_parquet_streaming_covers_every_row(processed, seed):
    data = load_tensors(processed)
    assert pq.ParquetFile(processed / PARQUET_FILE).num_row_groups > 2
    in_order = list(iter_parquet_batches(processed, 700))
    assert [len(b.label) for b in in_order] == [700] * 7 + [103]
    assert torch.equal(torch.cat([b.sparse for b in in_order]), data.sparse)
    shuffled = torch.cat([b.sparse for b in iter_parquet_batches(processed, 700, seed=seed)])
    assert not torch.equal(shuffled, data.sparse)
    assert torch.equal(shuffled.unique(dim=0), data.sparse.unique(dim=0)) and len(shuffled) == len(data)


def test_vocabulary_rows(processed):
    meta = load_metadata(processed)
    data = load_tensors(processed)
    rows = data.with_vocabulary_rows(meta.vocabularies).sparse
    for f, vocabulary in enumerate(meta.vocabularies):
        r = rows[:, f].numpy()
        assert r.min() >= 0 and r.max() < meta.num_embeddings_per_feature[f]
        ids = data.sparse[:, f].numpy()
        np.testing.assert_array_equal(vocabulary[r[r > 0] - 1], ids[r > 0])
        assert not np.isin(ids[r == 0], vocabulary).any()  # row 0: missing or rare (seen once)
    np.testing.assert_array_equal(
        vocabulary_rows(np.array([3, 9]), np.array([-1, 3, 4, 9, 10])), [0, 1, 0, 2, 0]
    )


def test_default_data_is_made_once(tmp_path):
    folder = ensure_default_data(tmp_path / "generated", num_rows=3000, seed=5)
    assert folder == tmp_path / "generated" / "criteo_synthetic_3000_seed5"
    meta = load_metadata(folder)
    assert meta.num_rows == 3000 and meta.extra["synthetic"]["seed"] == 5
    stamp = (folder / PARQUET_FILE).stat().st_mtime_ns
    assert ensure_default_data(tmp_path / "generated", num_rows=3000, seed=5) == folder
    assert (folder / PARQUET_FILE).stat().st_mtime_ns == stamp  # reused, not remade
    assert not list((tmp_path / "generated").glob("*.tsv"))  # the raw file is removed
    other = ensure_default_data(tmp_path / "generated", num_rows=3000, seed=6)
    assert other != folder and load_metadata(other).extra["synthetic"]["seed"] == 6
    assert (REPO_ROOT / "lecture_code" / "data").is_dir()  # relative roots resolve against the repository
