"""The raw reader: exact values, missing fields, compression, and every kind of malformed row."""

from __future__ import annotations

import re

import numpy as np
import pyarrow as pa
import pytest

import lecture_code.data.csv_chunks as csv_chunks
from lecture_code.data import MISSING_ID, CriteoReader, MalformedRowError
from lecture_code.data.hexids import decode_hex_column
from lecture_code.data.malformed import BAD_HEX, BAD_INTEGER, BAD_LABEL, CARRIAGE_RETURN, FIELD_COUNT


def read_all(path, **options):
    reader = CriteoReader(path, **options)
    chunks = list(reader)
    cat = lambda name: np.concatenate([getattr(c, name) for c in chunks]) if chunks else None
    return reader, cat("label"), cat("dense"), cat("dense_missing"), cat("sparse")


HAND_WRITTEN = [
    # label, I1..I13, C1..C26 (hex) -> known ints
    "1\t5\t-1\t\t0\t12\t-2\t7\t\t3\t4\t9999999\t\t1\t"
    + "\t".join(
        ["00000000", "0000000a", "7fffffff", "80000000", "ffffffff", "68fd1e64", ""] + ["deadbeef"] * 19
    ),
    "0\t\t\t\t\t\t\t\t\t\t\t\t\t\t" + "\t".join([""] * 25 + ["ABCDEF01"]),
]


@pytest.mark.parametrize("name", ["hand.tsv", "hand.tsv.gz"])
def test_hand_written_rows_parse_to_exact_values(write_lines, name):
    reader, label, dense, missing, sparse = read_all(write_lines(HAND_WRITTEN, name))
    assert reader.report.total == 0 and reader.rows == 2 and reader.lines == 2
    np.testing.assert_array_equal(label, [1, 0])
    assert label.dtype == np.int8 and dense.dtype == np.int64 and sparse.dtype == np.int64
    np.testing.assert_array_equal(dense[0], [5, -1, 0, 0, 12, -2, 7, 0, 3, 4, 9999999, 0, 1])
    np.testing.assert_array_equal(missing[0], [0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 1, 0])
    assert missing[1].all() and (dense[1] == 0).all()
    expected = [0, 10, 2**31 - 1, 2**31, 2**32 - 1, 0x68FD1E64, MISSING_ID] + [0xDEADBEEF] * 19
    np.testing.assert_array_equal(sparse[0], expected)
    np.testing.assert_array_equal(sparse[1], [MISSING_ID] * 25 + [0xABCDEF01])  # upper case: same id


@pytest.mark.parametrize("chunk_bytes", [1 << 20, 3000])
def test_random_rows_round_trip_across_chunks(raw_rows, write_lines, chunk_bytes):
    rows = raw_rows(400)
    path = write_lines([rows.line(i) for i in range(len(rows))], final_newline=False)
    reader, label, dense, missing, sparse = read_all(path, chunk_bytes=chunk_bytes)
    assert reader.report.total == 0 and reader.rows == len(rows) and reader.lines == len(rows)
    np.testing.assert_array_equal(label, rows.label)
    np.testing.assert_array_equal(dense, rows.dense)
    np.testing.assert_array_equal(missing, rows.dense_missing)
    np.testing.assert_array_equal(sparse, rows.sparse)
    assert reader.bytes_read == reader.file_size


def test_fast_and_slow_paths_agree(raw_rows, write_lines, monkeypatch):
    rows = raw_rows(300)
    path = write_lines([rows.line(i) for i in range(len(rows))])
    fast = read_all(path, chunk_bytes=5000)[1:]
    monkeypatch.setattr(csv_chunks, "SUSPECT_BYTES", (b"\t",))  # every chunk takes the slow path
    slow = read_all(path, chunk_bytes=5000)[1:]
    for a, b in zip(fast, slow, strict=True):
        np.testing.assert_array_equal(a, b)


def _replace(fields, index, value):
    fields = list(fields)
    fields[index] = value
    return "\t".join(fields)


# (make the bad line from good fields, reason, field named in the report)
MALFORMED = {
    "too few fields": (lambda f: "\t".join(f[:30]), FIELD_COUNT, None),
    "too many fields": (lambda f: "\t".join(f + ["1"]), FIELD_COUNT, None),
    "empty line": (lambda f: "", FIELD_COUNT, None),
    "carriage return inside": (lambda f: _replace(f, 20, "1234\r678"), CARRIAGE_RETURN, "C7"),
    "carriage return alone": (lambda f: _replace(f, 3, "\r"), CARRIAGE_RETURN, "I3"),
    "two carriage returns at the end": (lambda f: "\t".join(f) + "\r\r", CARRIAGE_RETURN, "C26"),
    "label 2": (lambda f: _replace(f, 0, "2"), BAD_LABEL, "label"),
    "label missing": (lambda f: _replace(f, 0, ""), BAD_LABEL, "label"),
    "dense float": (lambda f: _replace(f, 3, "1.5"), BAD_INTEGER, "I3"),
    "dense hex prefix": (lambda f: _replace(f, 5, "0x10"), BAD_INTEGER, "I5"),
    "dense space": (lambda f: _replace(f, 13, " 7"), BAD_INTEGER, "I13"),
    "dense plus": (lambda f: _replace(f, 1, "+7"), BAD_INTEGER, "I1"),
    "dense overflow": (lambda f: _replace(f, 2, "99999999999999999999"), BAD_INTEGER, "I2"),
    "hex short": (lambda f: _replace(f, 14, "1234567"), BAD_HEX, "C1"),
    "hex long": (lambda f: _replace(f, 20, "123456789"), BAD_HEX, "C7"),
    "hex non-hex char": (lambda f: _replace(f, 39, "1234567g"), BAD_HEX, "C26"),
    "hex with space": (lambda f: _replace(f, 30, "1234 678"), BAD_HEX, "C17"),
}


