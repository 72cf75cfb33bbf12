"""Shared test setup: kernels decide the runtime mode on import; GPU-marked tests skip cleanly on CPU; a
Chromium for the rendering tests (Netron, slides).

Chromium: on a fresh Debian CI machine running as root, the session fixture installs it with apt (about 20 s);
elsewhere, without Chromium, the rendering tests are skipped with the reason. Set ``LECTURE_NO_APT=1`` to
forbid the install.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

import kernels  # noqa: F401  (sets TRITON_INTERPRET=1 on CPU machines before any kernel is defined)


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU (run on the device machine)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)


@pytest.fixture
def seed():
    """A fresh seed per test run, printed so a failure can be replayed (never zeros, never ones as data)."""
    import random

    value = random.randrange(1 << 30)
    torch.manual_seed(value)
    print(f"seed={value}")
    return value


APT_PACKAGES = ("chromium", "fonts-dejavu-core", "fonts-wqy-microhei")  # wqy: Netron's 〈〉 shape brackets
APT_TIMEOUT_S = 600


def _install_chromium_with_apt() -> str:
    """Try ``apt-get install chromium`` (root on Debian only); return what happened, for a skip reason."""
    if os.environ.get("LECTURE_NO_APT"):
        return "LECTURE_NO_APT is set"
    if not Path("/etc/debian_version").exists() or shutil.which("apt-get") is None:
        return "not a Debian machine with apt-get"
    if os.geteuid() != 0:
        return "not root, cannot apt-get install chromium"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    commands = (
        ["apt-get", "update", "-q"],
        ["apt-get", "install", "-y", "-q", "--no-install-recommends", *APT_PACKAGES],
    )
    try:
        for command in commands:
            done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=APT_TIMEOUT_S)
            if done.returncode != 0:
                return f"{' '.join(command)} failed: {done.stderr.strip()[-300:]}"
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"apt-get failed: {error}"
    return "apt-get installed chromium, yet no executable was found: check $CHROMIUM and PATH"


@pytest.fixture(scope="session")
def chromium() -> str:
    """A Chromium executable (installed with apt when possible), else skip with the reason."""
    import playwright.sync_api  # noqa: F401  (a requirement: a broken install fails here, it is not skipped)

    from lecture_code.export.netron import find_chromium

    path = find_chromium()
    if path is None:
        outcome = _install_chromium_with_apt()
        path = find_chromium()
        if path is None:
            pytest.skip(f"no Chromium for the rendering tests ({outcome})")
    return path
