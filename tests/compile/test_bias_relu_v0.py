"""v0 of bias + ReLU: the real inductor capture, sizes baked in, right at its shape and wrong at another."""

from __future__ import annotations

import pytest
import torch

from kernels.reference import bias_relu
from lecture_code.bias_relu_v0 import baked_constants, capture_bias_relu_v0

ROWS, COLS = 24, 37  # odd on purpose: the literals 888 and 37 cannot be a coincidence of defaults


@pytest.fixture(scope="module")
def v0():
    return capture_bias_relu_v0(ROWS, COLS)


def test_captured_source_is_triton_with_the_baked_size(v0):
    assert "@triton.jit" in v0.source
    assert v0.kernel.language == "triton"
    assert v0.constants["xnumel"] == str(ROWS * COLS)
    assert v0.xnumel == ROWS * COLS
    assert f"xnumel = {ROWS * COLS}" in v0.source
    assert any(value.endswith(f"% {COLS}") for value in v0.constants.values()), v0.constants


def test_compiled_value_matches_reference(v0):
    assert v0.result.shape == (ROWS, COLS)
    torch.testing.assert_close(v0.result, v0.expected)


def test_raw_kernel_right_at_its_shape_wrong_at_another(v0):
    torch.manual_seed(1234)
    x, bias = torch.randn(ROWS, COLS).to(v0.result.device), torch.randn(COLS).to(v0.result.device)
    torch.testing.assert_close(v0.run(x, bias), bias_relu(x, bias))
    x2 = torch.randn(ROWS + 3, COLS + 1).to(x.device)
    bias2 = torch.randn(COLS + 1).to(x.device)
    out = v0.run(x2, bias2)
    assert out.isnan().sum().item() == x2.numel() - ROWS * COLS  # past the baked xnumel: never written
    assert not torch.allclose(out.nan_to_num(0.0), bias_relu(x2, bias2))  # and the bias period is wrong
    with pytest.raises(ValueError, match="hard-codes xnumel"):
        v0.run(x2[:2], bias2)


def test_baked_constants_parser():
    text = "    xnumel = 65536\n    x0 = (xindex % 4096)\n    x1 = xindex // 4096\n    y = xnumel\n"
    assert baked_constants(text) == {"xnumel": "65536", "x0": "xindex % 4096", "x1": "xindex // 4096"}
