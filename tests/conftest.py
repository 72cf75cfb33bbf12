"""Shared test setup: kernels decide the runtime mode on import; GPU-marked tests skip cleanly where kernels
do not run compiled on a GPU; a Chromium for the rendering tests (Netron, slides).

Chromium: the rendering tests use the one that is there (``$CHROMIUM``, or one on ``PATH``) and skip,
saying so, where there is none. Tests install nothing: ``make setup-browser`` does (``make test`` runs it
first; on a fresh Debian CI machine running as root it apt-gets Chromium and fonts).
"""

from __future__ import annotations

import os

import pytest
import torch

import kernels  # noqa: F401  (sets TRITON_INTERPRET=1 on CPU machines before any kernel is defined)
from kernels import runtime


def _share_the_cores_between_workers() -> None:
    """Under pytest-xdist, each worker (and the notebook kernels and processes it starts, through
    ``OMP_NUM_THREADS``) gets its share of the cores. Two workers with torch's default of one thread per core
    each oversubscribe the machine, and OpenMP's spinning threads then wait on each other (measured on a
    busy 2-core machine: notebook 01's training run at 100 steps took 71 s on two threads, 22 s on one)."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))
    if workers > 1:
        threads = max(1, (os.cpu_count() or 1) // workers)
        os.environ["OMP_NUM_THREADS"] = str(threads)
        torch.set_num_threads(threads)


_share_the_cores_between_workers()

# Workers ``-n auto`` starts on a machine with a GPU. Every worker there holds a CUDA context and its
# allocator's cache on the same GPU, and the notebooks run at full GPU sizes: on a 2 x H100 machine (32 cores)
# 32 workers failed cells of notebooks 02, 04, 05 and 08 that passed with 4 workers beside 12 test workers.
GPU_MACHINE_WORKERS = 12


def pytest_xdist_auto_num_workers(config):
    """``-n auto``: one worker per core, and at most GPU_MACHINE_WORKERS on a machine with a GPU."""
    cores = os.cpu_count() or 1
    return min(cores, GPU_MACHINE_WORKERS) if torch.cuda.is_available() else cores


def pytest_collection_modifyitems(config, items):
    """``gpu``-marked tests run where kernels run compiled on a CUDA GPU and skip elsewhere, saying why;
    also on a GPU machine where ``TRITON_INTERPRET`` is on (kernels and their tensors are then on the CPU,
    and a GPU test there would test the interpreter)."""
    if not torch.cuda.is_available():
        reason = "needs a CUDA GPU (run on the device machine)"
    elif runtime.interpreting():
        reason = "TRITON_INTERPRET is on: Triton runs on the host, the GPU tests need it compiling (unset it)"
    else:
        return
    skip_gpu = pytest.mark.skip(reason=reason)
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)


@pytest.fixture(autouse=True)
def _triton_mode_unchanged():
    """A test that leaves ``TRITON_INTERPRET`` changed would switch every later test of its worker to the
    other runtime mode (seen on a GPU machine: kernels on CPU tensors). Restore it and fail that test."""
    before = os.environ.get("TRITON_INTERPRET")
    yield
    after = os.environ.get("TRITON_INTERPRET")
    if after != before:
        if before is None:
            os.environ.pop("TRITON_INTERPRET", None)
        else:
            os.environ["TRITON_INTERPRET"] = before
        pytest.fail(f"this test left TRITON_INTERPRET={after!r} (it was {before!r} before)")


@pytest.fixture
def seed():
    """A fresh seed per test run, printed so a failure can be replayed: ``TEST_SEED=<printed value> pytest …``
    (never zeros, never ones as data)."""
    import random

    value = int(os.environ.get("TEST_SEED") or random.randrange(1 << 30))
    torch.manual_seed(value)
    print(f"seed={value}")
    return value


@pytest.fixture(scope="session")
def chromium() -> str:
    """The system Chromium for the rendering tests (Netron, slides), else skip with the reason."""
    from lecture_code.export.netron import find_chromium

    path = find_chromium()
    if path is None:
        where = (
            f"$CHROMIUM ({os.environ['CHROMIUM']}) is not a file"
            if os.environ.get("CHROMIUM")
            else "none on PATH"
        )
        pytest.skip(
            f"no Chromium for the rendering tests ({where}): run `make setup-browser` or set $CHROMIUM"
        )
    import playwright.sync_api  # noqa: F401  (a requirement: a broken install fails here, it is not skipped)

    return path
