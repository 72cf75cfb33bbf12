"""The fused DLRM with sharded tables, in the training loop: ``--shard-tables`` under ``torchrun``.

:func:`shard_tables` is this repo's ``DistributedModelParallel``: the tables become
:class:`~lecture_code.training.sharded_embedding.ShardedSparseArch` (each rank its shards, model parallel)
and the MLPs stay replicated (:func:`replicate_mlps`: rank 0's broadcast, their gradients averaged after
backward by :class:`~lecture_code.training.data_parallel.GradientAllReduce`, data parallel).

**What is built where.** The loop (:func:`lecture_code.training.train.build`) builds the model with
``table_device="meta"``: the MLPs and the hashes as usual, the tables as shapes only (no memory), so the
global generator makes the same draws as an unsharded build (one table seed, then the MLPs). Then every rank
computes the same plan (:func:`plan_for_training`) and allocates only its shards, on its device, drawing their
rows from the table seed block by block (:mod:`lecture_code.model.table_init`): the values an unsharded build
with the same seed holds, row for row. No rank ever holds a full table it does not own, so tables larger than
one GPU (or one host) train; :mod:`lecture_code.training.sharding_report` prints the bytes each rank then
holds at the 1TB sizes. (TorchRec does the same: ``DistributedModelParallel`` of a model built on the meta
device, each shard initialised where it lives.)

Two things every rank must now do together, because every lookup is a collective:

- **checkpoints**: :func:`checkpoint_state` gathers the full tables (and Adagrad state) into rank 0's host
  memory, so the file has the unsharded fused model's keys and loads at any world size, sharded or not: a
  sharded model loads its rows of it (resharding is slicing). Gathering costs one table at a time beside the
  shards on each GPU (all of them in rank 0's host memory: 91 GB at the 1TB sizes, D = 128), and loading
  reads the whole file on every rank; TorchRec writes and reads each rank's shards instead
  (``torch.distributed.checkpoint``), which scales further.
- **holdout evaluation**: :func:`evaluate_sharded` makes every rank run as many lookups as the rank with the
  most holdout batches (shards differ by a row, so their batch counts by one), with an empty batch where a
  rank has run out.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
import torch.distributed as dist

from lecture_code.training.data_parallel import GradientAllReduce
from lecture_code.training.distributed import gather_rows
from lecture_code.training.metrics import ctr_metrics
from lecture_code.training.sharded_embedding import ShardedSparseArch
from lecture_code.training.sharding_plan import ShardingPlan, plan_sharding

__all__ = [
    "checkpoint_state",
    "evaluate_sharded",
    "is_sharded",
    "plan_for_model",
    "plan_for_training",
    "rank_budget",
    "replicate_mlps",
    "shard_tables",
]


def plan_for_model(
    model, world_size: int, memory_budget_bytes=None, row_wise_above_bytes=None
) -> ShardingPlan:
    """The sharding plan of a fused DLRM's tables (their dtype and the optimizer's per-row state counted)."""
    sparse = model.sparse_arch
    return plan_sharding(
        sparse.table_sizes, sparse.dim, world_size, memory_budget_bytes=memory_budget_bytes,
        row_wise_above_bytes=row_wise_above_bytes, element_bytes=sparse.weight.element_size(),
        state_bytes_per_row=4 if sparse.momentum is not None else 0,
    )  # fmt: skip


def shard_tables(model, plan: ShardingPlan, group=None, device=None) -> None:
    """Swap a fused DLRM's sparse arch for this rank's shards of it by ``plan``, in place.

    Built with ``table_device="meta"``: the shards are drawn from the table seed on ``device`` (nothing
    else of the tables is ever allocated); tables in memory: this rank's rows are copied out of them."""
    sparse = model.sparse_arch
    if getattr(model, "backend", None) != "fused" or isinstance(sparse, ShardedSparseArch):
        raise TypeError(
            f"shard_tables: expected an unsharded fused DLRM (DLRM(..., backend='fused')), got backend "
            f"{getattr(model, 'backend', None)!r} with a {type(sparse).__name__}"
        )
    model.sparse_arch = ShardedSparseArch.from_fused(sparse, plan, group=group, device=device)


