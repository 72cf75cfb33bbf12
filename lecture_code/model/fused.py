"""The fused backend's parts: the sparse arch as ONE table-batched embedding, the dot interaction one kernel.

``DLRM(..., backend="fused")`` swaps two modules and keeps the rest (:mod:`lecture_code.model.dlrm`):

- ``sparse_arch`` → :class:`FusedSparseArch`: the same hash module, then
  :class:`kernels.dlrm.embedding_tbe.TableBatchedEmbedding` (all ``F`` tables in one packed ``[R, D]``
  buffer, one launch for the lookup). Its backward does not produce a gradient for the tables: it applies the
  optimizer (exact SGD or FBGEMM's row-wise Adagrad) to the touched rows in the same pass. So the tables are
  *buffers*, invisible to ``model.parameters()``, and the training loop's torch optimizer sees only
  ``model.dense_parameters()`` (the two MLPs).
- ``inter_arch`` → :class:`FusedDotInteraction`: :func:`kernels.dlrm.interaction_dot.interaction_dot`, one
  kernel forward and one backward instead of cat + bmm + index_select + cat and their autograd.

The two MLPs stay ``nn.Linear`` + ``nn.ReLU``: the GEMMs are cuBLAS's either way; what a compiler or our
bias+ReLU kernels would fuse is the ReLUs (≤ 8 small pointwise kernels a step, each ≤ B·512 floats), whose
launch cost disappears when the step is replayed as one CUDA graph (:mod:`lecture_code.training.graphs`).
``benchmarks/bench_dlrm_step.py`` measures that choice (the ``fused + compiled MLPs`` row).

Checkpoints are interchangeable: a fused model's ``state_dict`` has exactly the eager model's keys and
shapes (``sparse_arch.embeddings.{f}.weight [n_f, D]``: views into the packed buffer), and loading one
copies each table into its slice. The row-wise Adagrad state (one fp32 per row) is optimizer state, as in
eager training, where it lives in the optimizer: :meth:`FusedSparseArch.embedding_optimizer_state_dict`
writes it in the layout of :class:`lecture_code.training.optimizers.RowWiseAdagrad` over the ``F`` tables.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from kernels.dlrm.embedding_tbe import TableBatchedEmbedding
from kernels.dlrm.interaction_dot import interaction_dot, interaction_dot_output_dim
from lecture_code.model.sparse_arch import checked_hashes, hash_rows
from lecture_code.model.table_init import draw_table_seed, init_table_rows_

__all__ = ["FusedDotInteraction", "FusedSparseArch"]


class FusedSparseArch(TableBatchedEmbedding):
    """Hash + one table-batched lookup, raw ids ``[B, F]`` → ``[B, F, D]``; trains its tables in backward.

    Args:
        num_embeddings_per_feature, embedding_dim, hashes: as :class:`~lecture_code.model.SparseArch`.
        optimizer: ``"sgd"`` or ``"rowwise_adagrad"``, applied inside backward. lr, eps: its settings
            (``lr`` changeable later: ``module.lr = x`` writes the device tensor a CUDA graph reads).
        device: where the tables are allocated; ``"meta"``: nowhere (the sharded build then makes each
            rank's rows: :mod:`lecture_code.training.sharded_training`).
        table_seed: the tables' seed (default: one draw from torch's global generator).

    Ids are not range-checked (``check_ids=False``: no host sync, so the step can be a CUDA graph): the hash
    maps every raw id into ``[0, n_f)`` by construction.
    """

    def __init__(
        self,
        num_embeddings_per_feature: Sequence[int],
        embedding_dim: int,
        hashes: Sequence[nn.Module] | nn.Module,
        optimizer: str = "sgd",
        lr: float = 0.01,
        eps: float = 1e-8,
        device=None,
        table_seed: int | None = None,
    ):
        tables = tuple(int(n) for n in num_embeddings_per_feature)
        seed = draw_table_seed() if table_seed is None else int(table_seed)
        super().__init__(
            tables, embedding_dim, optimizer=optimizer, lr=lr, eps=eps, check_ids=False, device=device
        )  # its reset_parameters (below) waits for the seed
        self.hashes = checked_hashes(hashes, tables)
        self.table_seed, self.initial_lr = seed, float(lr)  # initial_lr: readable on a meta-built arch too
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """The eager ``SparseArch``'s init: DLRM's ``Uniform(-sqrt(1/n_f), sqrt(1/n_f))`` drawn from
        ``table_seed`` (:mod:`lecture_code.model.table_init`), so one seed gives one model in either backend
        and in the sharded build. Adagrad state to 0. On a meta device: nothing to fill."""
        if getattr(self, "table_seed", None) is None:
            return  # called by the parent's __init__, before the seed is set
        with torch.no_grad():
            for f, (w, n) in enumerate(zip(self.embedding_weights(), self.table_sizes, strict=True)):
                init_table_rows_(w, self.table_seed, f, 0, n)
            if self.momentum is not None and not self.momentum.is_meta:
                self.momentum.zero_()

    def rows(self, sparse: torch.Tensor) -> torch.Tensor:
        """Hash only: raw ids int64 ``[B, F]`` → rows int64 ``[B, F]``; ``rows[b, f]`` indexes table ``f``."""
        return hash_rows(self.hashes, sparse)

    def forward(self, sparse: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        """Raw ids int64 ``[B, F]`` → embeddings ``[B, F, D]`` (one launch; the update runs in backward)."""
        return super().forward(self.rows(sparse))

    # --- checkpoints in the eager layout -------------------------------------------------------------
    def _save_to_state_dict(self, destination, prefix, keep_vars):
        # Replaces the packed buffers by per-table views under the eager keys; the hash (a child module)
        # writes its own entries as in the eager SparseArch.
        for f, w in enumerate(self.embedding_weights()):
            destination[f"{prefix}embeddings.{f}.weight"] = w if keep_vars else w.detach()

    def _load_from_state_dict(
        self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
    ):
        with torch.no_grad():
            for f, (w, n) in enumerate(zip(self.embedding_weights(), self.table_sizes, strict=True)):
                key = f"{prefix}embeddings.{f}.weight"
                if key not in state_dict:
                    missing_keys.append(key)
                elif tuple(state_dict[key].shape) != (n, self.dim):
                    error_msgs.append(
                        f"size mismatch for {key}: copying a param with shape "
                        f"{tuple(state_dict[key].shape)}, the shape in the current model is ({n}, {self.dim})"
                    )
                else:
                    w.copy_(state_dict[key])
        if strict:
            known = {f"{prefix}embeddings.{f}.weight" for f in range(self.num_features)}
            for key in state_dict:
                if key.startswith(prefix) and key not in known and not key.startswith(f"{prefix}hashes."):
                    unexpected_keys.append(key)

    # --- the optimizer state, in the eager optimizer's layout ---------------------------------------------
    def embedding_optimizer_state_dict(self) -> dict:
        """The fused optimizer's state as ``torch.optim`` writes it for the ``F`` eager tables (param ``f`` =
        table ``f``): SGD has none; row-wise Adagrad ``{"momentum": [n_f] fp32}`` per table."""
        state = {}
        if self.momentum is not None:
            moments = torch.split(self.momentum, self.table_sizes)
            state = {f: {"momentum": m.detach().clone()} for f, m in enumerate(moments)}
        group = {"lr": self.lr, "params": list(range(self.num_features))}
        if self.momentum is not None:
            group["eps"] = self.eps
        return {"state": state, "param_groups": [group]}

    def load_embedding_optimizer_state_dict(self, state: dict) -> None:
        """Inverse of :meth:`embedding_optimizer_state_dict` (also reads an eager ``RowWiseAdagrad``'s)."""
        self.lr = float(state["param_groups"][0]["lr"])
        if self.momentum is None:
            return
        with torch.no_grad():
            for f, m in enumerate(torch.split(self.momentum, self.table_sizes)):
                saved = state["state"].get(f)
                if saved is None:
                    m.zero_()  # an eager table never stepped has no state yet: zero, the same thing
                else:
                    m.copy_(saved["momentum"])


class FusedDotInteraction(nn.Module):
    """DLRM's dot interaction, one Triton kernel each way: ``[B, D]``, ``[B, F, D]`` → ``[B, D + (F+1)F/2]``.

    Same output, column for column, as :class:`~lecture_code.model.DotInteraction` (tested)."""

    def __init__(self, num_sparse_features: int, embedding_dim: int):
        super().__init__()
        self.output_dim = interaction_dot_output_dim(num_sparse_features, embedding_dim)

    def forward(self, dense: torch.Tensor, sparse: torch.Tensor) -> torch.Tensor:
        """dense ``[B, D]``, sparse ``[B, F, D]`` → ``[B, D + (F+1)F/2]``."""
        return interaction_dot(dense, sparse)
