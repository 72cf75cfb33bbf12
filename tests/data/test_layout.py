"""Raw layouts: the header decides; the comma-separated layout reads to the same values as the TSV one."""

from __future__ import annotations

import re

import numpy as np
import pyarrow.parquet as pq
import pytest

from lecture_code.data import (
    DENSE_COLUMNS,
    SPARSE_COLUMNS,
    CriteoReader,
    MalformedRowError,
    RawFileError,
    detect_layout,
    preprocess,
)
from lecture_code.data.layout import EXPECTED_HEADER, TSV_LAYOUT
from lecture_code.data.malformed import BAD_INTEGER
from lecture_code.data.metadata import PARQUET_FILE

NAMES = ["label", *DENSE_COLUMNS, *SPARSE_COLUMNS]


def read_all(path, **options):
    reader = CriteoReader(path, **options)
    chunks = list(reader)
    arrays = [np.concatenate([getattr(c, name) for c in chunks]) for name in ("label", "dense", "sparse")]
    missing = np.concatenate([c.dense_missing for c in chunks])
    return reader, *arrays, missing


def header_line(names) -> bytes:
    return ",".join(names).encode() + b"\n0,1,2\n"


@pytest.mark.parametrize(
    ("head", "delimiter", "columns"),
    [
        (b"", "\t", tuple(NAMES)),  # an empty file: the default (refused later as empty)
        (b"1\t5\t\t7" + b"\t" * 36 + b"\n", "\t", tuple(NAMES)),  # Kaggle train.txt: no header
        (header_line(["Id", "Label", *NAMES[1:]]), ",", ("Id", *NAMES)),  # Kaggle train.csv
        (header_line(NAMES), ",", tuple(NAMES)),  # common samples
        (header_line(["LABEL", *(n.lower() for n in NAMES[1:])]), ",", tuple(NAMES)),  # any case
        (header_line(NAMES[::-1]), ",", tuple(NAMES[::-1])),  # any order
        ("\t".join(NAMES).encode() + b"\n", "\t", tuple(NAMES)),  # a TSV with a header
        (b"\xef\xbb\xbf" + header_line(NAMES), ",", tuple(NAMES)),  # a byte-order mark first
        (header_line(["Id", "Label", *NAMES[1:]]).replace(b"\n", b"\r\n"), ",", ("Id", *NAMES)),  # Windows
        (b"1\t5\t\t7" + b"\t" * 36 + b"\r\n", "\t", tuple(NAMES)),  # train.txt with Windows line ends
    ],
)
def test_detects_the_layout_from_the_first_line(head, delimiter, columns):
    layout = detect_layout(head, "raw")
    assert (layout.delimiter, layout.columns) == (delimiter, columns)
    has_header = head.removeprefix(b"\xef\xbb\xbf")[:1].isalpha()
    assert layout.has_header == layout.whole_floats == has_header
    assert layout.header_bytes == (head.index(b"\n") + 1 if has_header else 0)
    if not has_header:
        assert layout == TSV_LAYOUT


KAGGLE_TEST_CSV = ["Id", *DENSE_COLUMNS, *SPARSE_COLUMNS]  # Kaggle's test.csv: no label column


@pytest.mark.parametrize(
    ("head", "message"),
    [
        (header_line(KAGGLE_TEST_CSV), r"missing label; Kaggle's test\.csv has no labels"),
        (header_line([*NAMES[:-1], "Clicked"]), r"missing C26; unknown 'Clicked'"),
        (header_line([*NAMES[:-1], "C26"]).replace(b",C26\n", b",C26,I3\n"), r"repeated I3"),
        (header_line(['"label"', *NAMES[1:]]), r"""missing label; unknown '"label"'"""),
        (b"10000000,0,1,1,5,0,1382,,,\n", r"comma-separated but is not a header \('10000000,0,1"),
        (b"PAR1" + bytes(range(256)), r"unrecognised header \(missing label, I1, "),
    ],
)
def test_refuses_a_header_it_does_not_know_saying_what_it_found(head, message):
    with pytest.raises(RawFileError, match=message) as raised:
        detect_layout(head, "raw.csv")
    text = str(raised.value)
    assert text.startswith("raw.csv: ") and "\n" not in text and EXPECTED_HEADER in text


@pytest.mark.parametrize(
    ("head", "message"),
    [
        (b"label," + b"x" * (1 << 17), r"the header line is longer than 65,536 bytes"),
    ],
)
def test_refuses_a_header_line_it_cannot_use(head, message):
    with pytest.raises(RawFileError, match=f"^raw.csv: {message}"):
        detect_layout(head, "raw.csv")


def test_an_unknown_header_is_refused_before_any_row_is_read(write_lines):
    path = write_lines([",".join(KAGGLE_TEST_CSV), "not,a,row"], "test.csv.gz")
    with pytest.raises(RawFileError, match=r"test\.csv\.gz: unrecognised header \(missing label"):
        CriteoReader(path)


