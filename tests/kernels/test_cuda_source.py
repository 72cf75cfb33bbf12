"""Showing the real CUDA source in a notebook: definitions and comment blocks cut out of the files."""

from __future__ import annotations

import pytest

import kernels.cuda as kernels_cuda

CUH = kernels_cuda.CUDA_DIR / "pointwise.cuh"


def test_definition_is_the_exact_text_from_its_comment_to_its_closing_brace():
    text = kernels_cuda.definition("launch_bias_relu")
    assert text in CUH.read_text()  # a slice of the file, not a copy that could drift
    lines = text.splitlines()
    assert lines[0] == "template <typename T>" and lines[-1] == "}"
    assert "bias_relu_kernel<T, kVec><<<blocks, kThreads, 0, stream>>>" in text
    assert "launch_add_mul_relu" not in text  # stops at its own closing brace


def test_definition_of_a_kernel_keeps_the_comment_and_attributes_above_it():
    text = kernels_cuda.definition("bias_relu_kernel")
    assert text.startswith("// out = relu(x + bias).")
    assert "__global__ void __launch_bounds__(kThreads, kBlocksPerSm)" in text
    assert text.count("{") == text.count("}") and text.endswith("}")
    assert kernels_cuda.definition("relu").endswith("// NaN stays NaN")  # a one-line function
    assert "bias_relu" not in kernels_cuda.definition("relu")  # `relu(` is matched as a whole word


def test_comment_block_runs_to_the_last_comment_line():
    block = kernels_cuda.comment_block("Mistakes of the original")
    lines = block.splitlines()
    assert all(line.startswith("//") for line in lines)
    assert "threadsPerBlock(sizes[1])" in block and "cudaDeviceSynchronize();" in block
    assert CUH.read_text().split(block, 1)[1].startswith("\n#pragma once")


def test_unknown_names_are_errors():
    with pytest.raises(ValueError, match="no definition of 'nope'"):
        kernels_cuda.definition("nope")
    with pytest.raises(ValueError, match="no comment starting"):
        kernels_cuda.comment_block("Nothing like this")
