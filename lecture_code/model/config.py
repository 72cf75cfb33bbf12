"""``DLRMConfig``: every size and choice of a DLRM in one frozen dataclass (nanoGPT's ``GPTConfig`` style).

Layer-size tuples follow TorchRec: they list each layer's *output* size; the input size is implied
(``num_dense`` for the bottom MLP, the interaction width for the top MLP).

Presets are named after what they mirror:

- ``kaggle``: DLRM's Criteo Kaggle benchmark (``dlrm_s_criteo_kaggle.sh``): bottom MLP 13-512-256-64-16,
  top MLP 512-256-1, ``D = 16``.
- ``small``: fast on a 2-core CPU: bottom 13-64-32-16, top 128-64-1, ``D = 16`` (so the interaction
  widths, 367 and 186,624, are the lecture's numbers).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

INTERACTION_KINDS = ("dot", "outer")
HASHING_KINDS = ("vocabulary", "index", "modulus")

PRESETS: dict[str, dict[str, Any]] = {
    "kaggle": {
        "embedding_dim": 16,
        "dense_arch_layer_sizes": (512, 256, 64, 16),
        "over_arch_layer_sizes": (512, 256, 1),
    },
    "terabyte": {  # MLPerf's reference DLRM on Criteo 1TB: bottom 13-512-256-128, top 1024-1024-512-256-1
        "embedding_dim": 128,
        "dense_arch_layer_sizes": (512, 256, 128),
        "over_arch_layer_sizes": (1024, 1024, 512, 256, 1),
    },
    "small": {
        "embedding_dim": 16,
        "dense_arch_layer_sizes": (64, 32, 16),
        "over_arch_layer_sizes": (128, 64, 1),
    },
}


@dataclass(frozen=True)
class DLRMConfig:
    """Sizes and choices of one DLRM. Validated on construction; hashable, so usable as a cache key.

    Attributes:
        num_embeddings_per_feature: rows of each of the ``F`` tables (``V + 1`` each: row 0 is reserved).
        embedding_dim: ``D``, width of every embedding and of the bottom MLP's output.
        dense_arch_layer_sizes: bottom MLP output sizes; the last must equal ``embedding_dim``.
        over_arch_layer_sizes: top MLP output sizes; the last must be 1 (one logit per sample).
        num_dense: ``N``, dense features per sample (13 for Criteo).
        interaction: ``"dot"`` (DLRM's pairwise dots) or ``"outer"`` (the full outer product, the contrast).
        hashing: how raw ids become rows: ``"vocabulary"`` (one searchsorted over all features'
            vocabularies, ``BatchedVocabularyHash``), ``"index"`` (the O(B·V) comparison matrix, per
            feature), ``"modulus"`` (``id mod`` rows, no vocabulary).
    """

    num_embeddings_per_feature: tuple[int, ...]
    embedding_dim: int = 16
    dense_arch_layer_sizes: tuple[int, ...] = (64, 32, 16)
    over_arch_layer_sizes: tuple[int, ...] = (128, 64, 1)
    num_dense: int = 13
    interaction: str = "dot"
    hashing: str = "vocabulary"

    def __post_init__(self) -> None:
        # Lists are accepted and frozen into tuples, so the config stays hashable.
        for name in ("num_embeddings_per_feature", "dense_arch_layer_sizes", "over_arch_layer_sizes"):
            object.__setattr__(self, name, tuple(int(v) for v in getattr(self, name)))

        if not self.num_embeddings_per_feature:
            raise ValueError("num_embeddings_per_feature is empty: a DLRM needs at least one sparse feature")
        bad = [(f, n) for f, n in enumerate(self.num_embeddings_per_feature) if n < 1]
        if bad:
            raise ValueError(
                f"every table needs at least 1 row (row 0 is reserved); got (feature, rows) {bad}"
            )
        if self.embedding_dim < 1:
            raise ValueError(f"embedding_dim must be >= 1, got {self.embedding_dim}")
        if self.num_dense < 1:
            raise ValueError(f"num_dense must be >= 1, got {self.num_dense}")
        for name in ("dense_arch_layer_sizes", "over_arch_layer_sizes"):
            sizes = getattr(self, name)
            if not sizes or min(sizes) < 1:
                raise ValueError(f"{name} must be a non-empty tuple of positive sizes, got {sizes}")
        if self.dense_arch_layer_sizes[-1] != self.embedding_dim:
            raise ValueError(
                f"the bottom MLP must end at embedding_dim so the dense vector can interact with the "
                f"embeddings: dense_arch_layer_sizes[-1] = {self.dense_arch_layer_sizes[-1]} "
                f"!= embedding_dim = {self.embedding_dim}"
            )
        if self.over_arch_layer_sizes[-1] != 1:
            raise ValueError(
                f"the top MLP must end in 1 (one logit per sample): "
                f"over_arch_layer_sizes[-1] = {self.over_arch_layer_sizes[-1]}"
            )
        if self.interaction not in INTERACTION_KINDS:
            raise ValueError(f"interaction must be one of {INTERACTION_KINDS}, got {self.interaction!r}")
        if self.hashing not in HASHING_KINDS:
            raise ValueError(f"hashing must be one of {HASHING_KINDS}, got {self.hashing!r}")

    @property
    def num_sparse(self) -> int:
        """``F``: number of sparse features (one table each)."""
        return len(self.num_embeddings_per_feature)

    @classmethod
    def preset(cls, name: str, num_embeddings_per_feature, **overrides: Any) -> DLRMConfig:
        """The named preset (``"kaggle"``, ``"terabyte"``, ``"small"``) for these tables, fields overridden.

        Example: ``DLRMConfig.preset("small", (1000,) * 26, interaction="outer")``.
        """
        if name not in PRESETS:
            raise ValueError(f"unknown preset {name!r}; choose one of {tuple(PRESETS)}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise TypeError(f"unknown DLRMConfig field(s) {unknown}; fields are {sorted(known)}")
        values = {**PRESETS[name], **overrides, "num_embeddings_per_feature": num_embeddings_per_feature}
        return cls(**values)
