"""The fused DLRM with sharded tables, in the training loop: ``--shard-tables`` under ``torchrun``.

:func:`shard_tables` is this repo's ``DistributedModelParallel``: the tables become
:class:`~lecture_code.training.sharded_embedding.ShardedSparseArch` (each rank its shards, model parallel)
and the MLPs stay replicated, their gradients averaged after backward by
:class:`~lecture_code.training.data_parallel.GradientAllReduce` (data parallel).

Two things every rank must now do together, because every lookup is a collective:

- **checkpoints**: :func:`checkpoint_state` gathers the full tables (and Adagrad state) on rank 0, so the file
  has the unsharded fused model's keys and loads at any world size, sharded or not: the loop loads it into the
  full model and shards after (resharding is slicing). Gathering costs one table at a time beside the shards;
  TorchRec writes each rank's shards instead (``torch.distributed.checkpoint``), which scales further.
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

__all__ = ["checkpoint_state", "evaluate_sharded", "plan_for_model", "shard_for_training", "shard_tables"]


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


def shard_tables(model, plan: ShardingPlan, group=None) -> GradientAllReduce:
    """Shard a fused DLRM's tables by ``plan`` in place; returns the ``after_backward`` for its MLPs.

    Rank 0's MLPs and full tables are broadcast first, so every rank shards the same tables."""
    sparse = model.sparse_arch
    if getattr(model, "backend", None) != "fused" or isinstance(sparse, ShardedSparseArch):
        raise TypeError(
            f"shard_tables: expected an unsharded fused DLRM (DLRM(..., backend='fused')), got backend "
            f"{getattr(model, 'backend', None)!r} with a {type(sparse).__name__}"
        )
    with torch.no_grad():
        for t in [*model.parameters(), *model.buffers()]:
            if t.is_floating_point():
                dist.broadcast(t, src=0, group=group)
    model.sparse_arch = ShardedSparseArch.from_fused(sparse, plan, group=group)
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


def shard_for_training(
    model, device: torch.device, row_wise_above_mb: float | None, log
) -> GradientAllReduce:
    """:func:`shard_tables` with the plan of the loop: on GPUs a per-rank budget of 90% of the smallest free
    memory over the ranks (every rank must compute the same plan); tables above ``row_wise_above_mb`` MiB
    row-wise. Logs the plan."""
    budget = None
    if device.type == "cuda":
        free = torch.tensor([torch.cuda.mem_get_info(device)[0]], dtype=torch.int64, device=device)
        dist.all_reduce(free, op=dist.ReduceOp.MIN)
        budget = 0.9 * int(free.item())
    above = row_wise_above_mb * 2**20 if row_wise_above_mb is not None else None
    plan = plan_for_model(
        model, dist.get_world_size(), memory_budget_bytes=budget, row_wise_above_bytes=above
    )
    log(str(plan))
    return shard_tables(model, plan)