@pytest.mark.parametrize(
    ("row_id", "whole_floats", "name", "bom"),
    [
        (True, True, "train.csv", ""),
        (False, True, "sample.csv.gz", ""),
        (True, False, "train.csv.gz", ""),
        (False, False, "exported.csv", "\ufeff"),  # a spreadsheet's byte-order mark
    ],
)
def test_csv_rows_read_to_the_same_values_as_tsv_rows(raw_rows, write_lines, row_id, whole_floats, name, bom):
    rows = raw_rows(300)
    tsv = write_lines([rows.line(i) for i in range(len(rows))], "train.txt")
    csv_lines = [rows.csv_line(i, row_id, whole_floats) for i in range(len(rows))]
    csv = write_lines([bom + rows.csv_header(row_id), *csv_lines], name)
    assert (".0," in "".join(csv_lines)) == whole_floats  # 260.0-style integers, or none
    expected = (rows.label, rows.dense, rows.sparse, rows.dense_missing)
    for chunk_bytes in (1 << 20, 3000):  # one chunk, and many
        for path in (tsv, csv):
            reader, *arrays = read_all(path, chunk_bytes=chunk_bytes)
            assert (reader.rows, reader.lines, reader.report.total) == (len(rows), len(rows), 0)
            for got, want in zip(arrays, expected, strict=True):
                np.testing.assert_array_equal(got, want)


def test_columns_are_matched_by_name_in_any_order(raw_rows, write_lines):
    rows = raw_rows(50)
    order = np.random.default_rng(len(rows)).permutation(len(NAMES))
    lines = [",".join(np.array(rows.fields(i))[order]) for i in range(len(rows))]
    path = write_lines([",".join(np.array(NAMES)[order]), *lines], "shuffled.csv")
    _, label, dense, sparse, missing = read_all(path)
    np.testing.assert_array_equal(label, rows.label)
    np.testing.assert_array_equal(dense, rows.dense)
    np.testing.assert_array_equal(sparse, rows.sparse)
    np.testing.assert_array_equal(missing, rows.dense_missing)


def test_whole_floats_are_integers_but_other_floats_are_malformed(raw_rows, write_lines, seed):
    rows = raw_rows(100)
    bad = int(np.random.default_rng(seed).integers(0, len(rows)))
    lines = [rows.csv_line(i, row_id=False) for i in range(len(rows))]
    fields = lines[bad].split(",")
    fields[3] = "2.5"  # I3, not a whole number
    fields[5] = "-3.00"  # I5, a whole one
    lines[bad] = ",".join(fields)
    path = write_lines([rows.csv_header(row_id=False), *lines], "sample.csv")
    reader, label, dense, _, _ = read_all(path, chunk_bytes=2000)
    assert reader.report.counts == {BAD_INTEGER: 1}
    (example,) = reader.report.examples
    assert (example.line, example.field, example.value) == (bad + 2, "I3", "2.5")  # line 1 is the header
    keep = np.arange(len(rows)) != bad
    np.testing.assert_array_equal(label, rows.label[keep])
    np.testing.assert_array_equal(dense, rows.dense[keep])
    with pytest.raises(MalformedRowError, match=re.escape(f"line {bad + 2}: {BAD_INTEGER}, field I3: '2.5'")):
        read_all(path, strict=True)

    fields[3] = "7"  # only the whole float left: the row is good and I5 reads as -3
    lines[bad] = ",".join(fields)
    reader, _, dense, _, _ = read_all(write_lines([rows.csv_header(row_id=False), *lines], "sample.csv"))
    assert reader.report.total == 0 and dense[bad, 4] == -3 and dense[bad, 2] == 7


def test_the_headerless_tsv_layout_stays_strict_about_floats(raw_rows, write_lines):
    rows = raw_rows(20)
    lines = [rows.line(i) for i in range(len(rows))]
    lines[7] = "\t".join([lines[7].split("\t")[0], "260.0", *lines[7].split("\t")[2:]])
    reader, *_ = read_all(write_lines(lines))
    assert reader.report.counts == {BAD_INTEGER: 1} and reader.report.examples[0].line == 8


def test_preprocessing_a_csv_gives_the_tsv_output(raw_rows, write_lines, tmp_path):
    rows = raw_rows(500)
    tsv = write_lines([rows.line(i) for i in range(len(rows))], "train.txt")
    csv = write_lines([rows.csv_header(), *(rows.csv_line(i) for i in range(len(rows)))], "train.csv.gz")
    from_tsv = preprocess(tsv, tmp_path / "from_tsv", frequency_threshold=2, show_progress=False)
    from_csv = preprocess(csv, tmp_path / "from_csv", frequency_threshold=2, show_progress=False)
    assert pq.read_table(tmp_path / "from_tsv" / PARQUET_FILE).equals(
        pq.read_table(tmp_path / "from_csv" / PARQUET_FILE)
    )
    assert (from_csv.source, from_csv.num_rows, from_csv.num_lines) == ("train.csv.gz", 500, 500)
    assert from_csv.dense == from_tsv.dense and from_csv.sparse == from_tsv.sparse
    for a, b in zip(from_csv.vocabularies, from_tsv.vocabularies, strict=True):
        np.testing.assert_array_equal(a, b)
