"""The FLOP floor of notebook 05's section 1: FLOPs counted, a GEMM rate measured under each precision."""

import pytest
import torch
from torch import nn

from lecture_code.perf.flop_floor import gemm_tflops, largest_linear, step_flops


def test_step_flops_count_linears_and_interaction_three_times():
    model = nn.Sequential(nn.Linear(13, 8), nn.ReLU(), nn.Sequential(nn.Linear(8, 4), nn.Linear(4, 1)))
    got = step_flops(model, batch=10, num_sparse=3, dim=2)
    assert got["linear"] == 2 * 10 * (13 * 8 + 8 * 4 + 4 * 1)
    assert got["interaction"] == 2 * 10 * 6 * 2  # (3 + 1)·3/2 = 6 pairs of dots of length 2
    assert got["step"] == 3 * (got["linear"] + got["interaction"])
    assert largest_linear(model) == (13, 8)


@pytest.mark.parametrize("precision", ["highest", "high"])
def test_gemm_rate_is_measured_and_the_precision_restored(precision, monkeypatch):
    seen = []
    from lecture_code import bench

    real = bench.median_ms

    def spy(fn, device, **kw):  # the timed call runs under the precision asked for
        seen.append(torch.get_float32_matmul_precision())
        return real(fn, device, **kw)

    monkeypatch.setattr(bench, "median_ms", spy)
    rate = gemm_tflops(64, 32, 16, torch.device("cpu"), precision)
    assert seen == [precision] and 0 < rate < 1e4
    assert torch.get_float32_matmul_precision() == "highest"