def replicate_mlps(model, group=None) -> GradientAllReduce:
    """Rank 0's MLPs on every rank (a broadcast: every rank built them from the same seed, this makes sure);
    returns the ``after_backward`` that averages their gradients over the ranks."""
    with torch.no_grad():
        for module in (model.dense_arch, model.over_arch):
            for t in [*module.parameters(), *module.buffers()]:
                if t.is_floating_point():
                    dist.broadcast(t, src=0, group=group)
    return GradientAllReduce(model.dense_parameters(), group)


def checkpoint_state(model, dst: int = 0) -> tuple[dict, dict] | None:
    """Collective: ``(model state, table optimizer state)`` in the unsharded fused model's layout on rank
    ``dst`` (what :func:`~lecture_code.training.checkpoint.save_checkpoint` writes), ``None`` elsewhere."""
    sparse = model.sparse_arch
    gathered = sparse.gather_tables(dst)
    if gathered is None:
        return None
    tables, moments = gathered
    state = {k: v for k, v in model.state_dict().items() if not k.startswith("sparse_arch.local.")}
    state.update({f"sparse_arch.embeddings.{f}.weight": t for f, t in enumerate(tables)})
    group = {"lr": sparse.lr, "params": list(range(len(tables)))}
    optimizer_state = {}
    if moments is not None:
        group["eps"] = sparse.eps
        optimizer_state = {f: {"momentum": m} for f, m in enumerate(moments)}
    return state, {"state": optimizer_state, "param_groups": [group]}


@torch.no_grad()
def evaluate_sharded(model, batches: Iterable, device: torch.device) -> dict[str, float]:
    """Holdout logloss and AUC over every rank's batches; every rank runs the same number of lookups."""
    mine = list(batches)
    count = torch.tensor([len(mine)], device=device)
    dist.all_reduce(count, op=dist.ReduceOp.MAX)
    was_training = model.training
    model.eval()
    probs, labels = [torch.zeros(0, device=device)], [torch.zeros(0, device=device)]
    for i in range(int(count.item())):
        if i < len(mine):
            probs.append(model.predict_proba(mine[i].dense, mine[i].sparse).float())
            labels.append(mine[i].label.float())
        else:  # this rank has run out: an empty lookup, so the other ranks' lookups complete
            model.sparse_arch(torch.zeros(0, len(model.sparse_arch.plan.table_sizes), dtype=torch.int64,
                                          device=device))  # fmt: skip
    model.train(was_training)
    return ctr_metrics(gather_rows(torch.cat(probs)), gather_rows(torch.cat(labels)))


def rank_budget(device: torch.device) -> float | None:
    """Collective on GPUs: the bytes of tables each rank may hold, 90% of the smallest free memory over the
    ranks (every rank must compute the same plan); ``None`` (no limit) on CPUs."""
    if device.type != "cuda":
        return None
    free = torch.tensor([torch.cuda.mem_get_info(device)[0]], dtype=torch.int64, device=device)
    dist.all_reduce(free, op=dist.ReduceOp.MIN)
    return 0.9 * int(free.item())


def plan_for_training(model, device: torch.device, row_wise_above_mb: float | None) -> ShardingPlan:
    """The loop's plan (collective on GPUs): a per-rank budget of :func:`rank_budget`; tables above
    ``row_wise_above_mb`` MiB row-wise."""
    above = row_wise_above_mb * 2**20 if row_wise_above_mb is not None else None
    return plan_for_model(
        model, dist.get_world_size(), memory_budget_bytes=rank_budget(device), row_wise_above_bytes=above
    )


def is_sharded(model) -> bool:
    return isinstance(getattr(model, "sparse_arch", None), ShardedSparseArch)
