"""Data-parallel DLRM under ``torchrun``: one process per GPU (or per CPU worker), DistributedDataParallel.

    torchrun --standalone --nproc-per-node 2 -m lecture_code.training --steps 600   # 2 GPUs or 2 CPU workers

``train`` finds ``torchrun``'s environment (``WORLD_SIZE > 1``, ``RANK``, ``LOCAL_RANK``, ``MASTER_ADDR``,
``MASTER_PORT``) and then, on each of the ``W`` ranks:

- **device and backend**: ``cuda:LOCAL_RANK`` and NCCL when a GPU is present (``--device cuda`` too), the CPU
  and gloo otherwise (``--device cpu``). Without ``torchrun`` (or with ``--nproc-per-node 1``) nothing here
  runs: no process group, the single-process loop as before.
- **data**: its own shard of the split, read from parquet without the other ranks' rows
  (:func:`lecture_code.data.load_shard`). ``--batch-size`` is per rank: one step trains on ``W·B`` rows.
  Every rank runs the same number of steps per epoch (the smallest shard's; shards differ by at most a row).
- **model**: the same seed builds the same model on every rank; :func:`wrap_model` wraps it in DDP, which
  broadcasts rank 0's state once and then all-reduces (averages) every gradient during backward, the MLPs'
  and the tables' (eager tables are ``nn.Embedding`` parameters with dense gradients), so every rank applies
  the same update and the replicated tables stay identical. The average over ranks of each rank's mean-loss
  gradient is the gradient of the mean loss over all ``W·B`` rows: one step equals a single-process step
  over the ranks' batches concatenated, up to float summation order (``tests/train/test_distributed.py``).
- **writes**: rank 0 alone logs, writes TensorBoard scalars, profiles and saves checkpoints (the bare model's
  ``state_dict``: a checkpoint has the same keys at every world size and loads with or without DDP).
- **holdout metrics**: each rank predicts its holdout shard; :func:`evaluate_all_ranks` gathers predictions
  and labels from all ranks, so logloss and AUC are those of every holdout row (an AUC is not an average).
- **resume**: every rank loads the one checkpoint (model, optimizers, step). The step counter says where the
  data order continues *at the current world size*; resumed at another world size, training goes on from the
  same weights and optimizer state with that world size's data order and global batch (not bit-equal to an
  uninterrupted run at either size, which would need the old world size's order).

The fused backend (``--backend fused``) is not wrapped in DDP: its tables are buffers updated inside backward,
so :mod:`lecture_code.training.data_parallel` exchanges the rows each batch touched (all-gathered in rank
order, each rank applying the same update) and all-reduces the MLP gradients after backward.

``--cuda-graph`` under ``torchrun`` (fused backend): the whole data-parallel step, its row exchange and
all-reduce included, replays from one CUDA graph per rank (:mod:`.graphs` says what capturing NCCL
collectives took). Refused (:func:`check_distributed_config`), with the reason in the error:

- ``--cuda-graph`` with the eager backend: DDP's bucketed all-reduce is launched from autograd hooks whose
  buckets are rebuilt after the first iterations; capturing it needs DDP built and warmed up on a side stream
  with a static graph, which is not done here;
- ``--cuda-graph`` with ``--shard-tables``: the sharded lookup sends each rank a number of ids that changes
  with every batch (``all_to_all_single`` with split sizes read on the host), which a graph cannot replay.
"""

from __future__ import annotations

import contextlib
import inspect
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from lecture_code.environment import device as default_device
from lecture_code.training.graphs import release_graphs
from lecture_code.training.metrics import ctr_metrics, predict

__all__ = [
    "DistInfo",
    "barrier",
    "check_distributed_config",
    "evaluate_all_ranks",
    "from_environment",
    "gather_rows",
    "mean_over_ranks",
    "min_over_ranks",
    "process_group",
    "rank_device",
    "wrap_model",
]


@dataclass(frozen=True)
class DistInfo:
    """This process's place among the ranks (``world_size = 1``: a single process, nothing distributed)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        """Rank 0: the one that writes logs, TensorBoard and checkpoints."""
        return self.rank == 0


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name, "")
    try:
        return int(value) if value else default
    except ValueError:
        raise ValueError(
            f"environment variable {name}={value!r} is not an integer (set by torchrun)"
        ) from None


def from_environment() -> DistInfo:
    """Rank, world size and local rank from an initialised process group, else from torchrun's variables."""
    if dist.is_available() and dist.is_initialized():
        local = _env_int("LOCAL_RANK", dist.get_rank())
        return DistInfo(dist.get_rank(), dist.get_world_size(), local)
    world_size = _env_int("WORLD_SIZE", 1)
    if world_size <= 1:
        return DistInfo()
    rank, local_rank = _env_int("RANK", 0), _env_int("LOCAL_RANK", 0)
    if not 0 <= rank < world_size:
        raise ValueError(f"RANK={rank} is outside WORLD_SIZE={world_size}")
    return DistInfo(rank, world_size, local_rank)


