"""DLRM, built from TorchRec's parts: ``DenseArch``, ``SparseArch``, an interaction, ``OverArch``, ``DLRM``.

Notation, fixed here once and used in every docstring of this package:

- ``B``: batch size (samples in a batch).
- ``N``: number of dense (continuous) features; 13 for Criteo, already ``log1p``-transformed.
- ``F``: number of sparse (categorical) features; 26 for Criteo, one id per feature per sample.
- ``D``: embedding dimension; the bottom MLP ends at ``D`` too, so the dense vector sits beside the
  ``F`` embeddings as one more ``D``-vector.
- ``V``: vocabulary size of one sparse feature (ids kept by preprocessing); its table has ``V + 1`` rows,
  row 0 reserved for missing, unseen and rare ids.

The data path of one batch::

    dense  [B, N] float32 ── DenseArch (bottom MLP) ──────────────► [B, D]     ─┐
    sparse [B, F] int64   ── SparseArch (hash → embedding lookup) ► [B, F, D]  ─┤
                                                                               ▼
                         DotInteraction  [B, D + (F+1)F/2]  (367 for F=26, D=16)
                      or OuterInteraction [B, (D + F·D)²]    (186,624: the contrast)
                                                                               ▼
                         OverArch (top MLP, no final activation) ──► logits [B]

Train on the logits with ``BCEWithLogitsLoss``; ``DLRM.predict_proba`` applies the sigmoid exactly once.
"""

from lecture_code.model.config import HASHING_KINDS, INTERACTION_KINDS, PRESETS, DLRMConfig
from lecture_code.model.dense_arch import DenseArch
from lecture_code.model.dlrm import BACKENDS, DLRM
from lecture_code.model.hashing import (
    BatchedModulusHash,
    BatchedVocabularyHash,
    IndexHash,
    ModulusHash,
    VocabularyHash,
    binary_search_lower_bound,
    make_hash,
)
from lecture_code.model.interaction_arch import (
    DotInteraction,
    OuterInteraction,
    interaction_output_dim,
    make_interaction,
)
from lecture_code.model.mlp import make_mlp
from lecture_code.model.over_arch import OverArch
from lecture_code.model.sparse_arch import SparseArch
from lecture_code.model.table_init import draw_table_seed, init_table_rows_

__all__ = [
    "BACKENDS",
    "DLRM",
    "BatchedModulusHash",
    "BatchedVocabularyHash",
    "HASHING_KINDS",
    "INTERACTION_KINDS",
    "PRESETS",
    "DLRMConfig",
    "DenseArch",
    "DotInteraction",
    "IndexHash",
    "ModulusHash",
    "OuterInteraction",
    "OverArch",
    "SparseArch",
    "VocabularyHash",
    "binary_search_lower_bound",
    "draw_table_seed",
    "init_table_rows_",
    "interaction_output_dim",
    "make_hash",
    "make_interaction",
    "make_mlp",
]
