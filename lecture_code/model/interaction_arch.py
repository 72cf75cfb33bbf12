"""Feature interactions: how the dense vector and the ``F`` embeddings meet before the top MLP.

Two variants, chosen by ``DLRMConfig.interaction``:

``"dot"`` — DLRM's (and TorchRec's ``InteractionArch``)
    Stack the dense vector with the embeddings, ``T = [x; e_1; …; e_F]`` of shape ``[B, F+1, D]``, take all
    pairwise dot products ``Z = T Tᵀ`` (one ``bmm``, ``[B, F+1, F+1]``), keep the strictly lower triangle
    ``Z[i, j], i > j`` (``(F+1)F/2`` distinct pairs, no self-products), and concatenate with ``x``:
    ``[B, D + (F+1)F/2]`` — 16 + 351 = **367** for F = 26, D = 16. Cost per sample: ``(F+1)²·D`` MACs.

``"outer"`` — the lecture's original, kept as the contrast it is
    Concatenate ``v = [x, e_1, …, e_F]`` (``K = D + F·D`` = 432) and take the full outer product
    ``v vᵀ``, flattened: ``[B, K²]`` = **186,624** features per sample. Every pair appears twice
    (``v_i v_j = v_j v_i``), products inside one embedding are kept, and the width explodes: 186,624 floats
    = 729 KiB per sample in fp32 (1.4 GiB for a batch of 2048), and a first top-MLP layer of 512 becomes
    186,624 × 512 ≈ 95.6M weights = 364.5 MiB — about 500× the FLOPs of that layer after ``"dot"``.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["DotInteraction", "OuterInteraction", "interaction_output_dim", "make_interaction"]


def interaction_output_dim(kind: str, num_sparse_features: int, embedding_dim: int) -> int:
    """Width of the interaction output for ``F = num_sparse_features``, ``D = embedding_dim``.

    ``"dot"``: ``D + (F+1)F/2`` (367 for F=26, D=16); ``"outer"``: ``(D + F·D)²`` (186,624).
    """
    f, d = num_sparse_features, embedding_dim
    if kind == "dot":
        return d + (f + 1) * f // 2
    if kind == "outer":
        return (d + f * d) ** 2
    raise ValueError(f"unknown interaction {kind!r}; choose 'dot' or 'outer'")


class DotInteraction(nn.Module):
    """DLRM's pairwise dot interaction: ``[B, D]`` and ``[B, F, D]`` → ``[B, D + (F+1)F/2]``.

    The lower-triangle selection is a fixed index buffer into the flattened ``[B, (F+1)²]`` products
    (row-major over ``i``, then ``j < i``, the order of DLRM's ``li, lj``), so the forward is three
    simple ops — ``bmm``, ``index_select``, ``cat`` — with no data-dependent control flow.
    """

    def __init__(self, num_sparse_features: int, embedding_dim: int):
        super().__init__()
        n = num_sparse_features + 1
        i, j = torch.tril_indices(n, n, offset=-1)  # strictly lower: i > j
        self.register_buffer("tril_flat_index", i * n + j, persistent=False)
        self.output_dim = interaction_output_dim("dot", num_sparse_features, embedding_dim)

    def forward(self, dense: torch.Tensor, sparse: torch.Tensor) -> torch.Tensor:
        """dense ``[B, D]``, sparse ``[B, F, D]`` → ``[B, D + (F+1)F/2]``."""
        stacked = torch.cat([dense.unsqueeze(1), sparse], dim=1)  # [B, F+1, D]
        products = torch.bmm(stacked, stacked.transpose(1, 2))  # [B, F+1, F+1]
        pairs = products.flatten(1).index_select(1, self.tril_flat_index)  # [B, (F+1)F/2]
        return torch.cat([dense, pairs], dim=1)


class OuterInteraction(nn.Module):
    """The lecture's full outer product: ``[B, D]`` and ``[B, F, D]`` → ``[B, (D + F·D)²]``.

    Cost, for F = 26 and D = 16: 186,624 floats = 729 KiB per sample in fp32, and the first top-MLP layer
    of width 512 needs 186,624 × 512 ≈ 95.6M weights = 364.5 MiB. Kept to be measured against
    :class:`DotInteraction`, not to be used.
    """

    def __init__(self, num_sparse_features: int, embedding_dim: int):
        super().__init__()
        self.output_dim = interaction_output_dim("outer", num_sparse_features, embedding_dim)

    def forward(self, dense: torch.Tensor, sparse: torch.Tensor) -> torch.Tensor:
        """dense ``[B, D]``, sparse ``[B, F, D]`` → ``[B, (D + F·D)²]``."""
        v = torch.cat([dense, sparse.flatten(1)], dim=1)  # [B, K], K = D + F·D
        return torch.bmm(v.unsqueeze(2), v.unsqueeze(1)).flatten(1)  # [B, K, K] → [B, K²]


def make_interaction(kind: str, num_sparse_features: int, embedding_dim: int) -> nn.Module:
    """The interaction module named ``kind`` (``"dot"`` or ``"outer"``)."""
    if kind == "dot":
        return DotInteraction(num_sparse_features, embedding_dim)
    if kind == "outer":
        return OuterInteraction(num_sparse_features, embedding_dim)
    raise ValueError(f"unknown interaction {kind!r}; choose 'dot' or 'outer'")
