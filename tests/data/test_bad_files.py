"""Files that cannot be preprocessed: one line, a non-zero exit, and nothing written, neither an output
folder nor a staging folder; a missing input and Ctrl-C the same."""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from lecture_code.data import (
    DENSE_COLUMNS,
    SPARSE_COLUMNS,
    RawFileError,
    generate_criteo_tsv,
    load_metadata,
    preprocess,
)
from lecture_code.data.malformed import BAD_LABEL, FIELD_COUNT
from lecture_code.data.preprocess import main

REPO_ROOT = Path(__file__).resolve().parents[2]
KAGGLE_HEADER = ",".join(["Id", "Label", *DENSE_COLUMNS, *SPARSE_COLUMNS]).encode() + b"\n"


def run_main(argv, capsys) -> tuple[int, str]:
    """Run the command line in this process; return its exit code and its stderr, stripped."""
    with pytest.raises(SystemExit) as exited:
        main([str(a) for a in argv])
    return exited.value.code, capsys.readouterr().err.strip()


def assert_nothing_written(folder: Path, *inputs: str) -> None:
    assert sorted(p.name for p in folder.iterdir()) == sorted(inputs)  # no output, no .NAME.tmp-* left


def good_and_bad_lines(num_good: int, num_bad: int, tmp_path) -> list[str]:
    source = generate_criteo_tsv(tmp_path / "lines.tsv", num_good, seed=3)
    lines = source.read_text().splitlines()
    source.unlink()
    for k in range(num_bad):  # spread out: every 7th line from the third
        lines[2 + 7 * k] = "7" + lines[2 + 7 * k][1:]  # a label of 7
    return lines


@pytest.mark.parametrize(
    ("name", "data", "message"),
    [
        ("empty.tsv", b"", r"empty\.tsv is empty: nothing to preprocess"),
        ("empty.tsv.gz", gzip.compress(b"", mtime=0), r"empty\.tsv\.gz is empty"),
        ("header.csv", KAGGLE_HEADER, r"header\.csv has a header but no rows"),
        ("junk.tsv", b"1 not a row\n\n1\t2\t3\n", r"junk\.tsv: none of the 3 lines read is a valid row"),
        ("test.csv", b"Id,I1,I2\n1,2,3\n", r"test\.csv: unrecognised header \(missing label"),
    ],
)
def test_a_file_without_rows_is_refused_and_nothing_is_written(tmp_path, capsys, name, data, message):
    (tmp_path / name).write_bytes(data)
    with pytest.raises(RawFileError, match=message):
        preprocess(tmp_path / name, tmp_path / "out", show_progress=False)
    code, err = run_main([tmp_path / name, tmp_path / "out", "--quiet"], capsys)
    assert code == 1 and err.startswith("error: ") and "\n" not in err
    assert_nothing_written(tmp_path, name)


def test_a_file_of_junk_stops_after_its_first_chunk(tmp_path):
    path = tmp_path / "junk.tsv"
    path.write_text("".join(f"{i} junk\n" for i in range(5000)))  # a letter first would be a header
    with pytest.raises(RawFileError, match=r"none of the (\d+) lines read") as raised:
        preprocess(path, tmp_path / "out", chunk_bytes=4000, show_progress=False)
    lines_read = int(str(raised.value).split("none of the ")[1].split(" lines")[0].replace(",", ""))
    assert 0 < lines_read < 1000  # one 4 kB chunk, not the whole file
    assert f"first: line 1: {FIELD_COUNT}" in str(raised.value)
    with pytest.raises(RawFileError, match=r"none of the 5,000 lines read"):  # any fraction: still refused
        preprocess(path, tmp_path / "out", chunk_bytes=4000, show_progress=False, max_malformed=1)
    assert_nothing_written(tmp_path, "junk.tsv")


