"""Fixtures for the DLRM model tests (helpers that build data live in ``dlrm_test_data.py``)."""

from __future__ import annotations

import numpy as np
import pytest


@pytest.fixture
def rng(seed) -> np.random.Generator:
    """A numpy generator seeded from the shared per-run ``seed`` fixture (printed on failure)."""
    return np.random.default_rng(seed)
