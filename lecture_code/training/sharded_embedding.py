"""Embedding tables sharded over the ranks (model parallel), TorchRec's layout, the fused optimizer kept.

Each rank holds only its shards (:mod:`.sharding_plan`: whole tables, or contiguous row blocks of the largest)
as ONE :class:`~kernels.dlrm.embedding_tbe.TableBatchedEmbedding` whose local tables are those shards, so the
optimizer fused into its backward updates the owner's rows and no other copy of them exists. A lookup of the
local ids ``[B, F]`` (or ``[B, F, L]``) of this rank's batch:

1. **Route.** Every entry's owner: the shard whose rows hold it (one ``searchsorted`` over the shards' first
   global rows). Entries stably sorted by owner keep their (sample, table) order, which is the owner's bag
   order (a rank's shards are in table order).
2. **Counts first** (``all_to_all_single`` of 5 int64 per pair of ranks, one host sync): how many ids go to
   each owner, this rank's batch size, and whether any id was out of range (which one). A bad id anywhere
   makes EVERY rank raise the same ``IndexError`` here, before anything else is sent: no rank is left
   waiting in a collective the failing rank never joins.
3. **Ids** (one ``all_to_all_single``): to each owner, the bag lengths of its shards (``B·F_r`` int64,
   sample-major; a row-wise bag holds only the ids inside the owner's block, often none) and the ids
   (``id − the shard's first row``).
4. **Pool.** The owner looks up every rank's bags at once (ragged bags, sum pooling): ``[Σ_s B_s, F_r, D]``.
5. **Pooled back** (one ``all_to_all_single``): each rank gets ``[B, F_r, D]`` from each owner and adds them
   into ``[B, F, D]`` by table (``index_add``): a row-wise table's partial sums, in rank order.

Backward runs the same road in reverse: the ``[B, F_r, D]`` pooled gradients go back to their owners (one
``all_to_all_single``), scaled by ``1/W``, and each owner's table-batched backward sums them per row and
applies SGD or row-wise Adagrad to its own rows. Why ``1/W``: each rank's loss is the mean over its own
batch, and the loss of the global batch is the mean of the ranks' losses, as for the MLPs' gradients
(:class:`~lecture_code.training.data_parallel.GradientAllReduce`). So a step equals one process stepping
the unsharded tables over all ranks' batches concatenated (rows summed in rank order; equal up to float
rounding: ``1/3`` rounds, and the row sums run in another order).

Bytes per step, rank ``s`` with ``B`` samples, ``L`` ids per bag, ``W`` ranks, ``e`` bytes per element
(:func:`~lecture_code.training.sharding_plan.exchange_bytes` counts them for a plan): ids ``8·B·L`` per table
held elsewhere (row-wise: by the share held elsewhere), lengths ``8·B`` per shard held elsewhere, pooled
rows ``B·D·e`` per shard held elsewhere received in forward and sent back in backward; as an owner,
``(W − 1)·B·D·e`` per shard it holds sent in forward and received in backward. The tables never move. The
replicated data-parallel step all-gathers ``B·F·(8·L + D·e)`` from every rank instead, and keeps every table
on every rank.

TorchRec. ``DistributedModelParallel(model, plan=...)`` swaps each ``EmbeddingBagCollection`` for a
``ShardedEmbeddingBagCollection`` and wraps the rest in DDP; here :func:`.sharded_training.shard_tables`
swaps the fused ``sparse_arch`` for :class:`ShardedSparseArch` and all-reduces the MLP gradients.
``EmbeddingBagCollection`` ↔ the ``F`` tables of the table-batched embedding; its input, a
``KeyedJaggedTensor``, ↔ the ragged ids and bag lengths of step 3, split by TorchRec's input dist
(``KJTAllToAll``: the splits first, then lengths and values, as here); its pooled output dist
(``PooledEmbeddingsAllToAll`` for table-wise, a reduce-scatter for row-wise) ↔ step 5.
``EmbeddingShardingPlanner`` ↔ :func:`~lecture_code.training.sharding_plan.plan_sharding`;
``ShardingType.TABLE_WISE`` / ``ROW_WISE`` ↔ its two layouts. FBGEMM's TBE with ``EXACT_ROWWISE_ADAGRAD``
fused into the backward is the owner's kernel in both.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from kernels.dlrm.embedding_tbe import TableBatchedEmbedding, table_offsets_for
from lecture_code.model.sparse_arch import checked_hashes, hash_rows
from lecture_code.model.table_init import init_table_rows_
from lecture_code.training.sharding_plan import ShardingPlan

__all__ = ["ShardedEmbedding", "ShardedSparseArch"]

NAME = "ShardedEmbedding"
HEADER = 5  # int64 per pair of ranks: ids sent, batch size, bad id?, its feature, its value


class _AllToAllRows(torch.autograd.Function):
    """``[Σ send_splits, D]`` rows → ``[Σ recv_splits, D]``; backward sends the gradients back, × scale."""

    @staticmethod
    def forward(ctx, rows, send_splits, recv_splits, group, grad_scale):
        ctx.splits, ctx.group, ctx.grad_scale = (send_splits, recv_splits), group, grad_scale
        out = rows.new_empty((sum(recv_splits), rows.shape[1]))
        dist.all_to_all_single(out, rows.contiguous(), recv_splits, send_splits, group=group)
        return out

    @staticmethod
    def backward(ctx, grad):
        send_splits, recv_splits = ctx.splits
        back = grad.new_empty((sum(send_splits), grad.shape[1]))
        dist.all_to_all_single(back, grad.contiguous(), send_splits, recv_splits, group=ctx.group)
        return back.mul_(ctx.grad_scale), None, None, None, None


class ShardedEmbedding(nn.Module):
    """This rank's shards of the plan's tables; forward: local ids ``[B, F]`` / ``[B, F, L]`` → ``[B, F, D]``.

    Every rank must call forward (and backward) the same number of times: each is a collective. Sum pooling
    (a row-wise table's bag is summed in parts). Args: ``plan`` (:func:`.sharding_plan.plan_sharding`), this
    ``rank`` (default: the process group's), ``optimizer`` / ``lr`` / ``eps`` / ``dtype`` / ``device`` of the
    local :class:`TableBatchedEmbedding` (``self.local``; ``None`` on a rank that holds no shard), ``group``.
    """

    def __init__(self, plan: ShardingPlan, rank: int | None = None, *, optimizer: str = "sgd",
                 lr: float = 0.01, eps: float = 1e-8, dtype=torch.float32, device=None,
                 group=None):  # fmt: skip
        super().__init__()
        if not isinstance(plan, ShardingPlan):
            raise TypeError(
                f"{NAME}: plan must be a ShardingPlan (plan_sharding(...)), got {type(plan).__name__}"
            )
        if rank is None:
            rank = dist.get_rank(group) if dist.is_initialized() else 0
        if not 0 <= rank < plan.world_size:
            raise ValueError(
                f"{NAME}: rank must be in 0..{plan.world_size - 1} (the plan's ranks), got {rank}"
            )
        self.plan, self.rank, self.group = plan, rank, group
        self.optimizer, self.eps, self._lr = optimizer, eps, float(lr)
        mine = plan.shards_of(rank)
        self.local = (
            TableBatchedEmbedding(
                [s.rows for s in mine],
                plan.dim,
                optimizer=optimizer,
                lr=lr,
                eps=eps,
                check_ids=False,
                dtype=dtype,
                device=device,
            )  # fmt: skip
            if mine
            else None
        )
        self.dtype = dtype
        self.shards_per_rank = [len(plan.shards_of(r)) for r in range(plan.world_size)]
        offsets = table_offsets_for(plan.table_sizes)
        slot = {s: i for r in range(plan.world_size) for i, s in enumerate(plan.shards_of(r))}
        by_row = sorted(plan.shards, key=lambda s: (s.table, s.row_start))  # global row order
        starts = [int(offsets[s.table]) + s.row_start for s in by_row]
        buffers = {
            "table_offsets": offsets,  # [F+1]: table f's first global row
            "shard_starts": torch.tensor(starts, dtype=torch.int64),  # [Q] in global row order
            "shard_owner": torch.tensor([s.rank for s in by_row], dtype=torch.int64),
            "shard_slot": torch.tensor([slot[s] for s in by_row], dtype=torch.int64),  # index on its owner
            "shards_of_rank": torch.tensor(self.shards_per_rank, dtype=torch.int64),  # [W]: F_r
            "pooled_table": torch.tensor([s.table for s in plan.shards], dtype=torch.int64),  # (rank, slot)
        }
        for name, value in buffers.items():
            self.register_buffer(name, value.to(device), persistent=False)

    @property
    def lr(self) -> float:
        return self.local.lr if self.local is not None else self._lr

    @lr.setter
    def lr(self, value: float) -> None:
        self._lr = float(value)
        if self.local is not None:
            self.local.lr = value

    def _route(self, ids: torch.Tensor):
        """Per entry of the flat ids: its shard's row offset, owner, and owner-side bag; the header rows."""
        F, W = len(self.plan.table_sizes), self.plan.world_size
        B, L = ids.shape[0], 1 if ids.dim() == 2 else ids.shape[2]
        flat = ids.reshape(-1)
        entry = torch.arange(flat.numel(), device=flat.device)
        feature = (entry // L) % F
        sizes = self.table_offsets[1:] - self.table_offsets[:-1]
        bad = (flat < 0) | (flat >= sizes[feature])
        row = self.table_offsets[feature] + torch.where(bad, 0, flat)
        shard = torch.searchsorted(self.shard_starts, row, right=True) - 1
        owner = self.shard_owner[shard]
        bag_base = B * (torch.cumsum(self.shards_of_rank, 0) - self.shards_of_rank)  # [W]
        bag = bag_base[owner] + (entry // (F * L)) * self.shards_of_rank[owner] + self.shard_slot[shard]
        lengths = torch.bincount(bag, minlength=B * len(self.plan.shards))
        order = torch.argsort(owner, stable=True)
        send_ids = (row - self.shard_starts[shard])[order]
        first = bad.int().argmax() if flat.numel() else torch.zeros((), dtype=torch.int64)
        problem = torch.stack([bad.any().long(), feature[first], flat[first]]) if flat.numel() else None
        header = torch.zeros(W, HEADER, dtype=torch.int64, device=flat.device)
        header[:, 0] = torch.bincount(owner, minlength=W)
        header[:, 1] = B
        if problem is not None:
            header[:, 2:] = problem
        return lengths, send_ids, header

    def _raise_bad_ids(self, headers: list[list[int]]) -> None:
        for src, (_, _, bad, feature, value) in enumerate(headers):
            if bad:
                raise IndexError(
                    f"{NAME}: rank {src} was given id {value} for feature {feature}, outside its table of "
                    f"{self.plan.table_sizes[feature]} rows; every rank stops here (the ids are checked "
                    "before any is sent)"
                )

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """Local ids int64 ``[B, F]`` / ``[B, F, L]`` (``ids[b, f]`` a row of table ``f``) → ``[B, F, D]``."""
        F, W, D = len(self.plan.table_sizes), self.plan.world_size, self.plan.dim
        if ids.dtype != torch.int64:
            raise TypeError(f"{NAME}: ids must be int64, got {ids.dtype}")
        if ids.dim() not in (2, 3) or ids.shape[1] != F:
            raise ValueError(f"{NAME}: ids must be [B, {F}] or [B, {F}, L], got {tuple(ids.shape)}")
        if dist.get_world_size(self.group) != W:
            raise ValueError(f"{NAME}: the plan is for {W} ranks, the process group has "
                             f"{dist.get_world_size(self.group)}")  # fmt: skip
        B = ids.shape[0]
        lengths, send_ids, header = self._route(ids)
        recv_header = torch.empty_like(header)
        dist.all_to_all_single(recv_header, header, group=self.group)  # counts first
        headers = recv_header.tolist()  # the one host sync: sizes for the next two exchanges
        self._raise_bad_ids(headers)
        sent, F_me = header[:, 0].tolist(), self.shards_per_rank[self.rank]
        batches = [h[1] for h in headers]  # B_s of every rank
        length_splits = [B * n for n in self.shards_per_rank]
        send = torch.cat([*_interleave(lengths.split(length_splits), send_ids.split(sent))])
        recv_splits = [b * F_me + h[0] for b, h in zip(batches, headers, strict=True)]
        recv = send.new_empty(sum(recv_splits))
        send_splits = [a + b for a, b in zip(length_splits, sent, strict=True)]
        dist.all_to_all_single(recv, send, recv_splits, send_splits, group=self.group)
        parts = recv.split([p for b, h in zip(batches, headers, strict=True) for p in (b * F_me, h[0])])
        bag_lengths, local_ids = torch.cat(parts[0::2]), torch.cat(parts[1::2])
        train = self.training and torch.is_grad_enabled()
        if self.local is not None:
            offsets = torch.cat([bag_lengths.new_zeros(1), torch.cumsum(bag_lengths, 0)])
            pooled_here = self.local(local_ids, offsets)  # [Σ_s B_s, F_me, D]
        else:  # no shard here: still joins the backward's exchange
            pooled_here = torch.zeros(
                sum(batches), 0, D, dtype=self.dtype, device=ids.device, requires_grad=train
            )
        rows = _AllToAllRows.apply(pooled_here.reshape(-1, D), [b * F_me for b in batches], length_splits,
                                   self.group, 1.0 / W)  # fmt: skip
        blocks = [
            r.view(B, n, D) for r, n in zip(rows.split(length_splits), self.shards_per_rank, strict=True)
        ]
        by_shard = torch.cat(blocks, dim=1)  # [B, S, D], shards in (rank, slot) order
        return by_shard.new_zeros(B, F, D).index_add(1, self.pooled_table, by_shard)

    # --- the full tables, for checkpoints at any world size ---------------------------------------------
    def gather_tables(self, dst: int = 0) -> tuple[list[torch.Tensor], list[torch.Tensor] | None] | None:
        """Collective: ``(tables [n_f, D], Adagrad momenta [n_f] or None)`` of all ``F`` tables on rank
        ``dst`` (in host memory), ``None`` on the others. One ``reduce`` per table (each row has one owner,
        the other ranks add zeros), so no device ever holds more than one full table beside its shards."""
        tables, moments = [], [] if self.optimizer == "rowwise_adagrad" else None
        device = self.table_offsets.device
        for f, n in enumerate(self.plan.table_sizes):
            table = torch.zeros(n, self.plan.dim, dtype=self.dtype, device=device)
            moment = torch.zeros(n, dtype=torch.float32, device=device) if moments is not None else None
            for slot, s in enumerate(self.plan.shards_of(self.rank)):
                if s.table == f:
                    table[s.row_start : s.row_end] = self.local.embedding_weights()[slot]
                    if moment is not None:
                        moment[s.row_start : s.row_end] = torch.split(
                            self.local.momentum, self.local.table_sizes
                        )[slot]
            dist.reduce(table, dst, group=self.group)
            tables.append(table.cpu())  # dst too holds one full table on the device at a time
            if moment is not None:
                dist.reduce(moment, dst, group=self.group)
                moments.append(moment.cpu())
        return (tables, moments) if self.rank == dst else None

    def load_tables(self, tables: list[torch.Tensor], moments: list[torch.Tensor] | None = None) -> None:
        """Copy this rank's rows out of the full tables (and Adagrad momenta): resharding at load time."""
        for f, (t, n) in enumerate(zip(tables, self.plan.table_sizes, strict=True)):
            if tuple(t.shape) != (n, self.plan.dim):
                raise ValueError(
                    f"{NAME}: table {f} must have shape ({n}, {self.plan.dim}), got {tuple(t.shape)}"
                )
        with torch.no_grad():
            for slot, s in enumerate(self.plan.shards_of(self.rank)):
                self.local.embedding_weights()[slot].copy_(tables[s.table][s.row_start : s.row_end])
                if moments is not None and self.local.momentum is not None:
                    mine = torch.split(self.local.momentum, self.local.table_sizes)[slot]
                    mine.copy_(moments[s.table][s.row_start : s.row_end])

    def draw_tables(self, seed: int) -> None:
        """This rank's rows as an unsharded build with table seed ``seed`` draws them; Adagrad state 0."""
        with torch.no_grad():
            for slot, s in enumerate(self.plan.shards_of(self.rank)):
                rows = self.local.embedding_weights()[slot]
                init_table_rows_(rows, seed, s.table, s.row_start, self.plan.table_sizes[s.table])
            if self.local.momentum is not None:
                self.local.momentum.zero_()


def _interleave(a, b):
    for x, y in zip(a, b, strict=True):
        yield x
        yield y


class ShardedSparseArch(ShardedEmbedding):
    """The fused DLRM's sparse arch, sharded: hash raw ids ``[B, F]``, then :class:`ShardedEmbedding`.

    A drop-in for :class:`~lecture_code.model.fused.FusedSparseArch` in training (``optimizer``, ``lr``).
    Its ``state_dict`` holds this rank's shards (``local.weight``, ``local.momentum``); loading a state in
    the unsharded layout (``embeddings.{f}.weight [n_f, D]``, what checkpoints hold) takes this rank's rows
    of each table: a checkpoint written at any world size loads at any other.
    """

    def __init__(self, plan: ShardingPlan, hashes, rank: int | None = None, **kwargs):
        super().__init__(plan, rank, **kwargs)
        self.hashes = checked_hashes(hashes, plan.table_sizes)
        self.register_load_state_dict_pre_hook(_take_rows_of_full_tables)

    @classmethod
    def from_fused(
        cls, fused, plan: ShardingPlan, rank: int | None = None, group=None, device=None
    ) -> ShardedSparseArch:
        """This rank's shards of a :class:`FusedSparseArch`'s tables (its hashes, optimizer, lr, eps).

        Tables in memory: this rank's rows are copied out of them (on their device). Tables on the meta
        device (``DLRM(..., table_device="meta")``: never allocated): this rank's rows are drawn from the
        arch's ``table_seed`` (:func:`~lecture_code.model.table_init.init_table_rows_`), the same values an
        unsharded build with that seed holds, on ``device``; the rank never holds more than its shards
        and one block of draws."""
        if tuple(fused.table_sizes) != plan.table_sizes or fused.dim != plan.dim:
            raise ValueError(f"{NAME}: the plan is for tables {plan.table_sizes} of D = {plan.dim}, the "
                             f"sparse arch has {tuple(fused.table_sizes)} of D = {fused.dim}")  # fmt: skip
        meta = fused.weight.is_meta
        lr = fused.initial_lr if meta else fused.lr
        sharded = cls(plan, fused.hashes, rank, optimizer=fused.optimizer, lr=lr, eps=fused.eps,
                      dtype=fused.weight.dtype, device=device if meta else fused.weight.device,
                      group=group)  # fmt: skip
        if sharded.local is None:
            return sharded
        if meta:
            sharded.draw_tables(fused.table_seed)
        else:
            moments = torch.split(fused.momentum, fused.table_sizes) if fused.momentum is not None else None
            sharded.load_tables(fused.embedding_weights(), moments)
        return sharded

    def forward(self, sparse: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        """Raw ids int64 ``[B, F]`` → ``[B, F, D]`` (collective; the owners' update runs in backward)."""
        return super().forward(hash_rows(self.hashes, sparse))

    def load_embedding_optimizer_state_dict(self, state: dict) -> None:
        """This rank's rows of an unsharded optimizer state (``FusedSparseArch``'s layout)."""
        self.lr = float(state["param_groups"][0]["lr"])
        if self.local is None or self.local.momentum is None:
            return
        zeros = [torch.zeros(n) for n in self.plan.table_sizes]
        moments = [
            state["state"][f]["momentum"] if f in state["state"] else zeros[f] for f in range(len(zeros))
        ]
        with torch.no_grad():
            for slot, s in enumerate(self.plan.shards_of(self.rank)):
                mine = torch.split(self.local.momentum, self.local.table_sizes)[slot]
                mine.copy_(moments[s.table][s.row_start : s.row_end])


def _take_rows_of_full_tables(module, state_dict, prefix, *args) -> None:
    """Load hook: unsharded keys ``embeddings.{f}.weight`` → this rank's ``local.weight`` (momentum kept)."""
    keys = [f"{prefix}embeddings.{f}.weight" for f in range(len(module.plan.table_sizes))]
    if keys[0] not in state_dict:
        return
    tables = [state_dict.pop(k) for k in keys]
    if module.local is not None:
        for f, (t, n) in enumerate(zip(tables, module.plan.table_sizes, strict=True)):
            if tuple(t.shape) != (n, module.plan.dim):
                raise ValueError(
                    f"{NAME}: {keys[f]} must have shape ({n}, {module.plan.dim}), got {tuple(t.shape)}"
                )
        parts = [tables[s.table][s.row_start : s.row_end] for s in module.plan.shards_of(module.rank)]
        state_dict[f"{prefix}local.weight"] = torch.cat(parts)
        if (
            module.local.momentum is not None
        ):  # optimizer state: loaded by load_embedding_optimizer_state_dict
            state_dict.setdefault(f"{prefix}local.momentum", module.local.momentum.detach().clone())
