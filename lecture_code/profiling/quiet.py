"""Keep the profiler library's status lines out of notebook outputs and logs.

``torch.profiler`` runs on Kineto, a C++ library that writes status lines straight to the process's stderr
(file descriptor 2), where ``warnings`` filters and ``contextlib.redirect_stderr`` cannot reach: torch 2.13's
Kineto prints ``USDT: ... profiler_start`` and ``profiler_stop`` every time a profile starts and stops, and a
profile with ``profile_memory=True`` prints a warning that blocks allocated before it are not tracked (so
their frees are not either: expected, and what :func:`lecture_code.perf.step_timing.peak_step_bytes`
accounts for). :func:`quiet_profiler` points descriptor 2 at a temporary file while the profiler runs, then
passes on every line but those.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["PROFILER_NOISE", "quiet_profiler"]

PROFILER_NOISE = re.compile(
    r"^(USDT:|STAGE:).*SyncActivityProfilerHandler"  # Kineto's start/stop status lines
    r"|Memory block of unknown size was allocated before the profiling started"
)


@contextmanager
def quiet_profiler(noise: re.Pattern = PROFILER_NOISE) -> Iterator[None]:
    """Drop stderr lines matching ``noise`` that C++ code writes inside the block; keep every other line."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as caught:
        os.dup2(caught.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            caught.seek(0)
            text = caught.read().decode(errors="replace")
            kept = "".join(line for line in text.splitlines(keepends=True) if not noise.search(line))
            if kept:
                sys.stderr.write(kept)
                sys.stderr.flush()
