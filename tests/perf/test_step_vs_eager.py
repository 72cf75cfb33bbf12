"""A waterfall step against eager (perf.step_vs_eager): equal steps agree, a planted 2x learning rate does
not; on a GPU, notebook 05's headline rows train like eager."""

from __future__ import annotations

import pytest
import torch

from kernels import runtime
from lecture_code.model import DLRMConfig
from lecture_code.perf import dlrm_step
from lecture_code.perf.dlrm_step import make_batches
from lecture_code.perf.step_vs_eager import compare_with_eager

CONFIG = DLRMConfig.preset("small", (3, 40, 7, 120), hashing="modulus", over_arch_layer_sizes=(16, 1))
CPU = torch.device("cpu")


@pytest.mark.skipif(
    not runtime.interpreting(), reason="the fused kernels on CPU tensors need the interpreter"
)
def test_compare_with_eager_sees_equal_steps_and_a_different_one(monkeypatch):
    batches = make_batches(CONFIG, 24, 2, CPU, ids="zipf", seed=3)
    for name in ("fused", "packed + index_add_"):
        got = compare_with_eager(name, CONFIG, CPU, batches, lr=0.3)
        assert got["steps"] == 2 and got["against"] == "eager, dense grads"
        assert got["max |Δ loss|"] < 1e-5 and got["max |Δ table update|"] < 1e-5, got
        assert got["max |table update|"] > 1e-3  # the tables moved: the comparison is not of zeros
    build = dlrm_step.build_step

    def off_by_lr(name, config, device, example, lr=0.1):  # a step that updates with twice the rate
        return build(name, config, device, example, lr=2 * lr if name == "fused" else lr)

    monkeypatch.setattr(dlrm_step, "build_step", off_by_lr)
    got = compare_with_eager("fused", CONFIG, CPU, batches, lr=0.3)
    assert got["max |Δ table update|"] > 0.5 * got["max |table update|"]


@pytest.mark.gpu
@pytest.mark.parametrize(
    "name",
    [
        "fused + MLP SGD in backward, atomic SGD, CUDA graph",
        "fused + MLP SGD in backward, atomic SGD, TF32, CUDA graph",
    ],
)
def test_headline_rows_train_like_eager_on_a_gpu(name):
    cuda = torch.device("cuda")
    got = compare_with_eager(
        name, CONFIG, cuda, make_batches(CONFIG, 64, 3, cuda, ids="zipf", seed=3), lr=0.3
    )
    assert got["against"].endswith("(TF32)") == ("TF32" in name)
    assert got["max |Δ loss|"] < 1e-5 and got["max |Δ table update|"] < 1e-5, got
    assert torch.get_float32_matmul_precision() == "highest"
