"""``SparseArch``: raw categorical ids ``[B, F]`` → one embedding per feature ``[B, F, D]``.

Two steps: hash the raw ids to rows (:mod:`lecture_code.model.hashing`), then gather each feature's rows
from its own table. The hashing comes in two shapes:

- one hash module per feature (``IndexHash``, ``VocabularyHash``, ``ModulusHash``), each applied to its
  feature's column ``[B]``: ``F`` small lookups;
- one module for all features (``BatchedVocabularyHash``, ``BatchedModulusHash``), applied to the whole
  ``[B, F]`` batch: one search over all vocabularies, or one ``remainder`` with an ``[F]`` tensor of table
  sizes, at once. ``DLRM`` uses them for ``hashing="vocabulary"`` and ``hashing="modulus"``.

One ``nn.Embedding`` per feature, as Criteo has exactly one id per feature per sample: no bag, no pooling.
(``nn.EmbeddingBag`` would compute the same thing with a sum over bags of size 1, and becomes a ``Loop``
in the dynamo ONNX export; ``nn.Embedding`` exports as a single ``Gather`` per table, a much cleaner
graph in Netron.)

Initialisation as in DLRM: table ``f`` with ``n_f`` rows is ``Uniform(-sqrt(1/n_f), sqrt(1/n_f))``, drawn
from one seed per sparse arch in blocks of rows (:mod:`lecture_code.model.table_init`), so that the fused
backend and the sharded tables (each rank only its rows) make the same tables from the same seed.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from lecture_code.model.table_init import draw_table_seed, init_table_rows_

__all__ = ["SparseArch", "checked_hashes", "hash_rows"]


def checked_hashes(hashes: Sequence[nn.Module] | nn.Module, tables: tuple[int, ...]) -> nn.Module:
    """``hashes`` as stored by a sparse arch (a batched module, or an ``nn.ModuleList`` of ``F``), checked
    to produce rows for exactly these tables (``n_f`` rows each)."""
    if isinstance(hashes, nn.Module) and not isinstance(hashes, nn.ModuleList):
        rows = tuple(getattr(hashes, "num_embeddings_per_feature", ()))
        if rows != tables:
            raise ValueError(
                f"a batched hash must produce rows for every table: it has "
                f"num_embeddings_per_feature={rows}, the tables have {tables}"
            )
        return hashes
    if len(hashes) != len(tables):
        raise ValueError(f"need one hash per feature: {len(hashes)} hashes for {len(tables)} tables")
    for f, (h, n) in enumerate(zip(hashes, tables, strict=True)):
        rows = getattr(h, "num_embeddings", n)
        if rows != n:
            raise ValueError(f"feature {f}: its hash produces rows for {rows} embeddings, its table has {n}")
    return nn.ModuleList(hashes)


def hash_rows(hashes: nn.Module, sparse: torch.Tensor) -> torch.Tensor:
    """Raw ids int64 ``[B, F]`` → rows int64 ``[B, F]`` through :func:`checked_hashes`' result."""
    if not isinstance(hashes, nn.ModuleList):
        return hashes(sparse)  # one lookup for all features
    columns = sparse.t().contiguous()  # [F, B]: each feature's ids contiguous, as searchsorted wants
    return torch.stack([h(columns[f]) for f, h in enumerate(hashes)], dim=1)


def _default_device() -> torch.device:
    """Where a tensor made now without a device goes (honours ``with torch.device(...)``)."""
    return torch.empty(0).device


class SparseArch(nn.Module):
    """The hashing and one ``nn.Embedding(n_f, D)`` per sparse feature.

    Args:
        num_embeddings_per_feature: rows ``n_f`` of each of the ``F`` tables.
        embedding_dim: ``D``.
        hashes: either ``F`` modules mapping one feature's raw ids ``[B]`` → rows ``[B]`` in ``[0, n_f)``
            (see :func:`lecture_code.model.hashing.make_hash`), or one module mapping all raw ids
            ``[B, F]`` → rows ``[B, F]`` that has a ``num_embeddings_per_feature`` attribute
            (:class:`~lecture_code.model.hashing.BatchedVocabularyHash`,
            :class:`~lecture_code.model.hashing.BatchedModulusHash`). Stored as ``self.hashes``: an
            ``nn.ModuleList`` in the first case, the module itself in the second.
        device: where the tables are allocated (``"meta"``: nowhere, shapes only).
        table_seed: the seed of the tables' init (default: :func:`~.table_init.draw_table_seed`, one draw
            from torch's global generator).
    """

    def __init__(
        self,
        num_embeddings_per_feature: Sequence[int],
        embedding_dim: int,
        hashes: Sequence[nn.Module] | nn.Module,
        device=None,
        table_seed: int | None = None,
    ):
        super().__init__()
        tables = tuple(int(n) for n in num_embeddings_per_feature)
        self.hashes = checked_hashes(hashes, tables)
        # skip_init: no N(0, 1) draws at construction; reset_parameters draws every value from table_seed
        self.embeddings = nn.ModuleList(
            nn.utils.skip_init(nn.Embedding, n, embedding_dim, device=device or _default_device())
            for n in tables
        )
        self.table_seed = draw_table_seed() if table_seed is None else int(table_seed)
        self.reset_parameters()

    @property
    def batched_hash(self) -> bool:
        """Whether one module hashes all ``F`` features at once (else one module per feature)."""
        return not isinstance(self.hashes, nn.ModuleList)

    def reset_parameters(self) -> None:
        """DLRM's table init, ``Uniform(-sqrt(1/n), sqrt(1/n))`` for a table of ``n`` rows, from the seed."""
        for f, table in enumerate(self.embeddings):
            init_table_rows_(table.weight.data, self.table_seed, f, 0, table.num_embeddings)

    def rows(self, sparse: torch.Tensor) -> torch.Tensor:
        """Hash only: raw ids int64 ``[B, F]`` → rows int64 ``[B, F]``; ``rows[b, f]`` indexes table ``f``."""
        return hash_rows(self.hashes, sparse)

    def forward(self, sparse: torch.Tensor) -> torch.Tensor:
        """Raw ids int64 ``[B, F]`` → embeddings ``[B, F, D]``."""
        if self.batched_hash:
            rows = self.hashes(sparse)  # [B, F]
            return torch.stack([table(rows[:, f]) for f, table in enumerate(self.embeddings)], dim=1)
        columns = sparse.t().contiguous()  # [F, B]: each feature's ids contiguous, as searchsorted wants
        tables = zip(self.hashes, self.embeddings, strict=True)
        return torch.stack([table(h(columns[f])) for f, (h, table) in enumerate(tables)], dim=1)
