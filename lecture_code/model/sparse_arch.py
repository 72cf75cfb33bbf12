"""``SparseArch``: raw categorical ids ``[B, F]`` → one embedding per feature ``[B, F, D]``.

Two steps per feature ``f``: hash the raw ids to rows (:mod:`lecture_code.model.hashing`), then gather
those rows from the feature's own table. One ``nn.Embedding`` per feature, as Criteo has exactly one id
per feature per sample: no bag, no pooling. (``nn.EmbeddingBag`` would compute the same thing with a
sum over bags of size 1, and becomes a ``Loop`` in the dynamo ONNX export; ``nn.Embedding`` exports as
a single ``Gather`` per table, a much cleaner graph in Netron.)

Initialisation as in DLRM: table ``f`` with ``n_f`` rows is ``Uniform(-sqrt(1/n_f), sqrt(1/n_f))``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

__all__ = ["SparseArch"]


class SparseArch(nn.Module):
    """One hash and one ``nn.Embedding(n_f, D)`` per sparse feature.

    Args:
        num_embeddings_per_feature: rows ``n_f`` of each of the ``F`` tables.
        embedding_dim: ``D``.
        hashes: ``F`` modules mapping raw ids ``[B]`` → rows ``[B]`` in ``[0, n_f)``
            (see :func:`lecture_code.model.hashing.make_hash`).
    """

    def __init__(
        self, num_embeddings_per_feature: Sequence[int], embedding_dim: int, hashes: Sequence[nn.Module]
    ):
        super().__init__()
        if len(hashes) != len(num_embeddings_per_feature):
            raise ValueError(
                f"need one hash per feature: {len(hashes)} hashes for "
                f"{len(num_embeddings_per_feature)} tables"
            )
        for f, (h, n) in enumerate(zip(hashes, num_embeddings_per_feature, strict=True)):
            rows = getattr(h, "num_embeddings", n)
            if rows != n:
                raise ValueError(
                    f"feature {f}: its hash produces rows for {rows} embeddings, its table has {n}"
                )
        self.hashes = nn.ModuleList(hashes)
        self.embeddings = nn.ModuleList(nn.Embedding(n, embedding_dim) for n in num_embeddings_per_feature)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """DLRM's table init: ``Uniform(-sqrt(1/n), sqrt(1/n))`` for a table of ``n`` rows."""
        for table in self.embeddings:
            bound = math.sqrt(1.0 / table.num_embeddings)
            nn.init.uniform_(table.weight, -bound, bound)

    def rows(self, sparse: torch.Tensor) -> torch.Tensor:
        """Hash only: raw ids int64 ``[B, F]`` → rows int64 ``[B, F]``; ``rows[b, f]`` indexes table ``f``."""
        columns = sparse.t().contiguous()  # [F, B]: each feature's ids contiguous, as searchsorted wants
        return torch.stack([h(columns[f]) for f, h in enumerate(self.hashes)], dim=1)

    def forward(self, sparse: torch.Tensor) -> torch.Tensor:
        """Raw ids int64 ``[B, F]`` → embeddings ``[B, F, D]``."""
        columns = sparse.t().contiguous()  # [F, B]: each feature's ids contiguous, as searchsorted wants
        tables = zip(self.hashes, self.embeddings, strict=True)
        return torch.stack([table(h(columns[f])) for f, (h, table) in enumerate(tables)], dim=1)
