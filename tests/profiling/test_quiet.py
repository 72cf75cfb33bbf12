"""quiet_profiler drops the profiler library's status lines from stderr and keeps everything else."""

from __future__ import annotations

import os

import torch
from torch.profiler import profile

from lecture_code.profiling.quiet import quiet_profiler


def test_quiet_profiler_filters_fd2_lines(capfd):
    with quiet_profiler():
        os.write(2, b"USDT:2026-11-23 08:51:53 310:310 SyncActivityProfilerHandler.cpp:52] profiler_start\n")
        os.write(2, b"a real error line\n")
        os.write(2, b"[W1123 CPUAllocator.cpp:245] Memory block of unknown size was allocated before the ")
        os.write(2, b"profiling started, profiler results will not include the deallocation event\n")
        os.write(2, b"USDT:2026-11-23 08:51:53 310:310 SyncActivityProfilerHandler.cpp:59] profiler_stop\n")
    os.write(2, b"after the block\n")
    assert capfd.readouterr().err == "a real error line\nafter the block\n"


def test_a_real_profile_leaves_stderr_clean(capfd):
    with quiet_profiler(), profile(profile_memory=True):
        torch.ones(64).sum()
    err = capfd.readouterr().err
    assert "USDT" not in err and "profiler_st" not in err, err
