"""The synthetic generator: deterministic bytes, the raw schema, Kaggle-like ids, labels, missing values."""

from __future__ import annotations

import gzip
import re

import numpy as np
import pytest

from lecture_code.data import KAGGLE_CARDINALITIES, CriteoReader, generate_criteo_tsv, unscramble_ids
from lecture_code.data.synthetic import main, scramble_ids

HEX8 = re.compile(r"^[0-9a-f]{8}$")


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    """20k rows (seed 3) read back through the real reader."""
    path = generate_criteo_tsv(tmp_path_factory.mktemp("synthetic") / "raw.tsv", 20_000, seed=3)
    reader = CriteoReader(path)
    chunks = list(reader)
    assert reader.report.total == 0
    cat = lambda name: np.concatenate([getattr(c, name) for c in chunks])
    return path, cat("label"), cat("dense"), cat("dense_missing"), cat("sparse")


def test_same_seed_same_bytes_other_seed_different(tmp_path, seed):
    seed = seed % 1000
    a = generate_criteo_tsv(tmp_path / "a.tsv", 3000, seed=seed).read_bytes()
    b = generate_criteo_tsv(tmp_path / "b.tsv", 3000, seed=seed).read_bytes()
    c = generate_criteo_tsv(tmp_path / "c.tsv", 3000, seed=seed + 1).read_bytes()
    shorter = generate_criteo_tsv(tmp_path / "d.tsv", 1000, seed=seed).read_bytes()
    assert a == b and a != c
    assert a.startswith(shorter) and shorter.count(b"\n") == 1000  # a shorter file is a prefix


def test_gzip_output_holds_the_same_bytes(tmp_path):
    plain = generate_criteo_tsv(tmp_path / "a.tsv", 2000, seed=5).read_bytes()
    packed = generate_criteo_tsv(tmp_path / "a.tsv.gz", 2000, seed=5).read_bytes()
    assert gzip.decompress(packed) == plain
    assert generate_criteo_tsv(tmp_path / "b.tsv.gz", 2000, seed=5).read_bytes() == packed  # deterministic


def test_raw_schema(synthetic):
    path = synthetic[0]
    lines = path.read_text().splitlines()
    assert len(lines) == 20_000
    for line in lines[:2000]:
        fields = line.split("\t")
        assert len(fields) == 40
        assert fields[0] in ("0", "1")
        assert all(f == "" or re.fullmatch(r"-?[0-9]+", f) for f in fields[1:14])
        assert all(f == "" or HEX8.match(f) for f in fields[14:])


def test_ids_are_zipf_ranks_within_kaggle_cardinality(synthetic):
    sparse = synthetic[4]
    for f, cardinality in enumerate(KAGGLE_CARDINALITIES):
        ids = sparse[:, f][sparse[:, f] >= 0]
        ranks = unscramble_ids(ids, f)
        assert ranks.max() < cardinality
        assert len(np.unique(ids)) <= cardinality
        counts = np.bincount(np.minimum(ranks, 50).astype(np.int64), minlength=51)
        assert counts[0] >= counts[min(5, cardinality - 1)]  # rank 0 is the most frequent
    assert len(np.unique(sparse[:, 2])) > 5000  # C3 (10M ids): a long tail of rare ids


def test_scramble_is_a_bijection(seed):
    ranks = np.random.default_rng(seed).integers(0, 2**32, 10_000, dtype=np.uint64)
    for f in (0, 7, 25):
        ids = scramble_ids(ranks, f)
        assert ids.max() < 2**32
        np.testing.assert_array_equal(unscramble_ids(ids, f), ranks)


def test_labels_and_missing_values_look_like_kaggle(synthetic):
    _, label, dense, dense_missing, sparse = synthetic
    assert 0.23 < label.mean() < 0.28  # Kaggle: 0.256
    assert 0.72 < dense_missing[:, 11].mean() < 0.82  # I12 mostly missing
    assert dense_missing[:, 1].sum() == 0 and (dense[:, 1] < 0).any()  # I2 always present, sometimes negative
    assert 0.70 < (sparse[:, 21] < 0).mean() < 0.82  # C22
    np.testing.assert_array_equal(sparse[:, 18] < 0, sparse[:, 19] < 0)  # C19 and C20 missing together
    assert (sparse[:, 0] >= 0).all()


def test_label_carries_a_learnable_signal(synthetic):
    _, label, dense, dense_missing, _ = synthetic
    has_clicks = (dense[:, 0] > 2) & ~dense_missing[:, 0]  # I1 has a positive weight
    assert label[has_clicks].mean() > label[~has_clicks].mean() + 0.05


def test_command_line(tmp_path, capsys):
    main([str(tmp_path / "cli.tsv"), "--rows", "100", "--seed", "2"])
    assert "wrote 100 rows" in capsys.readouterr().out
    assert (tmp_path / "cli.tsv").read_bytes() == generate_criteo_tsv(
        tmp_path / "x.tsv", 100, seed=2
    ).read_bytes()
