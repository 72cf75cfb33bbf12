"""The fused DLRM step data-parallel: tables replicated on every rank, only the touched rows exchanged.

DDP all-reduces every gradient as large as its parameter. For the eager model that includes the tables'
dense gradients: 2 GiB a step at the Kaggle sizes, where the rows a batch of 2048 touches are 3.4 MB. The
fused backend never forms a table gradient: :class:`kernels.dlrm.embedding_tbe.TableBatchedEmbedding`'s
backward sums the entries of each touched row and updates it in place. So on ``W`` ranks, each step:

1. **Tables** (:class:`RowExchange`, called inside that backward, before the update): every rank's local ids
   ``[B·F·L]`` and upstream gradient rows ``[B·F, D]`` are all-gathered, in rank order, and the gradient rows
   scaled by ``1/W``; every rank then runs the same update over the ``W·B`` gathered samples.
2. **MLPs** (:class:`GradientAllReduce`, after the backward, before the optimizer): the MLP gradients,
   flattened into one buffer, all-reduced (sum) and scaled by ``1/W``: one collective per step.

Why this is the single-process update of the global batch. Each rank's loss is the mean over its ``B`` rows,
so its gradient of any quantity is ``(1/B)·Σ_{its rows}``; the mean loss over all ``W·B`` rows has gradient
``(1/(W·B))·Σ_{all rows} = (1/W)·Σ_ranks (rank's gradient)``. For the MLPs that is step 2. For a table row
it is ``(1/W)·Σ`` of the entries of every rank that touched it: the gathered entries of step 1, which the
backward sums per row (sort, then segment sums) exactly as it sums the repeated ids of one large batch.
Per-row updates (SGD, row-wise Adagrad) then see the global batch's row gradient, once.

Order and bits. Ranks' entries are concatenated in rank order (rank 0's ``B·F`` first); the sort is stable,
so each row's entries are summed rank by rank, in the same order on every rank. Every rank runs the same
kernels on the same gathered bytes, and an all-reduce hands every rank the same result, so the replicas stay
bitwise equal (``deterministic=True``, the default; the atomic-add SGD would not). Against one process over
the concatenated batch they agree to float rounding: the MLPs' sums over rows run in another order, and a
``1/W`` that is not a power of two rounds.

Bytes per step and rank (Kaggle preset, B = 2048, F = 26, D = 16, fp32, 2 ranks): ids 0.43 MB and
gradient rows 3.4 MB sent, twice that received; MLP gradients 1.9 MB all-reduced. DDP over the eager model:
the tables' 2 GiB.

In one CUDA graph (``--cuda-graph`` under ``torchrun``,
:func:`lecture_code.training.graphs.make_graphed_train_step` with this module's ``after_backward``): both
collectives are captured with the kernels; :mod:`.graphs` says what that took (thread-local capture; graphs
destroyed before the process group). On H200s (NVLink, NCCL 2.28.9, torch 2.11) the captured step equals the
uncaptured one bitwise on each rank (``tests/train/test_fused_data_parallel.py``); its samples/s on 1, 2 and 4
of them are in ``benchmarks/results/ddp/``. Step 1 makes every rank sum and apply the rows of
all ``W·B`` samples: that part of the step does not shrink as ranks are added. gloo (CPU)
collectives cannot be captured.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
import torch.distributed as dist

__all__ = ["GradientAllReduce", "RowExchange", "make_fused_data_parallel"]

# torch 2.13 renamed all_gather_into_tensor (deprecated there) to all_gather_single; 2.11 has only the first.
_all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


class RowExchange:
    """``(ids, grad) → (all ranks' ids, all ranks' grad / W)``, concatenated in rank order.

    ``ids``: the local ids of this rank's entries, flat ``[n]`` (the same ``n`` on every rank: equal batches);
    ``grad``: the upstream gradient rows ``[m, D]``, one per bag. The table-batched embedding calls it in
    backward (its ``exchange`` attribute) before it sums and applies the rows.
    """

    def __init__(self, group=None):
        self.group = group

    def __call__(self, ids: torch.Tensor, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        world = dist.get_world_size(self.group)
        all_ids = ids.new_empty((world * ids.shape[0], *ids.shape[1:]))
        _all_gather(all_ids, ids.contiguous(), group=self.group)
        all_grad = grad.new_empty((world * grad.shape[0], *grad.shape[1:]))
        _all_gather(all_grad, grad.contiguous(), group=self.group)
        return all_ids, all_grad.mul_(1.0 / world)


class GradientAllReduce:
    """After backward: every ``.grad`` of ``params`` replaced by its mean over ranks, in one all-reduce."""

    def __init__(self, params: Iterable[torch.nn.Parameter], group=None):
        self.params = [p for p in params if p.requires_grad]
        self.group = group

    def __call__(self) -> None:
        grads = [p.grad for p in self.params if p.grad is not None]
        if not grads:
            return
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat, group=self.group)  # SUM: gloo has no AVG before torch 2.13
        flat.mul_(1.0 / dist.get_world_size(self.group))
        for g, part in zip(grads, flat.split([g.numel() for g in grads]), strict=True):
            g.copy_(part.view_as(g))


def make_fused_data_parallel(model: torch.nn.Module, group=None) -> GradientAllReduce:
    """Make a fused DLRM's step data-parallel: its table-batched embedding exchanges the touched rows
    (:class:`RowExchange`); returns the ``after_backward`` that averages the MLP gradients.

    Broadcasts rank 0's parameters and buffers first (the tables too), so the replicas start equal.
    """
    sparse = model.sparse_arch
    if not hasattr(sparse, "exchange"):
        raise TypeError(
            f"make_fused_data_parallel: model.sparse_arch is a {type(sparse).__name__}, expected the fused "
            "backend's table-batched embedding (DLRM(..., backend='fused'))"
        )
    with torch.no_grad():
        for t in [*model.parameters(), *model.buffers()]:
            if t.is_floating_point():
                dist.broadcast(t, src=0, group=group)
    sparse.exchange = RowExchange(group)
    return GradientAllReduce(model.parameters(), group)
