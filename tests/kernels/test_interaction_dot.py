"""interaction_dot (Triton) against the float64 formula and lecture_code.model's DotInteraction: output,
d_dense, d_sparse; odd F and D, non-contiguous inputs, poisoned outputs."""

from __future__ import annotations

import pytest
import torch

from kernels import reference
from kernels.dlrm.interaction_dot import interaction_dot, interaction_dot_output_dim
from kernels.runtime import default_device
from lecture_code.model.interaction_arch import DotInteraction

# (dtype, atol, rtol) vs the float64 answer. fp32: sums of D products in a different order (a few ulps of
# the sum of |products|). fp16/bf16: inputs exact, fp32 products, one rounding of the result (≤ 1 ulp) plus
# the rounded gradient sums.
DTYPES = [
    pytest.param(torch.float32, 1e-5, 1e-5, id="fp32"),
    pytest.param(torch.float16, 1e-2, 2e-3, id="fp16"),
    pytest.param(torch.bfloat16, 6e-2, 1.6e-2, id="bf16", marks=pytest.mark.gpu),
]
SHAPES = [
    pytest.param(5, 4, 8, id="Fs4-D8"),
    pytest.param(7, 26, 16, id="kaggle-F27-D16"),
    pytest.param(3, 2, 5, id="odd-F3-D5"),  # F = 3, D = 5: both masked inside 16×16 tiles
    pytest.param(6, 16, 17, id="F17-D17"),  # one past a power of two: the next tile size
]


def _check(dense, sparse, atol, rtol):
    mine = [dense.detach().clone().requires_grad_(), sparse.detach().clone().requires_grad_()]
    exact = [dense.detach().double().requires_grad_(), sparse.detach().double().requires_grad_()]
    out = interaction_dot(*mine)
    want = reference.interaction_dot(*exact)
    assert out.shape == (dense.shape[0], interaction_dot_output_dim(sparse.shape[1], dense.shape[1]))
    assert out.dtype == dense.dtype
    torch.testing.assert_close(out.double(), want, atol=atol, rtol=rtol)
    grad = torch.randn_like(want)
    got = torch.autograd.grad(out, mine, grad.to(dense.dtype))
    expected = torch.autograd.grad(want, exact, grad)
    for name, g, w in zip(("d_dense", "d_sparse"), got, expected, strict=True):
        assert g.dtype == dense.dtype and g.shape == w.shape, name
        torch.testing.assert_close(g.double(), w, atol=atol, rtol=rtol, msg=lambda m, n=name: f"{n}: {m}")


@pytest.mark.parametrize("dtype, atol, rtol", DTYPES)
@pytest.mark.parametrize("batch, fs, dim", SHAPES)
def test_forward_backward_vs_float64(seed, poison_empty, dtype, atol, rtol, batch, fs, dim):
    device = default_device()
    dense = torch.randn(batch, dim, device=device).to(dtype)
    sparse = torch.randn(batch, fs, dim, device=device).to(dtype)
    _check(dense, sparse, atol, rtol)


def test_combined_tensor_views(seed, poison_empty):
    """A combined T [B, F, D], passed as T[:, 0] and T[:, 1:] (strided views, no copy), and a transposed
    (non-contiguous in D) sparse input."""
    device = default_device()
    t = torch.randn(6, 5, 7, device=device)
    _check(t[:, 0], t[:, 1:], 1e-5, 1e-5)
    sparse = torch.randn(6, 7, 4, device=device).transpose(1, 2)  # [B, Fs=4, D=7], stride(2) != 1
    _check(torch.randn(6, 7, device=device), sparse, 1e-5, 1e-5)


def test_matches_model_dot_interaction(seed, poison_empty):
    """Same order as the model's DotInteraction (the module the fused backend replaces), bit for bit up to
    the order of the D-term sums."""
    device = default_device()
    module = DotInteraction(26, 16).to(device)
    dense, sparse = torch.randn(9, 16, device=device), torch.randn(9, 26, 16, device=device)
    torch.testing.assert_close(interaction_dot(dense, sparse), module(dense, sparse), atol=1e-5, rtol=1e-5)
    assert module.output_dim == interaction_dot_output_dim(26, 16) == 367


def test_no_grad_path_and_bad_shapes():
    device = default_device()
    dense, sparse = torch.randn(3, 4, device=device), torch.randn(3, 2, 4, device=device)
    with torch.no_grad():
        assert not interaction_dot(dense.requires_grad_(), sparse).requires_grad
    with pytest.raises(ValueError, match="does not match"):
        interaction_dot(dense, torch.randn(3, 2, 5, device=device))
    with pytest.raises(TypeError, match="dtype"):
        interaction_dot(dense, sparse.double())


@pytest.mark.gpu
@pytest.mark.parametrize("dtype, atol, rtol", DTYPES)
def test_kaggle_batch_gpu(seed, dtype, atol, rtol):
    dense = torch.randn(2048, 16, device="cuda").to(dtype)
    sparse = torch.randn(2048, 26, 16, device="cuda").to(dtype)
    _check(dense, sparse, atol, rtol)
