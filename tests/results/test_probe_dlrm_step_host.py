"""The DLRM step's host probe runs (in a process of its own: it stubs every launch) and its direct loop makes
no op call while the forced one does."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
import torch

from lecture_code.environment import REPO_ROOT


@pytest.mark.skipif(torch.cuda.is_available(), reason="the probe refuses a GPU machine (it stubs launches)")
def test_the_probe_times_both_loops_and_counts_the_op_calls():
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.probe_dlrm_step_host", "--iters", "3", "--repeats", "1"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300, check=True,
    ).stdout  # fmt: skip
    got = re.search(
        r"direct (\d+) \((\d+) op calls\), through the ops (\d+) \(([\d.]+) op calls per step\)", out
    )
    assert got, out
    direct_us, direct_calls, op_us, per_step = (float(v) for v in got.groups())
    assert direct_us > 0 and op_us > 0 and direct_calls == 0 and per_step >= 2
