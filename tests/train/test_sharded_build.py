"""The sharded build allocates only each rank's shards, and they hold the unsharded build's rows.

Two ranks (gloo on the CPU; one GPU each with NCCL on a GPU machine, tests/ranks.py) build a fused DLRM as
the training loop does with ``--shard-tables`` (:func:`lecture_code.training.train.build`): tables on the meta
device, the plan, each rank drawing its shards from the table seed. Three tables go row-wise and their shards
start and end inside a block of draws (:data:`~lecture_code.model.table_init.BLOCK_ROWS`). Against an
unsharded fused and an eager build with the same seed, in the same rank:

- every shard equals its rows of the unsharded tables exactly, the MLPs equal, Adagrad state zero;
- the rank's tables take exactly the plan's bytes, and its whole model only these, the MLPs and small buffers;
- the peak of the memory the build allocates (every new storage, held until freed) stays under the rank's
  shards + one block of draws + the MLPs: no full table is ever allocated. The same meter on the unsharded
  build reads at least the full tables, so it would catch one.
"""

from __future__ import annotations

import os
import weakref
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist
from ranks import ranks_device
from torch.utils._python_dispatch import TorchDispatchMode

from lecture_code.model import DLRM, DLRMConfig
from lecture_code.model.table_init import BLOCK_ROWS
from lecture_code.training.launch import spawn
from lecture_code.training.sharded_training import plan_for_model, shard_tables
from lecture_code.training.sharding_plan import ROW_WISE

TABLES, D, SEED = (300_000, 140_000, 70_001, 5_000, 37, 3), 8, 11
ROW_WISE_ABOVE = 2 * 2**20  # bytes (D = 8 plus Adagrad: 36 per row): the three largest tables split by rows
WORLD = 2


class AllocationMeter(TorchDispatchMode):
    """Bytes of every storage the ops under it create, counted while the storage lives: ``peak`` and
    ``largest`` (one allocation). In-place ops and views create none."""

    def __init__(self):
        super().__init__()
        self.live = self.peak = self.largest = 0
        self._seen: set[int] = set()

    def _freed(self, key: int, nbytes: int) -> None:
        self.live -= nbytes
        self._seen.discard(key)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, list | tuple) else (out,):
            if not isinstance(t, torch.Tensor) or t.is_meta:
                continue
            storage = t.untyped_storage()
            key = id(storage)
            if key in self._seen or storage.nbytes() == 0:
                continue
            self._seen.add(key)
            self.live += storage.nbytes()
            self.peak, self.largest = max(self.peak, self.live), max(self.largest, storage.nbytes())
            weakref.finalize(storage, self._freed, key, storage.nbytes())
        return out


def _config() -> DLRMConfig:
    return DLRMConfig(TABLES, embedding_dim=D, dense_arch_layer_sizes=(16, D), over_arch_layer_sizes=(16, 1),
                      hashing="modulus")  # fmt: skip


def _build(table_device=None, backend="fused") -> DLRM:
    torch.manual_seed(SEED)
    return DLRM(_config(), backend=backend, embedding_optimizer="rowwise_adagrad", table_device=table_device)


def _bytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def _rank(device: str) -> dict:
    rank = int(os.environ["RANK"])
    dev = torch.device("cuda", rank) if device == "cuda" else torch.device("cpu")
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    dist.init_process_group("nccl" if dev.type == "cuda" else "gloo", timeout=timedelta(seconds=60))
    try:
        with AllocationMeter() as sharded_meter:  # what build() does with --shard-tables
            model = _build(table_device="meta")
            plan = plan_for_model(model, WORLD, row_wise_above_bytes=ROW_WISE_ABOVE)
            shard_tables(model, plan, device=dev)
            model = model.to(dev)
        with AllocationMeter() as unsharded_meter:
            full = _build()
        eager = _build(backend="eager")
        local = model.sparse_arch.local
        tables = full.sparse_arch.embedding_weights()
        shards_equal = [
            torch.equal(local.embedding_weights()[slot].cpu(), tables[s.table][s.row_start : s.row_end])
            and torch.equal(tables[s.table], eager.sparse_arch.embeddings[s.table].weight)
            for slot, s in enumerate(plan.shards_of(rank))
        ]
        mlps = [(k, v) for k, v in full.state_dict().items() if not k.startswith("sparse_arch.")]
        return {
            "plan": plan,
            "shards_equal": shards_equal,
            "mlps_equal": all(torch.equal(model.state_dict()[k].cpu(), v) for k, v in mlps),
            "momentum_zero": not bool(local.momentum.any()),
            "table_bytes": _bytes([local.weight, local.momentum]),
            "model_bytes": _bytes([*model.parameters(), *model.buffers()]),
            "dense_bytes": _bytes(model.dense_parameters()),
            "full_table_bytes": _bytes([full.sparse_arch.weight, full.sparse_arch.momentum]),
            "peak": sharded_meter.peak,
            "largest": sharded_meter.largest,
            "unsharded_peak": unsharded_meter.peak,
        }
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def built():
    return spawn(_rank, WORLD, ranks_device(WORLD))


def test_the_plan_splits_the_large_tables_inside_blocks_of_draws(built):
    plan = built[0]["plan"]
    assert plan.layouts[:3] == (ROW_WISE,) * 3 and ROW_WISE not in plan.layouts[3:]
    starts = [s.row_start for s in plan.shards if s.table < 3 and s.row_start > 0]
    assert starts and all(start % BLOCK_ROWS for start in starts)  # each a partial block on both ranks


def test_each_shard_holds_the_unsharded_builds_rows(built):
    for rank, got in enumerate(built):
        assert got["shards_equal"] and all(got["shards_equal"]), f"rank {rank}: {got['shards_equal']}"
        assert got["mlps_equal"], f"rank {rank}: the MLPs differ from the unsharded build's"
        assert got["momentum_zero"], rank


def test_a_rank_allocates_only_its_shards(built):
    full = built[0]["full_table_bytes"]
    for rank, got in enumerate(built):
        assert got["table_bytes"] == got["plan"].rank_bytes()[rank], rank
        assert got["table_bytes"] < 0.6 * full, (rank, got["table_bytes"], full)
        small = 2**16  # the other buffers: table offsets, the routing tables, the hash's table sizes
        assert got["model_bytes"] <= got["table_bytes"] + got["dense_bytes"] + small, rank
        block = BLOCK_ROWS * D * 4  # one block of fp32 draws
        bound = got["table_bytes"] + block + got["dense_bytes"] + small
        assert got["peak"] <= bound, f"rank {rank}: peak {got['peak']:,} bytes > {bound:,}"
        assert got["peak"] < 0.7 * full and got["largest"] <= got["table_bytes"], rank
        assert got["unsharded_peak"] >= full, "the meter must see the full tables of an unsharded build"
