"""Preprocessing: values, vocabularies and metadata against pandas; atomic output; chunking invariance."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from lecture_code.data import (
    DENSE_COLUMNS,
    MISSING_ID,
    SPARSE_COLUMNS,
    VocabularyCounter,
    build_vocabulary,
    generate_criteo_tsv,
    load_metadata,
    preprocess,
)
from lecture_code.data.metadata import METADATA_FILE, PARQUET_FILE, VOCABULARY_FILE
from lecture_code.data.preprocess import main

COLUMNS = ["label", *DENSE_COLUMNS, *SPARSE_COLUMNS]


@pytest.fixture
def raw_file(tmp_path, seed):
    return generate_criteo_tsv(tmp_path / "raw.tsv", 4000, seed=seed % 10_000)


def read_with_pandas(path) -> pd.DataFrame:
    return pd.read_csv(path, sep="\t", header=None, names=COLUMNS, dtype=str, keep_default_na=False)


def test_round_trip_against_pandas(raw_file, tmp_path):
    meta = preprocess(raw_file, tmp_path / "out", frequency_threshold=2, show_progress=False)
    raw = read_with_pandas(raw_file)
    table = pq.read_table(tmp_path / "out" / PARQUET_FILE)
    assert meta.num_rows == meta.num_lines == table.num_rows == len(raw) == 4000
    assert meta.source == "raw.tsv" and meta.frequency_threshold == 2 and meta.malformed.total == 0
    assert meta.positive_rate == pytest.approx(raw["label"].astype(int).mean())
    np.testing.assert_array_equal(table.column("label").to_numpy(), raw["label"].astype(np.int8))

    for j, name in enumerate(DENSE_COLUMNS):
        present = raw[name] != ""
        x = raw[name].where(present, "0").astype(np.int64).to_numpy()
        expected = np.log1p(np.maximum(x, 0).astype(np.float32))
        got = table.column(name).to_numpy()
        assert got.dtype == np.float32
        np.testing.assert_allclose(got, expected, rtol=1e-6)
        assert (got[~present.to_numpy()] == 0).all()
        stats = meta.dense[j]
        assert (stats.name, stats.count, stats.missing) == (name, present.sum(), (~present).sum())
        if stats.count:
            values = expected[present.to_numpy()].astype(np.float64)
            assert stats.mean == pytest.approx(values.mean(), rel=1e-9, abs=1e-12)
            assert stats.std == pytest.approx(values.std(), rel=1e-6, abs=1e-9)
            assert (stats.min, stats.max) == (pytest.approx(values.min()), pytest.approx(values.max()))

    for f, name in enumerate(SPARSE_COLUMNS):
        ids = raw[name].map(lambda h: int(h, 16) if h else MISSING_ID).to_numpy(dtype=np.int64)
        np.testing.assert_array_equal(table.column(name).to_numpy(), ids)
        counts = pd.Series(ids[ids != MISSING_ID]).value_counts()
        kept = np.sort(counts[counts >= 2].index.to_numpy())
        np.testing.assert_array_equal(meta.vocabularies[f], kept)
        s = meta.sparse[f]
        assert (s.name, s.num_unique, s.vocabulary_size) == (name, len(counts), len(kept))
        assert s.num_embeddings == len(kept) + 1 and s.missing == (ids == MISSING_ID).sum()
    assert meta.num_embeddings_per_feature == tuple(len(v) + 1 for v in meta.vocabularies)


def test_metadata_round_trips_and_holds_no_absolute_path(raw_file, tmp_path):
    meta = preprocess(raw_file, tmp_path / "out", show_progress=False, extra={"note": "test"})
    loaded = load_metadata(tmp_path / "out")
    assert loaded == meta  # vocabularies are compared apart
    for a, b in zip(loaded.vocabularies, meta.vocabularies, strict=True):
        np.testing.assert_array_equal(a, b)
    text = (tmp_path / "out" / METADATA_FILE).read_text()
    assert str(tmp_path) not in text and json.loads(text)["extra"] == {"note": "test"}
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        PARQUET_FILE,
        METADATA_FILE,
        VOCABULARY_FILE,
    ]


def test_many_chunks_give_the_same_output_as_one(raw_file, tmp_path):
    one = preprocess(raw_file, tmp_path / "one", show_progress=False)
    many = preprocess(raw_file, tmp_path / "many", chunk_bytes=20_000, show_progress=False)
    assert pq.ParquetFile(tmp_path / "many" / PARQUET_FILE).num_row_groups > 10
    assert pq.read_table(tmp_path / "one" / PARQUET_FILE).equals(
        pq.read_table(tmp_path / "many" / PARQUET_FILE)
    )
    assert replace(one, dense=()) == replace(many, dense=())
    for a, b in zip(one.dense, many.dense, strict=True):  # merged chunk by chunk: equal up to rounding
        assert (a.name, a.count, a.missing, a.min, a.max) == (b.name, b.count, b.missing, b.min, b.max)
        assert (a.mean, a.std) == (pytest.approx(b.mean, rel=1e-12), pytest.approx(b.std, rel=1e-12))
    for a, b in zip(one.vocabularies, many.vocabularies, strict=True):
        np.testing.assert_array_equal(a, b)


def test_gzip_input_and_malformed_rows(tmp_path):
    generate_criteo_tsv(tmp_path / "raw.tsv", 1000, seed=1)
    lines = (tmp_path / "raw.tsv").read_text().splitlines()
    lines[10] = "1\t2\t3"
    lines[500] = "7" + lines[500][1:]
    path = tmp_path / "raw.tsv.gz"
    path.write_bytes(__import__("gzip").compress(("\n".join(lines) + "\n").encode()))
    meta = preprocess(path, tmp_path / "out", show_progress=False)
    assert meta.num_rows == 998 and meta.num_lines == 1000 and meta.source == "raw.tsv.gz"
    assert meta.malformed.counts == {"wrong field count": 1, "bad label": 1}
    assert [e.line for e in meta.malformed.examples] == [11, 501]


def fail_on_second_write(monkeypatch):
    original = pq.ParquetWriter.write_table
    calls = []

    def write_table(self, table, *args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt("simulated interruption")
        return original(self, table, *args, **kwargs)

    monkeypatch.setattr(pq.ParquetWriter, "write_table", write_table)


def test_interrupted_run_leaves_nothing(raw_file, tmp_path, monkeypatch):
    fail_on_second_write(monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        preprocess(raw_file, tmp_path / "out", chunk_bytes=50_000, show_progress=False)
    assert not (tmp_path / "out").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["raw.tsv"]  # no temporary folder left


def test_interrupted_run_keeps_the_previous_output(raw_file, tmp_path, monkeypatch):
    before = preprocess(raw_file, tmp_path / "out", show_progress=False)
    table = pq.read_table(tmp_path / "out" / PARQUET_FILE)
    fail_on_second_write(monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        preprocess(raw_file, tmp_path / "out", frequency_threshold=3, chunk_bytes=50_000, show_progress=False)
    assert load_metadata(tmp_path / "out") == before
    assert pq.read_table(tmp_path / "out" / PARQUET_FILE).equals(table)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "raw.tsv"]


def test_replaces_a_previous_output_but_not_other_folders(raw_file, tmp_path):
    preprocess(raw_file, tmp_path / "out", show_progress=False)
    assert (
        preprocess(raw_file, tmp_path / "out", frequency_threshold=2, show_progress=False).frequency_threshold
        == 2
    )
    assert load_metadata(tmp_path / "out").frequency_threshold == 2
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    with pytest.raises(FileExistsError):
        preprocess(raw_file, tmp_path / "mine", show_progress=False)
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"


def test_command_line(raw_file, tmp_path, capsys):
    main([str(raw_file), str(tmp_path / "out"), "--frequency-threshold", "2", "--quiet"])
    out = capsys.readouterr().out
    assert "rows:          4,000 of 4,000 lines" in out and "rows/s" in out
    assert load_metadata(tmp_path / "out").frequency_threshold == 2


def test_vocabulary_counter_merges_match_a_single_count(seed):
    rng = np.random.default_rng(seed)
    chunks = [
        rng.zipf(1.3, rng.integers(0, 3000)).astype(np.int64) % 5000 - 1 for _ in range(40)
    ]  # -1: missing
    counter = VocabularyCounter(merge_floor=100)  # merge often
    for chunk in chunks:
        counter.add(chunk)
    ids, counts, missing = counter.result()
    everything = np.concatenate(chunks)
    expected_ids, expected_counts = np.unique(everything[everything != MISSING_ID], return_counts=True)
    np.testing.assert_array_equal(ids, expected_ids)
    np.testing.assert_array_equal(counts, expected_counts)
    assert missing == (everything == MISSING_ID).sum()
    np.testing.assert_array_equal(build_vocabulary(ids, counts, 3), expected_ids[expected_counts >= 3])
