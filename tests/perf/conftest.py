from __future__ import annotations

import pytest

from lecture_code import data as criteo
from lecture_code.perf.workload import load_workload


@pytest.fixture(scope="session")
def tiny_data_dir(tmp_path_factory):
    """A few thousand preprocessed synthetic rows (seconds to make)."""
    root = tmp_path_factory.mktemp("criteo_tiny")
    raw = criteo.generate_criteo_tsv(root / "raw.tsv", 4_000, seed=5)
    criteo.preprocess(raw, root / "processed", frequency_threshold=2, show_progress=False)
    return root / "processed"


@pytest.fixture(scope="session")
def tiny_workload(tiny_data_dir):
    return load_workload(tiny_data_dir, preset="small", batch_size=64, num_batches=3)


@pytest.fixture(autouse=True)
def one_torch_thread():
    """One torch thread, as ``lecture_code.bench.setup`` does on a CPU: with two OpenMP threads on a busy
    2-core machine a tiny DLRM step takes a second instead of milliseconds (threads spin, waiting)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