def check_distributed_config(
    backend: str, cuda_graph: bool, world_size: int, shard_tables: bool = False
) -> None:
    """Refuse what data-parallel training here cannot do (module docstring says why)."""
    if world_size <= 1 or not cuda_graph:
        return
    if shard_tables:
        raise ValueError(
            f"--cuda-graph with --shard-tables under torchrun (world size {world_size}) is not supported: "
            "the sharded lookup exchanges a number of ids that changes with every batch, which a CUDA graph "
            "cannot replay. Drop --cuda-graph, or replicate the tables (no --shard-tables)"
        )
    if backend != "fused":
        raise ValueError(
            f"--cuda-graph under torchrun (world size {world_size}) needs --backend fused, got "
            f"{backend!r}: DDP's all-reduce (the {backend} backend) is not captured here. Use --backend "
            "fused, or drop --cuda-graph"
        )


def rank_device(info: DistInfo, requested: str | None) -> torch.device:
    """The device of this rank: ``requested`` in one process; under torchrun ``cuda:LOCAL_RANK`` or cpu."""
    if not info.enabled:
        return torch.device(requested) if requested else default_device()
    kind = torch.device(requested).type if requested else default_device().type
    if kind == "cpu":
        return torch.device("cpu")
    if kind != "cuda":
        raise ValueError(f"under torchrun the device is cpu or cuda, got {requested!r}")
    if requested and torch.device(requested).index is not None:
        raise ValueError(
            f"under torchrun each rank uses cuda:LOCAL_RANK; pass --device cuda, not {requested!r} "
            "(choose GPUs with CUDA_VISIBLE_DEVICES)"
        )
    if info.local_rank >= torch.cuda.device_count():
        raise ValueError(
            f"LOCAL_RANK {info.local_rank} has no GPU: {torch.cuda.device_count()} visible; start at most "
            "that many processes per node (--nproc-per-node)"
        )
    return torch.device("cuda", info.local_rank)


@contextlib.contextmanager
def process_group(info: DistInfo, device: torch.device) -> Iterator[None]:
    """The default process group for ``info`` (NCCL for cuda, gloo for cpu), destroyed on exit if made here.

    A single process (``info.enabled`` false) gets no process group at all."""
    if not info.enabled or dist.is_initialized():
        yield
        return
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    try:
        yield
    finally:
        if device.type == "cuda":
            release_graphs()  # a graph holding NCCL collectives keeps the destroy below from returning
        dist.destroy_process_group()


def wrap_model(model: torch.nn.Module, device: torch.device) -> DistributedDataParallel:
    """DDP around ``model``: rank 0's parameters broadcast once, every gradient all-reduced.

    No buffer sync before each forward (``forward_sync_buffers=False``, ``broadcast_buffers=False`` before
    torch 2.13): the buffers (vocabularies, table sizes) are built from the same metadata on
    every rank and never change; broadcasting them before each forward would move 270 MB per step at the
    Kaggle vocabulary sizes for nothing."""
    ids = [device.index] if device.type == "cuda" else None
    if "forward_sync_buffers" in inspect.signature(DistributedDataParallel.__init__).parameters:
        return DistributedDataParallel(model, device_ids=ids, forward_sync_buffers=False)  # torch >= 2.13
    return DistributedDataParallel(model, device_ids=ids, broadcast_buffers=False)


def barrier() -> None:
    if dist.is_initialized():
        dist.barrier()


def min_over_ranks(value: int, device: torch.device) -> int:
    """The smallest ``value`` over all ranks (every rank gets it)."""
    t = torch.tensor([value], dtype=torch.int64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MIN)
    return int(t.item())


def mean_over_ranks(t: torch.Tensor) -> torch.Tensor:
    """The mean of ``t`` over ranks, a new tensor (SUM then divide: gloo has no AVG)."""
    out = t.detach().clone()
    dist.all_reduce(out, op=dist.ReduceOp.SUM)
    return out / dist.get_world_size()


def gather_rows(t: torch.Tensor) -> torch.Tensor:
    """Every rank's ``t`` (``[n_r, ...]``, ``n_r`` may differ) concatenated in rank order, on every rank."""
    n = torch.tensor([t.shape[0]], dtype=torch.int64, device=t.device)
    sizes = [torch.zeros_like(n) for _ in range(dist.get_world_size())]
    dist.all_gather(sizes, n)
    counts = [int(s.item()) for s in sizes]
    padded = t.new_zeros((max(counts), *t.shape[1:]))
    padded[: t.shape[0]] = t
    parts = [torch.empty_like(padded) for _ in counts]
    dist.all_gather(parts, padded.contiguous())
    return torch.cat([p[:c] for p, c in zip(parts, counts, strict=True)])


def evaluate_all_ranks(model: torch.nn.Module, batches: Iterable, device: torch.device) -> dict[str, float]:
    """Holdout metrics over all ranks' rows: each rank predicts its batches, predictions and labels are
    gathered, then logloss and AUC are taken once over all of them (the same numbers on every rank)."""
    probs, labels = predict(model, batches)
    return ctr_metrics(gather_rows(probs.to(device)), gather_rows(labels.to(device)))
