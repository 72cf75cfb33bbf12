"""Staging folders: a killed run's are removed (or its previous output restored) by the next run, with a
message; a live run's are left alone."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from lecture_code.data import generate_criteo_tsv, load_metadata, preprocess, remove_stale_staging
from lecture_code.data.staging import process_alive, staging_dir


@pytest.fixture(scope="module")
def dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    child = subprocess.Popen([sys.executable, "-c", ""])
    child.wait()
    assert not process_alive(child.pid)
    return child.pid


def make_folder(path, note: str = "partial"):
    path.mkdir()
    (path / "data.parquet").write_text(note)
    return path


def test_stale_folders_are_removed_and_live_ones_kept(tmp_path, dead_pid, warnings_logged):
    live_pid = os.getppid()  # another process, alive for the whole test
    assert process_alive(live_pid) and live_pid != os.getpid()
    out = make_folder(tmp_path / "out", "the current output")
    assert re.fullmatch(rf"\.out\.tmp-{os.getpid()}-[0-9a-f]{{8}}", staging_dir(out).name)  # as made below
    killed = make_folder(tmp_path / f".out.tmp-{dead_pid}-0123abcd")
    killed_while_replacing = make_folder(tmp_path / f".out.old-{dead_pid}")
    live = make_folder(tmp_path / f".out.tmp-{live_pid}-89abcdef")
    others = [
        make_folder(tmp_path / f".other.tmp-{dead_pid}-0123abcd"),  # another output's
        make_folder(tmp_path / f".out.tmp-{dead_pid}"),  # not a name preprocess makes
        make_folder(tmp_path / ".out.tmp-x-0123abcd"),
    ]

    assert remove_stale_staging(out) == [killed_while_replacing, killed]
    assert not killed.exists() and not killed_while_replacing.exists()
    assert live.exists() and all(p.exists() for p in others)
    assert (out / "data.parquet").read_text() == "the current output"
    assert sorted(warnings_logged) == [  # one line per folder
        f"leaving .out.tmp-{live_pid}-89abcdef: process {live_pid} is still running (a concurrent run?)",
        f"removed .out.old-{dead_pid}, left by process {dead_pid}, which was killed before it finished",
        f"removed .out.tmp-{dead_pid}-0123abcd, left by process {dead_pid}, "
        "which was killed before it finished",
    ]


def test_a_previous_output_caught_between_two_renames_is_restored(tmp_path, dead_pid, warnings_logged):
    make_folder(tmp_path / f".out.old-{dead_pid}", "the previous output")
    assert remove_stale_staging(tmp_path / "out") == [tmp_path / f".out.old-{dead_pid}"]
    assert (tmp_path / "out" / "data.parquet").read_text() == "the previous output"
    assert warnings_logged == [
        f"restored out from .out.old-{dead_pid}, left by a run killed while replacing it"
    ]


def test_the_next_run_removes_a_killed_runs_folder(tmp_path, dead_pid, warnings_logged):
    raw = generate_criteo_tsv(tmp_path / "raw.tsv", 200, seed=4)
    killed = make_folder(tmp_path / f".out.tmp-{dead_pid}-0123abcd")
    live = make_folder(tmp_path / f".out.tmp-{os.getppid()}-89abcdef")
    preprocess(raw, tmp_path / "out", show_progress=False)
    assert load_metadata(tmp_path / "out").num_rows == 200
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["raw.tsv", "out", live.name])
    assert sorted(message.split(",")[0].split(":")[0] for message in warnings_logged) == [
        f"leaving {live.name}",
        f"removed {killed.name}",
    ]
