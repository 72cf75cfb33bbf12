"""DotInteraction against DLRM's formula in Python loops; OuterInteraction against einsum; output widths."""

from __future__ import annotations

import pytest
import torch

from lecture_code.model import DotInteraction, OuterInteraction, interaction_output_dim, make_interaction

# fp32: bmm sums D products in its own order, the Python loop in another.
DOT_ATOL, DOT_RTOL = 1e-5, 1e-5

SHAPES = [(4, 26, 16), (3, 3, 5), (1, 1, 2)]  # (B, F, D): the lecture's, odd sizes, the smallest


def test_output_dims_match_lecture_numbers():
    assert interaction_output_dim("dot", 26, 16) == 16 + 27 * 26 // 2 == 367
    assert interaction_output_dim("outer", 26, 16) == 432**2 == 186_624
    assert 186_624 * 4 / 1024 == 729  # KiB per sample in fp32, as the docstring says
    assert round(186_624 * 512 / 1e6, 1) == 95.6 and 186_624 * 512 * 4 / 2**20 == 364.5
    with pytest.raises(ValueError, match="unknown interaction"):
        interaction_output_dim("cross", 26, 16)


@pytest.mark.parametrize(("batch", "num_sparse", "dim"), SHAPES)
def test_dot_interaction_matches_loops(seed, batch, num_sparse, dim):
    dense, sparse = torch.randn(batch, dim), torch.randn(batch, num_sparse, dim)
    module = make_interaction("dot", num_sparse, dim)
    assert isinstance(module, DotInteraction)
    out = module(dense, sparse)
    assert out.shape == (batch, module.output_dim) == (batch, dim + (num_sparse + 1) * num_sparse // 2)

    vectors = [dense] + [sparse[:, f] for f in range(num_sparse)]  # index 0 is the dense vector
    pairs = [(vectors[i] * vectors[j]).sum(-1) for i in range(num_sparse + 1) for j in range(i)]  # i > j
    expected = torch.cat([dense, torch.stack(pairs, dim=1)], dim=1)
    torch.testing.assert_close(out, expected, atol=DOT_ATOL, rtol=DOT_RTOL)


@pytest.mark.parametrize(("batch", "num_sparse", "dim"), SHAPES)
def test_outer_interaction_matches_einsum(seed, batch, num_sparse, dim):
    dense, sparse = torch.randn(batch, dim), torch.randn(batch, num_sparse, dim)
    module = make_interaction("outer", num_sparse, dim)
    assert isinstance(module, OuterInteraction)
    out = module(dense, sparse)
    width = dim + num_sparse * dim
    assert out.shape == (batch, module.output_dim) == (batch, width**2)

    v = torch.cat([dense, sparse.reshape(batch, -1)], dim=1)
    expected = torch.einsum("bi,bj->bij", v, v).reshape(batch, -1)
    # Each element is one fp32 product, rounded once either way: exactly equal.
    torch.testing.assert_close(out, expected, atol=0, rtol=0)


def test_interactions_take_non_contiguous_inputs(seed):
    dense = torch.randn(6, 10)[:, ::2]  # [6, 5], stride 2
    sparse = torch.randn(6, 5, 4).transpose(1, 2)  # [6, 4, 5]: F=4, D=5, transposed
    assert not dense.is_contiguous() and not sparse.is_contiguous()
    for kind in ("dot", "outer"):
        module = make_interaction(kind, 4, 5)
        torch.testing.assert_close(module(dense, sparse), module(dense.contiguous(), sparse.contiguous()))
