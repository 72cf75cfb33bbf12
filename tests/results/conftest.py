"""Fixtures of the benchmark tests."""

import pytest


@pytest.fixture
def wrong_path(monkeypatch):
    """``wrong_path(module, path)``: ``module.add_multi_lora`` answers wrong (y off by 1) on ``path`` only,
    so a benchmark's check of that path must turn it into a reason, not a time."""

    def corrupt(module, path: str) -> None:
        real = module.add_multi_lora

        def wrong(y, *args, path=None, _wrong=path, **kwargs):
            real(y, *args, path=path, **kwargs)
            if path == _wrong:
                y.add_(1.0)

        monkeypatch.setattr(module, "add_multi_lora", wrong)

    return corrupt
