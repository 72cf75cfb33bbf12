"""``DLRM``: the four archs composed, ``(dense [B, N], sparse [B, F]) → logits [B]``.

    dense  [B, N] ─ DenseArch ─► x [B, D] ─────────┐
    sparse [B, F] ─ SparseArch ─► e [B, F, D] ─────┴─ interaction ─► [B, I] ─ OverArch ─► logits [B]

Train with ``nn.BCEWithLogitsLoss()(model(dense, sparse), label)``: the loss applies the sigmoid inside,
in a numerically stable form. ``predict_proba`` applies it exactly once for inference. (The lecture this
repo descends from applied a sigmoid in the model *and* another one after it; probabilities squashed into
(0.5, 0.73) train and rank badly. Here the model returns logits and nothing else.)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from lecture_code.model.config import DLRMConfig
from lecture_code.model.dense_arch import DenseArch
from lecture_code.model.hashing import BatchedVocabularyHash, make_hash
from lecture_code.model.interaction_arch import make_interaction
from lecture_code.model.over_arch import OverArch
from lecture_code.model.sparse_arch import SparseArch

__all__ = ["DLRM"]


class DLRM(nn.Module):
    """DLRM with TorchRec's parts: ``dense_arch``, ``sparse_arch``, ``inter_arch``, ``over_arch``.

    Args:
        config: sizes and choices (:class:`DLRMConfig`).
        vocabularies: one sorted int array of kept ids per sparse feature; needed for
            ``config.hashing`` ``"vocabulary"`` and ``"index"``, unused (may be ``None``) for ``"modulus"``.
    """

    def __init__(self, config: DLRMConfig, vocabularies: Sequence[Any] | None = None):
        super().__init__()
        self.config = config
        f, d = config.num_sparse, config.embedding_dim
        if config.hashing == "modulus":
            vocabularies = [None] * f
        elif vocabularies is None or len(vocabularies) == 0:
            raise ValueError(
                f"hashing={config.hashing!r} needs vocabularies (one per sparse feature); load them with the "
                f"metadata, or use hashing='modulus', which needs only the table sizes"
            )
        elif len(vocabularies) != f:
            raise ValueError(f"got {len(vocabularies)} vocabularies for {f} sparse features")
        if config.hashing == "vocabulary":  # one search over all F vocabularies (BatchedVocabularyHash)
            hashes = BatchedVocabularyHash(vocabularies, config.num_embeddings_per_feature)
        else:  # one hash per feature: the naive IndexHash is the lesson, ModulusHash needs no vocabulary
            hashes = [
                make_hash(config.hashing, vocab, n)
                for vocab, n in zip(vocabularies, config.num_embeddings_per_feature, strict=True)
            ]
        self.dense_arch = DenseArch(config.num_dense, config.dense_arch_layer_sizes)
        self.sparse_arch = SparseArch(config.num_embeddings_per_feature, d, hashes)
        self.inter_arch = make_interaction(config.interaction, f, d)
        self.over_arch = OverArch(self.inter_arch.output_dim, config.over_arch_layer_sizes)

    def forward(self, dense: torch.Tensor, sparse: torch.Tensor) -> torch.Tensor:
        """dense float ``[B, N]``, raw sparse ids int64 ``[B, F]`` → logits ``[B]`` (no sigmoid)."""
        x = self.dense_arch(dense)  # [B, D]
        e = self.sparse_arch(sparse)  # [B, F, D]
        return self.over_arch(self.inter_arch(x, e))  # [B, I] → [B]

    @torch.no_grad()
    def predict_proba(self, dense: torch.Tensor, sparse: torch.Tensor) -> torch.Tensor:
        """Click probabilities ``[B]`` in (0, 1): ``sigmoid(logits)``, applied exactly once."""
        return torch.sigmoid(self(dense, sparse))

    @classmethod
    def from_metadata(
        cls,
        metadata: Any,
        preset: str = "small",
        interaction: str = "dot",
        hashing: str = "vocabulary",
        **overrides: Any,
    ) -> DLRM:
        """Build a DLRM for preprocessed data, reading only its metadata (duck-typed).

        ``metadata`` needs ``num_embeddings_per_feature: tuple[int, ...]`` and, unless ``hashing`` is
        ``"modulus"``, ``vocabularies: list[np.ndarray]`` (sorted kept ids, ``len + 1`` rows per table).
        ``overrides`` replace preset fields, e.g. ``embedding_dim=32, dense_arch_layer_sizes=(64, 32)``.
        """
        config = DLRMConfig.preset(
            preset,
            tuple(metadata.num_embeddings_per_feature),
            interaction=interaction,
            hashing=hashing,
            **overrides,
        )
        vocabularies = None if hashing == "modulus" else list(metadata.vocabularies)
        return cls(config, vocabularies)
