"""Windows line endings (``\\r\\n``) read as they are: the values, rows and line numbers of ``\\n``."""

from __future__ import annotations

import gzip
import re

import numpy as np
import pyarrow.parquet as pq
import pytest

import lecture_code.data.csv_chunks as csv_chunks
from lecture_code.data import CriteoReader, MalformedRowError, preprocess
from lecture_code.data.malformed import BAD_HEX, CARRIAGE_RETURN, FIELD_COUNT
from lecture_code.data.metadata import METADATA_FILE, PARQUET_FILE
from lecture_code.data.preprocess import main

LAYOUTS = {  # name -> (file name, lines of the file from RawRows: header first where the layout has one)
    "kaggle train.txt": ("train.txt", lambda rows: [rows.line(i) for i in range(len(rows))]),
    "kaggle train.csv": (
        "train.csv",
        lambda rows: [rows.csv_header(), *map(rows.csv_line, range(len(rows)))],
    ),
}


def _read(path, **options):
    reader = CriteoReader(path, **options)
    chunks = list(reader)
    arrays = {
        k: np.concatenate([getattr(c, k) for c in chunks])
        for k in ("label", "dense", "dense_missing", "sparse")
    }
    return reader, arrays


def _bad_line(rows, i: int, layout: str) -> str:
    """Row ``i`` with C3 (a categorical id) not hex, in the file's layout."""
    fields = rows.fields(i)
    fields[16] = "zz"
    return "\t".join(fields) if layout == "kaggle train.txt" else ",".join([str(10_000_000 + i), *fields])


@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gzip"])
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_crlf_reads_to_the_values_and_line_numbers_of_lf(raw_rows, write_lines, tmp_path, seed, layout, gz):
    name, make = LAYOUTS[layout]
    name += ".gz" if gz else ""
    rows = raw_rows(300)
    lines = make(rows)
    header = int(lines[0][0].isalpha())
    bad = int(np.random.default_rng(seed).integers(0, len(rows)))
    lines[header + bad] = _bad_line(rows, bad, layout)
    lf = write_lines(lines, f"lf_{name}")
    crlf = write_lines(lines, f"crlf_{name}", newline="\r\n")
    data = crlf.read_bytes()
    assert (gzip.decompress(data) if gz else data).count(b"\r\n") == len(lines)
    for chunk_bytes in (1 << 20, 3000):  # one chunk, and many (cut inside the file, between \r\n lines)
        (lf_reader, want), (crlf_reader, got) = (_read(p, chunk_bytes=chunk_bytes) for p in (lf, crlf))
        assert (
            (crlf_reader.rows, crlf_reader.lines)
            == (lf_reader.rows, lf_reader.lines)
            == (len(rows) - 1, len(rows))
        )
        for key in want:
            np.testing.assert_array_equal(got[key], want[key], err_msg=key)
        assert crlf_reader.report.counts == lf_reader.report.counts == {BAD_HEX: 1}
        assert crlf_reader.report.examples == lf_reader.report.examples
        (example,) = crlf_reader.report.examples
        assert (example.line, example.field, example.value) == (header + bad + 1, "C3", "zz")
    with pytest.raises(
        MalformedRowError, match=re.escape(f"line {header + bad + 1}: {BAD_HEX}, field C3: 'zz'")
    ):
        _read(crlf, strict=True)


def test_the_last_column_keeps_no_carriage_return(raw_rows, write_lines):
    """C26 ends each line: its ids decode as written (a ``\\r`` kept in it would make every row malformed)."""
    rows = raw_rows(40)
    rows.sparse[:, -1] = np.arange(len(rows)) + 0xABC00000  # every row has a C26 value
    rows.sparse_missing[:, -1] = False
    _, arrays = _read(write_lines([rows.line(i) for i in range(len(rows))], newline="\r\n"))
    np.testing.assert_array_equal(arrays["sparse"][:, -1], np.arange(len(rows)) + 0xABC00000)


def test_stray_carriage_returns_in_a_crlf_file_are_still_malformed(raw_rows, write_lines):
    rows = raw_rows(30)
    lines = [rows.line(i) for i in range(len(rows))]
    lines[4] = lines[4] + "\r"  # ends in \r\r\n: one \r too many
    lines[9] = ""  # an empty line (\r\n alone)
    lines[17] = "\t".join(rows.fields(17)[:7])  # too few fields
    reader, _ = _read(write_lines(lines, newline="\r\n"), chunk_bytes=2000)
    assert reader.report.counts == {CARRIAGE_RETURN: 1, FIELD_COUNT: 2}
    assert [(e.line, e.reason, e.field) for e in reader.report.examples] == [
        (5, CARRIAGE_RETURN, "C26"),
        (10, FIELD_COUNT, None),
        (18, FIELD_COUNT, None),
    ]
    assert "\r" not in reader.report.examples[2].value  # the line end is not shown as part of the line
    assert (reader.rows, reader.lines) == (len(rows) - 3, len(rows))


@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gzip"])
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_preprocessing_a_crlf_file_gives_the_lf_output(raw_rows, tmp_path, layout, gz):
    name, make = LAYOUTS[layout]
    name += ".gz" if gz else ""
    lines = make(raw_rows(400))
    metadata = {}
    for kind, newline in (("lf", "\n"), ("crlf", "\r\n")):
        (tmp_path / kind).mkdir()
        raw = tmp_path / kind / name  # the same file name: metadata records it
        data = (newline.join(lines) + newline).encode()
        raw.write_bytes(gzip.compress(data) if gz else data)
        metadata[kind] = preprocess(raw, tmp_path / kind / "out", frequency_threshold=2, show_progress=False)
    lf, crlf = tmp_path / "lf" / "out", tmp_path / "crlf" / "out"
    assert pq.read_table(crlf / PARQUET_FILE).equals(pq.read_table(lf / PARQUET_FILE))
    assert (crlf / METADATA_FILE).read_text() == (lf / METADATA_FILE).read_text()
    assert metadata["crlf"] == metadata["lf"]  # every field but the vocabularies, compared next
    assert (metadata["crlf"].num_rows, metadata["crlf"].num_lines, metadata["crlf"].malformed.total) == (
        400,
        400,
        0,
    )
    for a, b in zip(metadata["crlf"].vocabularies, metadata["lf"].vocabularies, strict=True):
        np.testing.assert_array_equal(a, b)


def test_the_command_line_preprocesses_a_crlf_csv(raw_rows, write_lines, tmp_path, capsys):
    rows = raw_rows(200)
    raw = write_lines([rows.csv_header(), *map(rows.csv_line, range(len(rows)))], "train.csv", newline="\r\n")
    main([str(raw), str(tmp_path / "out"), "--quiet"])
    out = capsys.readouterr().out
    assert "rows:          200 of 200 lines" in out and "malformed:     0\n" in out


def test_a_crlf_file_takes_the_fast_path(raw_rows, write_lines, monkeypatch):
    """Windows files are common: they parse at the speed of LF ones (pyarrow's typed parse, no byte-by-byte
    validation), since every ``\\r`` ends a line."""

    def slow(*args, **kwargs):
        raise AssertionError("the slow path ran")

    monkeypatch.setattr(csv_chunks, "parse_chunk_slow", slow)
    rows = raw_rows(200)
    reader, arrays = _read(
        write_lines([rows.line(i) for i in range(len(rows))], newline="\r\n"), chunk_bytes=3000
    )
    assert reader.rows == len(rows) and reader.report.total == 0
    np.testing.assert_array_equal(arrays["sparse"], rows.sparse)