def test_too_many_malformed_rows_are_refused_below_the_limit_kept(tmp_path, capsys):
    path = tmp_path / "raw.tsv"
    path.write_text("\n".join(good_and_bad_lines(200, 5, tmp_path)) + "\n")  # 2.5% malformed
    code, err = run_main([path, tmp_path / "out", "--quiet"], capsys)  # default limit: 1%
    assert code == 1 and "\n" not in err
    assert err.startswith("error: raw.tsv: 5 of 200 lines are malformed (2.50%, more than the 1.00% allowed)")
    assert f"{{'{BAD_LABEL}': 5}}; first: line 3: {BAD_LABEL}, field label: '7'" in err
    assert err.endswith("raise the limit (--max-malformed) to keep the valid rows")
    assert_nothing_written(tmp_path, "raw.tsv")

    code, err = run_main([path, tmp_path / "out", "--quiet", "--max-malformed", "0.02"], capsys)
    assert code == 1 and "more than the 2.00% allowed" in err
    main([str(path), str(tmp_path / "out"), "--quiet", "--max-malformed", "0.025"])  # 5 <= 0.025 * 200
    meta = load_metadata(tmp_path / "out")
    assert (meta.num_rows, meta.num_lines, meta.malformed.counts) == (195, 200, {BAD_LABEL: 5})


def test_a_refused_file_keeps_the_previous_output(tmp_path):
    good = generate_criteo_tsv(tmp_path / "good.tsv", 300, seed=1)
    before = preprocess(good, tmp_path / "out", show_progress=False)
    table = pq.read_table(tmp_path / "out" / "data.parquet")
    bad = tmp_path / "bad.tsv"
    bad.write_text("\n".join(good_and_bad_lines(300, 30, tmp_path)) + "\n")
    with pytest.raises(RawFileError, match="30 of 300 lines are malformed"):
        preprocess(bad, tmp_path / "out", show_progress=False)
    assert load_metadata(tmp_path / "out") == before
    assert pq.read_table(tmp_path / "out" / "data.parquet").equals(table)
    assert_nothing_written(tmp_path, "good.tsv", "bad.tsv", "out")


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--max-malformed", "1.5", "must be a fraction in [0, 1], got 1.5"),
        ("--frequency-threshold", "0", "must be at least 1, got 0"),
    ],
)
def test_bad_flags_are_usage_errors(tmp_path, capsys, flag, value, message):
    raw = generate_criteo_tsv(tmp_path / "raw.tsv", 10, seed=1)
    code, err = run_main([raw, tmp_path / "out", flag, value], capsys)
    assert code == 2 and message in err and f"argument {flag}" in err
    assert_nothing_written(tmp_path, "raw.tsv")


def test_a_missing_input_is_one_line_without_a_traceback(tmp_path, capsys):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])}
    command = [sys.executable, "-m", "lecture_code.data.preprocess", "missing.tsv", "out", "--quiet"]
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.strip() == "error: missing.tsv: no such file"  # one line: no traceback, no warning
    assert_nothing_written(tmp_path)
    (tmp_path / "folder").mkdir()
    code, err = run_main([tmp_path / "folder", tmp_path / "out"], capsys)
    assert code == 1 and err == f"error: {tmp_path / 'folder'}: a folder, not a file"
    assert_nothing_written(tmp_path, "folder")


def interrupt_the_first_write(monkeypatch):
    def write_table(self, table, *args, **kwargs):
        raise KeyboardInterrupt  # as Ctrl-C would, with the parquet file open in the staging folder

    monkeypatch.setattr(pq.ParquetWriter, "write_table", write_table)


def test_ctrl_c_says_one_line_exits_130_and_leaves_nothing(tmp_path, capsys, monkeypatch):
    raw = generate_criteo_tsv(tmp_path / "raw.tsv", 3000, seed=2)
    interrupt_the_first_write(monkeypatch)
    code, err = run_main([raw, tmp_path / "out", "--quiet"], capsys)
    assert code == 130 and err == f"stopped (Ctrl-C): nothing written, {tmp_path / 'out'} was not created"
    assert_nothing_written(tmp_path, "raw.tsv")

    monkeypatch.undo()
    before = preprocess(raw, tmp_path / "out", show_progress=False)
    interrupt_the_first_write(monkeypatch)
    code, err = run_main([raw, tmp_path / "out", "--quiet", "--frequency-threshold", "3"], capsys)
    assert code == 130 and err == f"stopped (Ctrl-C): nothing written, {tmp_path / 'out'} is unchanged"
    assert load_metadata(tmp_path / "out") == before
    assert_nothing_written(tmp_path, "raw.tsv", "out")
