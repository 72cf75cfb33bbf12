"""``benchmarks/bench_ddp.py``'s arithmetic and its refusal row, without starting processes (CPU, fast).

The whole ``python -m benchmarks.bench_ddp --quick`` (two sets of processes, the fused kernels interpreted)
takes ~30 s on a 2-core CPU: run by hand, not in CI.
"""

from __future__ import annotations

import pytest

from benchmarks import bench_ddp
from lecture_code.model import DLRMConfig
from lecture_code.perf.kaggle_tables import kaggle_tables


def test_scaling_efficiency_is_relative_to_the_same_backend_on_one_rank():
    rows = [
        {"backend": "eager", "world_size": 1, "samples_per_s": 1000.0},
        {"backend": "eager", "world_size": 2, "samples_per_s": 1500.0},
        {"backend": "fused", "world_size": 1, "samples_per_s": 4000.0},
        {"backend": "fused", "world_size": 2, "samples_per_s": None, "error": "refused"},
    ]
    got = [r["scaling_efficiency"] for r in bench_ddp.with_efficiency(rows)]
    assert got[:3] == [1.0, pytest.approx(0.75), 1.0] and got[3] is None


def test_eager_cuda_graph_on_two_ranks_is_a_row_with_the_refusal(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("LOCAL_RANK", "1")
    config = DLRMConfig.preset("small", kaggle_tables(cap=10), hashing="modulus")
    spec = bench_ddp.Spec("eager-graph", config, batch=4, device="cpu", steps=1, warmup=0, repeats=1)
    (row,) = bench_ddp._rank_bench([spec])  # refused before any model is built
    assert set(row) == {"error"} and "needs --backend fused" in row["error"]
