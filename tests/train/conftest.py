"""Fixtures of the training tests: a tiny preprocessed Criteo-format dataset, made once per session."""

from __future__ import annotations

import pytest

from lecture_code import data as criteo


@pytest.fixture(scope="session")
def tiny_data(tmp_path_factory):
    root = tmp_path_factory.mktemp("criteo")
    raw = criteo.generate_criteo_tsv(root / "raw.tsv", 12_000, seed=3)
    out = root / "processed"
    criteo.preprocess(raw, out, frequency_threshold=2, show_progress=False)
    return out
