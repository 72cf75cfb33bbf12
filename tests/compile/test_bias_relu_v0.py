"""v0 of bias + ReLU: the real inductor capture, sizes baked in, right at its shape and wrong at another.

Every launch at another shape runs inside guard buffers (lecture_code.compile.bias_relu_v0), so the tests can
count exactly what the kernel read and wrote past the end of ``x``, ``bias`` and ``out``: the counts follow
from the baked size, the launch grid and the mask inductor chose, and are asserted to the element.
"""

from __future__ import annotations

import gc
import glob
import linecache
import tempfile

import pytest
import torch

from kernels.reference import bias_relu
from lecture_code.compile.bias_relu_v0 import baked_constants, capture_bias_relu_v0

BLOCK = 1024  # the launch block of every run below
# 24 x 37 = 888 elements: odd on purpose (the literals 888 and 37 cannot be a coincidence of defaults), and
# not a multiple of inductor's largest block, so inductor keeps a mask: `xmask = xindex < 888`.
ROWS, COLS = 24, 37
# 32 x 128 = 4096 elements: a multiple of inductor's largest pointwise block (4096), so it drops the mask.
U_ROWS, U_COLS = 32, 128


@pytest.fixture(scope="module")
def v0():
    return capture_bias_relu_v0(ROWS, COLS)


@pytest.fixture(scope="module")
def v0_unmasked():
    return capture_bias_relu_v0(U_ROWS, U_COLS)


def _inputs(rows: int, cols: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(rows, cols, device=device), torch.randn(cols, device=device)


def test_captured_source_is_triton_with_the_baked_size(v0):
    assert "@triton.jit" in v0.source
    assert v0.kernel.language == "triton"
    assert v0.constants["xnumel"] == str(ROWS * COLS)
    assert v0.xnumel == ROWS * COLS
    assert f"xnumel = {ROWS * COLS}" in v0.source
    assert any(value.endswith(f"% {COLS}") for value in v0.constants.values()), v0.constants
    assert v0.period == COLS
    assert v0.mask_line == "xmask = xindex < xnumel"


def test_raw_kernel_keeps_nan_like_torch_relu(v0):
    """Inductor's ``triton_helpers.maximum`` lets NaN win; the interpreter's stand-in must too."""
    x, bias = _inputs(ROWS, COLS, v0.result.device)
    x[0, 0], x[3, 5], bias[7] = float("nan"), float("-inf"), float("nan")
    launch = v0.run(x, bias, block=BLOCK)
    expected = bias_relu(x, bias)
    assert expected.isnan().sum() == ROWS + 1  # a NaN bias poisons its column, plus x[0, 0]
    torch.testing.assert_close(launch.out, expected, rtol=0, atol=0, equal_nan=True)


def test_compiled_value_matches_reference(v0):
    assert v0.result.shape == (ROWS, COLS)
    torch.testing.assert_close(v0.result, v0.expected)


def test_raw_kernel_is_right_at_its_own_shape(v0):
    x, bias = _inputs(ROWS, COLS, v0.result.device)
    launch = v0.run(x, bias, block=BLOCK)
    torch.testing.assert_close(launch.out, bias_relu(x, bias), rtol=0, atol=0)
    assert (launch.wrong, launch.unwritten, launch.out_of_bounds) == (0, 0, False)
    assert "nothing read or written past the end" in launch.describe()


def test_masked_kernel_on_a_larger_x_leaves_the_tail_unwritten(v0):
    x, bias = _inputs(ROWS + 3, COLS + 1, v0.result.device)
    launch = v0.run(x, bias, block=BLOCK)
    n = x.numel()
    assert launch.unwritten == n - ROWS * COLS  # the mask stops at the baked count, not at x.numel()
    assert not launch.out[: ROWS * COLS // (COLS + 1)].isnan().any()
    assert not launch.out_of_bounds  # the baked count lies inside the larger x
    assert launch.wrong > launch.unwritten  # and the bias period is wrong in the written part too


def test_masked_kernel_on_a_smaller_x_reads_and_writes_past_the_end(v0):
    rows, cols = ROWS - 1, COLS - 1  # 23 x 36 = 828 elements, one program of 1024 lanes
    x, bias = _inputs(rows, cols, v0.result.device)
    launch = v0.run(x, bias, block=BLOCK)
    baked = ROWS * COLS
    assert launch.programs == 1
    assert launch.written_past_out == baked - x.numel()  # the mask allows 888 stores, out holds 828
    assert launch.read_past_x == baked - x.numel()
    # the bias index is xindex % 37 while bias has 36 elements: column 36 is past its end, once per 37
    assert launch.read_past_bias == sum(1 for i in range(baked) if i % COLS == cols)
    assert launch.unwritten == 0 and launch.out_of_bounds
    assert f"read x for {baked - x.numel()} outputs" in launch.describe()


def test_unmasked_kernel_overruns_by_the_rest_of_the_last_block(v0_unmasked):
    assert "tl.full" in v0_unmasked.mask_line and "True" in v0_unmasked.mask_line
    x, bias = _inputs(U_ROWS + 1, U_COLS + 1, v0_unmasked.result.device)  # 33 x 129 = 4257 elements
    launch = v0_unmasked.run(x, bias, block=BLOCK)
    launched = launch.programs * BLOCK  # 5 programs: 5120 lanes, every one stores
    assert launch.programs == 5
    assert launch.unwritten == 0  # no mask: every element of x is written (with the wrong bias period)
    assert launch.written_past_out == launched - x.numel() == 863
    assert launch.read_past_x == launched - x.numel()
    assert launch.read_past_bias == 0  # the period 128 stays inside the 129-long bias
    assert launch.wrong > 0


def test_guarded_run_refuses_other_dtypes(v0):
    x, bias = _inputs(ROWS, COLS, v0.result.device)
    with pytest.raises(TypeError, match="float32"):
        v0.run(x.double(), bias.double())


def test_baked_constants_parser():
    text = "    xnumel = 65536\n    x0 = (xindex % 4096)\n    x1 = xindex // 4096\n    y = xnumel\n"
    assert baked_constants(text) == {"xnumel": "65536", "x0": "xindex % 4096", "x1": "xindex // 4096"}


def test_the_kernel_source_leaves_nothing_behind():
    """The captured kernel is loaded from linecache, never from a file: nothing on disk (a notebook kernel
    that is killed runs no cleanup), and its linecache entry goes with the capture."""
    before = set(glob.glob(f"{tempfile.gettempdir()}/bias_relu_v0_*"))
    cached = set(linecache.cache)
    v0 = capture_bias_relu_v0(8, 16)
    v0.run(*_inputs(8, 16, v0.result.device))  # compiles (or interprets) the kernel from its source
    assert set(glob.glob(f"{tempfile.gettempdir()}/bias_relu_v0_*")) == before
    names = [name for name in set(linecache.cache) - cached if name.startswith("<bias_relu_v0 ")]
    assert len(names) == 1 and "".join(linecache.cache[names[0]][2]).endswith(v0.source)
    del v0
    gc.collect()
    assert not any(name in linecache.cache for name in names)
