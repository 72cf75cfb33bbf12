"""Sharded tables (lecture_code.training.sharded_embedding) equal the unsharded table-batched embedding.

W processes (gloo on the CPU; one GPU each with NCCL on a GPU machine, tests/ranks.py), each with its own
batch (of a different size per rank) of ``[B, F, L]`` bags; one table row-wise over every rank, the others
table-wise. Against one process holding all tables and stepping over the ranks' batches concatenated: the
pooled outputs, the tables and the row-wise Adagrad state after a few fused steps. Then an out-of-range id on
one rank: every rank raises, naming it.
"""

from __future__ import annotations

import os
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist
from ranks import ranks_device

from kernels.dlrm.embedding_tbe import TableBatchedEmbedding
from lecture_code.model.hashing import BatchedModulusHash
from lecture_code.training.launch import spawn
from lecture_code.training.sharded_embedding import ShardedEmbedding, ShardedSparseArch
from lecture_code.training.sharding_plan import ROW_WISE, TABLE_WISE, plan_sharding

TABLES, D, L, STEPS, LR = (6, 40, 3, 200, 17), 4, 2, 3, 0.1
ROW_WISE_ABOVE = 50 * D * 4  # bytes: the 200-row table goes row-wise, the others whole
# fp32: the ranks' gradient rows reach a row in another order than in one process, and 1/3 rounds; three
# steps keep the difference near 1e-7 relative. A missed update or a wrong route is off by ~1e-1.
TOL = dict(rtol=1e-5, atol=1e-6)


def _batches(world: int):
    """Per step, per rank: ids [4 + rank, F, L] (repeats within and across ranks) and a gradient weight."""
    gen = torch.Generator().manual_seed(5)
    steps = []
    for _ in range(STEPS):
        ranks = []
        for r in range(world):
            B = 4 + r
            ids = torch.stack([torch.randint(0, min(n, 8), (B, L), generator=gen) for n in TABLES], dim=1)
            ids[:, 3] = torch.randint(0, TABLES[3], (B, L), generator=gen)  # the row-wise table: all blocks
            ranks.append((ids, torch.randn(B, len(TABLES), D, generator=gen)))
        steps.append(ranks)
    return steps


def _other_tables() -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(9)
    return [torch.randn(n, D, generator=gen) for n in TABLES]


def _full_tables(optimizer: str, device) -> TableBatchedEmbedding:
    torch.manual_seed(0)
    return TableBatchedEmbedding(TABLES, D, optimizer=optimizer, lr=LR).to(device)


def _on_cpu(gathered):
    """``gather_tables``' ``(tables, moments or None)`` (rank 0) or ``None``, copied to the CPU."""
    if gathered is None:
        return None
    tables, moments = gathered
    return [t.cpu() for t in tables], moments and [m.cpu() for m in moments]


def _rank(world: int, optimizer: str, device: str):
    rank = int(os.environ["RANK"])
    dev = torch.device("cuda", rank) if device == "cuda" else torch.device("cpu")
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    backend = "nccl" if dev.type == "cuda" else "gloo"
    dist.init_process_group(backend, timeout=timedelta(seconds=30))  # a hang fails instead of waiting
    try:
        plan = plan_sharding(TABLES, D, world, row_wise_above_bytes=ROW_WISE_ABOVE)
        with dev:
            sharded = ShardedEmbedding(plan, optimizer=optimizer, lr=LR)
        full = _full_tables(optimizer, dev)
        sharded.load_tables(full.embedding_weights())
        outs = []
        for ranks in _batches(world):
            ids, weight = (t.to(dev) for t in ranks[rank])
            out = sharded(ids)
            outs.append(out.detach().cpu())
            (out * weight).sum().backward()  # the owners' rows are updated here
        gathered = _on_cpu(sharded.gather_tables(dst=0))
        # an unsharded state (a checkpoint's keys) loaded into the sharded sparse arch: each rank its rows
        with dev:
            arch = ShardedSparseArch(plan, BatchedModulusHash(TABLES), optimizer=optimizer, lr=LR)
        arch.load_state_dict({f"embeddings.{f}.weight": t.to(dev) for f, t in enumerate(_other_tables())})
        reloaded = _on_cpu(arch.gather_tables(dst=0))
        bad = _batches(world)[0][rank][0].to(dev)
        if rank == 1:
            bad[2, 2, 1] = TABLES[2]  # one past the end of table 2
        try:
            sharded(bad)
            error = None
        except IndexError as err:
            error = str(err)
        return outs, gathered, error, reloaded
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module", params=[(2, "sgd"), (3, "rowwise_adagrad")], ids=["2-sgd", "3-adagrad"])
def sharded_run(request):
    world, optimizer = request.param
    device = ranks_device(world)
    return world, optimizer, device, spawn(_rank, world, world, optimizer, device)


def test_the_plan_mixes_both_layouts():
    plan = plan_sharding(TABLES, D, 3, row_wise_above_bytes=ROW_WISE_ABOVE)
    assert plan.layouts == (TABLE_WISE, TABLE_WISE, TABLE_WISE, ROW_WISE, TABLE_WISE)
    assert {s.rank for s in plan.shards if s.table == 3} == {0, 1, 2}


def test_sharded_lookups_and_updates_equal_the_unsharded_tables(sharded_run):
    world, optimizer, device, results = sharded_run
    full = _full_tables(optimizer, device)
    for step, ranks in enumerate(_batches(world)):
        ids = torch.cat([i for i, _ in ranks]).to(device)
        out = full(ids)
        for rank, part in enumerate(out.split([i.shape[0] for i, _ in ranks])):
            torch.testing.assert_close(results[rank][0][step], part.detach().cpu(), **TOL,
                                       msg=lambda m, s=step, r=rank: f"step {s} rank {r}: {m}")  # fmt: skip
        # each rank's loss counts 1/W of the global one (the sharded backward scales by 1/W)
        ((out * torch.cat([w for _, w in ranks]).to(device)).sum() / world).backward()
    tables, moments = results[0][1]
    assert all(r[1] is None for r in results[1:]), "only rank 0 receives the gathered tables"
    for f, (got, want) in enumerate(zip(tables, full.embedding_weights(), strict=True)):
        torch.testing.assert_close(got, want.cpu(), **TOL, msg=lambda m, f=f: f"table {f}: {m}")
    fresh = _full_tables(optimizer, "cpu").embedding_weights()[3]
    assert not torch.allclose(tables[3], fresh), "no update at all"
    if optimizer == "rowwise_adagrad":
        want = torch.split(full.momentum.cpu(), TABLES)
        for f, got in enumerate(moments):
            torch.testing.assert_close(got, want[f], **TOL, msg=lambda m, f=f: f"momentum {f}: {m}")
        assert float(full.momentum.abs().sum()) > 0
    else:
        assert moments is None


def test_an_out_of_range_id_on_one_rank_fails_every_rank_with_the_reason(sharded_run):
    results = sharded_run[-1]
    for rank, (_, _, error, _) in enumerate(results):
        assert error is not None, f"rank {rank} did not raise"
        assert f"rank 1 was given id {TABLES[2]} for feature 2" in error, error
        assert f"table of {TABLES[2]} rows" in error, error


def test_an_unsharded_state_loads_resharded_and_gathers_back_unchanged(sharded_run):
    results = sharded_run[-1]
    tables, _ = results[0][3]
    for f, (got, want) in enumerate(zip(tables, _other_tables(), strict=True)):
        assert torch.equal(got, want), f"table {f}"
