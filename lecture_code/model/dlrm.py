"""``DLRM``: the four archs composed, ``(dense [B, N], sparse [B, F]) → logits [B]``.

    dense  [B, N] ─ DenseArch ─► x [B, D] ─────────┐
    sparse [B, F] ─ SparseArch ─► e [B, F, D] ─────┴─ interaction ─► [B, I] ─ OverArch ─► logits [B]

Train with ``nn.BCEWithLogitsLoss()(model(dense, sparse), label)``: the loss applies the sigmoid inside,
in a numerically stable form. ``predict_proba`` applies it exactly once for inference. (The lecture this
repo descends from ends its model in a sigmoid and trains on it with ``BCELoss``; its accuracy count applies
a second sigmoid, so every prediction exceeds 0.5 there. Here the model returns logits and nothing else.)

Backends: one model, three ways to run it (``DLRM(config, vocabularies, backend=...)``), numerically the same
model with the same ``state_dict`` keys, so a checkpoint of one loads into another:

- ``"eager"``: the modules as written, op by op.
- ``"compile"``: the same modules, the forward through ``torch.compile`` (backward by AOTAutograd).
- ``"fused"``: the sparse arch becomes one table-batched embedding whose backward applies the embedding
  optimizer (``embedding_optimizer``: ``"sgd"`` or ``"rowwise_adagrad"``, ``embedding_lr``) to the touched
  rows, and the dot interaction one kernel (:mod:`lecture_code.model.fused`). The tables then are buffers:
  train ``model.dense_parameters()`` with a torch optimizer, and nothing else.

Every backend answers ``dense_parameters()`` (the MLPs) and ``embedding_parameters()`` (the ``F`` tables
as parameters: empty for ``"fused"``, whose tables train themselves), so the training loop treats all three
alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from lecture_code.model.config import DLRMConfig
from lecture_code.model.dense_arch import DenseArch
from lecture_code.model.hashing import BatchedModulusHash, BatchedVocabularyHash, make_hash
from lecture_code.model.interaction_arch import make_interaction
from lecture_code.model.over_arch import OverArch
from lecture_code.model.sparse_arch import SparseArch

__all__ = ["BACKENDS", "DLRM"]

BACKENDS = ("eager", "compile", "fused")


class DLRM(nn.Module):
    """DLRM with TorchRec's parts: ``dense_arch``, ``sparse_arch``, ``inter_arch``, ``over_arch``.

    Args:
        config: sizes and choices (:class:`DLRMConfig`).
        vocabularies: one sorted int array of kept ids per sparse feature; needed for
            ``config.hashing`` ``"vocabulary"`` and ``"index"``, unused (may be ``None``) for ``"modulus"``.
        backend: ``"eager"``, ``"compile"`` or ``"fused"`` (module docstring).
        embedding_optimizer, embedding_lr, embedding_eps: the optimizer the ``"fused"`` backend applies to
            the tables inside backward (``"sgd"`` or ``"rowwise_adagrad"``); ignored by the other backends,
            whose tables are parameters of the training loop's optimizer.
        table_device: where the tables are allocated (default: the CPU, like the MLPs). ``"meta"``: nowhere,
            for a build that makes only its shards of them (:mod:`lecture_code.training.sharded_training`).
    """

    def __init__(
        self,
        config: DLRMConfig,
        vocabularies: Sequence[Any] | None = None,
        backend: str = "eager",
        embedding_optimizer: str = "sgd",
        embedding_lr: float = 0.01,
        embedding_eps: float = 1e-8,
        table_device=None,
    ):
        super().__init__()
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
        if backend == "fused" and config.interaction != "dot":
            raise ValueError(
                f"backend='fused' fuses the dot interaction; interaction={config.interaction!r} has no fused "
                "kernel: use backend='eager' or 'compile' for it"
            )
        self.config = config
        self.backend = backend
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
        elif config.hashing == "modulus":  # one remainder over all F features, no vocabulary
            hashes = BatchedModulusHash(config.num_embeddings_per_feature)
        else:  # one IndexHash per feature: the naive lookup, kept as the lesson
            hashes = [
                make_hash(config.hashing, vocab, n)
                for vocab, n in zip(vocabularies, config.num_embeddings_per_feature, strict=True)
            ]
        self.dense_arch = DenseArch(config.num_dense, config.dense_arch_layer_sizes)
        if backend == "fused":  # imported here: the eager model needs no Triton
            from lecture_code.model.fused import FusedDotInteraction, FusedSparseArch

            self.sparse_arch = FusedSparseArch(
                config.num_embeddings_per_feature, d, hashes,
                optimizer=embedding_optimizer, lr=embedding_lr, eps=embedding_eps, device=table_device,
            )  # fmt: skip
            self.inter_arch = FusedDotInteraction(f, d)
        else:
            self.sparse_arch = SparseArch(config.num_embeddings_per_feature, d, hashes, device=table_device)
            self.inter_arch = make_interaction(config.interaction, f, d)
        self.over_arch = OverArch(self.inter_arch.output_dim, config.over_arch_layer_sizes)

    def _forward(self, dense: torch.Tensor, sparse: torch.Tensor) -> torch.Tensor:
        x = self.dense_arch(dense)  # [B, D]
        e = self.sparse_arch(sparse)  # [B, F, D]
        return self.over_arch(self.inter_arch(x, e))  # [B, I] → [B]

    def forward(self, dense: torch.Tensor, sparse: torch.Tensor) -> torch.Tensor:
        """dense float ``[B, N]``, raw sparse ids int64 ``[B, F]`` → logits ``[B]`` (no sigmoid)."""
        if self.backend == "compile":
            return self._compiled()(dense, sparse)
        return self._forward(dense, sparse)

    def _compiled(self):
        # torch.compile of the bound forward, made on first use and kept outside the module tree, so the
        # state_dict keys stay the eager model's (no "_orig_mod." prefix). Keyed by id: a deepcopy of the
        # model compiles its own forward instead of calling the original's.
        owner, fn = self.__dict__.get("_compiled_forward", (None, None))
        if owner != id(self):
            fn = torch.compile(self._forward)
            self.__dict__["_compiled_forward"] = (id(self), fn)
        return fn

    def dense_parameters(self) -> list[nn.Parameter]:
        """The parameters a torch optimizer trains in every backend: both MLPs (not the tables)."""
        return [*self.dense_arch.parameters(), *self.over_arch.parameters()]

    def embedding_parameters(self) -> list[nn.Parameter]:
        """The ``F`` tables as parameters (eager, compile); ``[]`` for ``"fused"``: its tables are buffers
        updated inside backward by ``embedding_optimizer``."""
        return list(self.sparse_arch.parameters())

    @property
    def fuses_embedding_optimizer(self) -> bool:
        """Whether backward itself updates the tables (the ``"fused"`` backend)."""
        return self.backend == "fused"

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
        backend: str = "eager",
        embedding_optimizer: str = "sgd",
        embedding_lr: float = 0.01,
        table_device=None,
        **overrides: Any,
    ) -> DLRM:
        """Build a DLRM for preprocessed data, reading only its metadata (duck-typed).

        ``metadata`` needs ``num_embeddings_per_feature: tuple[int, ...]`` and, unless ``hashing`` is
        ``"modulus"``, ``vocabularies: list[np.ndarray]`` (sorted kept ids, ``len + 1`` rows per table).
        ``overrides`` replace preset fields, e.g. ``embedding_dim=32, dense_arch_layer_sizes=(64, 32)``;
        ``backend``, ``embedding_optimizer``, ``embedding_lr``, ``table_device``: as in :class:`DLRM`.
        """
        config = DLRMConfig.preset(
            preset,
            tuple(metadata.num_embeddings_per_feature),
            interaction=interaction,
            hashing=hashing,
            **overrides,
        )
        vocabularies = None if hashing == "modulus" else list(metadata.vocabularies)
        return cls(
            config, vocabularies, backend=backend, embedding_optimizer=embedding_optimizer,
            embedding_lr=embedding_lr, table_device=table_device,
        )  # fmt: skip