@pytest.mark.parametrize("kind", sorted(MALFORMED))
def test_malformed_row_is_counted_and_dropped(raw_rows, write_lines, seed, kind):
    make_bad, reason, field = MALFORMED[kind]
    rows = raw_rows(200)
    bad = int(np.random.default_rng(seed).integers(0, len(rows)))
    lines = [make_bad(rows.fields(i)) if i == bad else rows.line(i) for i in range(len(rows))]
    path = write_lines(lines)
    for chunk_bytes in (1 << 20, 4000):  # one chunk, and many chunks
        reader, label, dense, missing, sparse = read_all(path, chunk_bytes=chunk_bytes)
        assert reader.report.counts == {reason: 1}
        (example,) = reader.report.examples
        assert (example.line, example.reason, example.field) == (bad + 1, reason, field)
        keep = np.arange(len(rows)) != bad
        np.testing.assert_array_equal(label, rows.label[keep])
        np.testing.assert_array_equal(dense, rows.dense[keep])
        np.testing.assert_array_equal(sparse, rows.sparse[keep])
        assert reader.rows == len(rows) - 1 and reader.lines == len(rows)

    with pytest.raises(MalformedRowError, match=re.escape(f"line {bad + 1}: {reason}")) as raised:
        read_all(path, strict=True)
    assert raised.value.row.line == bad + 1 and raised.value.row.field == field
    if field:
        assert f"field {field}" in str(raised.value)


def test_many_malformed_rows_keep_counts_and_first_examples(raw_rows, write_lines):
    rows = raw_rows(300)
    lines = [rows.line(i) if i % 3 else _replace(rows.fields(i), 0, "7") for i in range(len(rows))]
    reader = CriteoReader(write_lines(lines), chunk_bytes=2000, max_examples=5)
    assert sum(len(c) for c in reader) == 200
    assert reader.report.counts == {BAD_LABEL: 100}
    assert [e.line for e in reader.report.examples] == [1, 4, 7, 10, 13]


def test_strict_raises_at_the_first_of_several(raw_rows, write_lines):
    rows = raw_rows(50)
    lines = [rows.line(i) for i in range(len(rows))]
    lines[30] = "\t".join(rows.fields(30)[:5])  # a field-count error after...
    lines[20] = _replace(rows.fields(20), 16, "xyz")  # ...a bad hex id (C3)
    with pytest.raises(MalformedRowError, match="line 21: bad categorical hex id, field C3: 'xyz'"):
        read_all(write_lines(lines), strict=True)


@pytest.mark.parametrize("threads", [0, 1, 3])
def test_worker_threads_do_not_change_the_result(raw_rows, write_lines, threads):
    rows = raw_rows(300)
    lines = [rows.line(i) for i in range(len(rows))]
    lines[150] = "oops"
    path = write_lines(lines)
    baseline, *arrays = read_all(path, chunk_bytes=4000, threads=2)
    other, *other_arrays = read_all(path, chunk_bytes=4000, threads=threads)
    assert other.report == baseline.report and other.report.examples[0].line == 151
    for a, b in zip(arrays, other_arrays, strict=True):
        np.testing.assert_array_equal(a, b)


def test_decode_hex_column_on_every_arrow_layout():
    expected = np.array([0x0A, -1, 0xFFFFFFFF, 0xABCDEF01])
    values = [b"0000000a", None, b"ffffffff", b"ABCDEF01"]
    for kind in (pa.binary(8), pa.binary(), pa.string()):
        ids, bad = decode_hex_column(pa.array(values, kind))
        np.testing.assert_array_equal(ids, expected)
        assert bad is None
        ids, bad = decode_hex_column(pa.array([b"00000007", *values], kind).slice(1))  # an offset array
        np.testing.assert_array_equal(ids, expected)
    ids, bad = decode_hex_column(pa.array([b"0000000g", b"12", None, b"00000001"], pa.binary()))
    np.testing.assert_array_equal(bad, [True, True, False, False])
    np.testing.assert_array_equal(ids, [-1, -1, -1, 1])
    ids, bad = decode_hex_column(
        pa.array([b"ffffffff", b"zzzzzzzz", None, b"00000010"], pa.binary(8)).slice(1)
    )
    np.testing.assert_array_equal(bad, [True, False, False])
    np.testing.assert_array_equal(ids, [-1, -1, 16])
