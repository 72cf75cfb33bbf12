"""``autotune_tables``: the lines inductor's max-autotune writes to stderr, read into short lines; the
candidates it drops, counted."""

from __future__ import annotations

import contextlib
import logging
import sys

import pytest
import torch

from lecture_code.compile import autotune_log, autotune_tables, capture_autotuned
from lecture_code.compile.autotune_log import dropped_candidates
from lecture_code.internals import AUTOTUNE_LOGGER, autotune_errors_collected, inductor_mode_options

# The format of ``AlgorithmSelectorCache.log_results`` (torch/_inductor/select_algorithm.py), two GEMMs.
LOG = """\
AUTOTUNE addmm(2048x512, 2048x13, 13x512)
strides: [0, 1], [13, 1], [1, 13]
dtypes: torch.float32, torch.float32, torch.float32
  triton_mm_4 0.0061 ms 100.0% ACC_TYPE='tl.float32', ALLOW_TF32=False, BLOCK_K=16, BLOCK_M=64, BLOCK_N=128, \
EVEN_K=False, GROUP_M=8, num_stages=3, num_warps=4
  addmm 0.0070 ms 87.1%
  triton_mm_2 0.0081 ms 75.3% ACC_TYPE='tl.float32', ALLOW_TF32=False, BLOCK_K=16, BLOCK_M=32, BLOCK_N=64, \
EVEN_K=False, GROUP_M=8, num_stages=5, num_warps=8
  triton_mm_9 0.0102 ms 59.8% ACC_TYPE='tl.float32', ALLOW_TF32=False, BLOCK_K=32, BLOCK_M=128, BLOCK_N=128, \
EVEN_K=False, GROUP_M=8, num_stages=2, num_warps=8
SingleProcess AUTOTUNE benchmarking takes 0.3127 seconds and 0.9000 seconds precompiling for 19 choices
AUTOTUNE mm(2048x256, 2048x512, 512x256)
strides: [512, 1], [1, 512]
dtypes: torch.float32, torch.float32
  mm 0.0112 ms 100.0%
  triton_mm_17 0.0150 ms 74.7% ACC_TYPE='tl.float32', ALLOW_TF32=False, BLOCK_K=32, BLOCK_M=64, BLOCK_N=64, \
EVEN_K=True, GROUP_M=8, num_stages=4, num_warps=4
SingleProcess AUTOTUNE benchmarking takes 0.2 seconds and 0.5 seconds precompiling for 19 choices
"""


def test_one_header_per_gemm_then_its_fastest_candidates():
    lines = autotune_tables(LOG, top=2)
    assert lines[0] == "addmm(2048x512, 2048x13, 13x512)"
    assert lines[1].split()[:3] == ["triton_mm_4", "0.0061", "ms"]
    assert "tile 64x128x16 (BLOCK_M x BLOCK_N x BLOCK_K), 4 warps, 3 stages" in lines[1]
    assert lines[2].split() == ["addmm", "0.0070", "ms", "87.1%"]  # the library call: no tile
    assert lines[3] == "mm(2048x256, 2048x512, 512x256)"
    assert lines[4].split() == ["mm", "0.0112", "ms", "100.0%"]
    assert "tile 64x64x32" in lines[5]
    assert len(lines) == 6  # top=2 dropped triton_mm_2 and triton_mm_9; strides/dtypes/timing lines skipped


def test_top_limits_each_table_and_no_log_gives_nothing():
    assert len(autotune_tables(LOG, top=1)) == 4
    assert len(autotune_tables(LOG, top=10)) == 2 + 4 + 2
    assert autotune_tables("") == []
    assert autotune_tables("some other stderr line\n  indented 1.0 ms 5.0%") == []


def test_the_modes_settings():
    tuned, graphs = inductor_mode_options("max-autotune-no-cudagraphs"), inductor_mode_options("max-autotune")
    assert tuned.get("max_autotune") is True and graphs.get("max_autotune") is True
    assert not tuned.get("triton.cudagraphs") and graphs.get("triton.cudagraphs") is True


def test_capture_autotuned_compiles_in_a_cache_of_its_own(monkeypatch):
    """A compile found in inductor's cache is not autotuned again and prints no table (seen on an H200 on
    the second run): capture_autotuned compiles inside internals.fresh_inductor_cache, never outside it.
    (No compile here, on a 2-core CI machine two would cost ~15 s; the GPU test below compiles twice.)"""
    inside, seen = [], []

    @contextlib.contextmanager
    def fresh():
        inside.append(True)
        yield
        inside.pop()

    def capture(fn, *inputs, mode):
        seen.append((bool(inside), mode))
        print("AUTOTUNE mm(16x13, 13x32)\n  mm 0.0100 ms 100.0%", file=sys.stderr)
        return "code"

    monkeypatch.setattr(autotune_log, "fresh_inductor_cache", fresh)
    monkeypatch.setattr(autotune_log, "capture_compiled_code", capture)
    code, tables = autotune_log.capture_autotuned(lambda t: t, torch.ones(2), mode="max-autotune")
    assert code == "code" and seen == [(True, "max-autotune")] and not inside
    assert tables[0] == "mm(16x13, 13x32)"  # what the compile wrote to stderr, read back


SHARED_ERROR = (
    "Runtime error during autotuning: \nNo valid triton configs. OutOfMemoryError: out of resource: "
    "triton_mm Required: {} Hardware limit:232448 Reducing block sizes or `num_stages` may help.. \n"
    "Ignoring this choice."
)


def test_dropped_candidates_says_how_many_and_why():
    errors = [SHARED_ERROR.format(n) for n in (262144, 393216, 294912)] + ["\nsome other failure\nmore"]
    assert dropped_candidates(errors) == [
        "3 candidate(s) dropped: their tiles need 256–384 KiB of shared memory, the GPU allows 227 KiB per "
        "program",
        "1 candidate(s) dropped for other errors, the first: some other failure",
    ]
    assert dropped_candidates([]) == []


def test_autotune_errors_are_collected_not_printed(capfd):
    logger = logging.getLogger(AUTOTUNE_LOGGER)
    with autotune_errors_collected() as errors:
        logger.error(SHARED_ERROR.format(262144))
        logger.debug("not an error")
    assert errors == [SHARED_ERROR.format(262144)]
    assert "OutOfMemoryError" not in capfd.readouterr().err
    assert not logger.filters  # the filter is gone after the block


@pytest.mark.gpu
def test_capture_autotuned_on_a_gpu_returns_the_tables(mlp):
    model, x = mlp
    _, first = capture_autotuned(model, x)
    # the same GEMMs again: benchmarked again, not read from the cache the first call filled
    code, tables = capture_autotuned(model, x)
    with torch.no_grad():
        torch.testing.assert_close(code.result, model(x), atol=1e-3, rtol=1e-3)  # another GEMM's sum order
    headers = [line for line in tables if not line.startswith(" ") and " dropped" not in line]
    assert 1 <= len(headers) <= 2  # two Linear layers: at most one autotuned GEMM each
    # the second call shows them too, in either order (an H200 printed the two GEMMs' tables in both)
    assert sorted(headers) == sorted(
        line for line in first if not line.startswith(" ") and " dropped" not in line
    )
    assert all(len(line.split()) >= 4 for line in tables if line.startswith(" "))  # name, time, ms, share
    assert all(h.startswith(("addmm(", "mm(")) for h in headers)
    assert any(k.kind == "template" for k in code.kernels) or code.extern_calls  # each GEMM went somewhere
