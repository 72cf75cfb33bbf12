"""Data-parallel training (torchrun, DDP): shards, one DDP step = one step over the global batch, resume.

The two-rank runs use gloo on the CPU (CI) and NCCL on two GPUs (``gpu``-marked, run on the device machine);
each spawns two processes that find torchrun's environment (:mod:`lecture_code.training.launch`).
"""

from __future__ import annotations

import shutil
from dataclasses import replace

import numpy as np
import pytest
import torch
import torch.distributed as dist

from lecture_code import data as criteo
from lecture_code.training import TrainConfig, build, evaluate, make_train_step, train
from lecture_code.training.distributed import DistInfo, from_environment, rank_device
from lecture_code.training.launch import train_processes
from lecture_code.training.train import check_config

WORLD = 2
STEPS = 6  # two log windows of 3 steps
BATCH = 128  # per rank

# Tolerances: DDP averages the ranks' gradients (sum of two partial means, then / 2) where one process
# reduces all 2·B rows at once; fp32 summation order differs by ~1e-7 relative per step, and Adam divides
# by sqrt(v), so six steps of it leave differences up to 7e-6 in the weights (measured on a CPU). Without
# DDP's all-reduce the weights differ by 3e-2 and the logged losses by 2e-3 (checked), far outside these.
LOSS_TOL = dict(rtol=1e-5, atol=1e-6)
WEIGHT_TOL = dict(rtol=1e-4, atol=5e-5)

two_gpus = pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA GPUs")
DEVICES = ["cpu", pytest.param("cuda", marks=[pytest.mark.gpu, two_gpus])]


def _config(run_dir, device: str, **overrides) -> TrainConfig:
    base = dict(
        run_dir=str(run_dir), steps=STEPS, batch_size=BATCH, log_every=3, checkpoint_every=0,
        progress=False, device=device,
    )  # fmt: skip
    return TrainConfig(**{**base, **overrides})  # data_dir None: the synthetic default


@pytest.fixture(scope="module", params=DEVICES)
def two_rank_run(request, tmp_path_factory):
    """``(config, results of rank 0 and 1)`` of a two-process run of STEPS steps on the synthetic default."""
    criteo.ensure_default_data()  # made once here, not by two ranks at once
    cfg = _config(tmp_path_factory.mktemp("ddp") / "run", request.param)
    return cfg, train_processes(cfg, WORLD)


def _global_batches(cfg: TrainConfig, world_size: int):
    """The batches a world of ``world_size`` ranks trains on, step by step, concatenated in rank order."""
    folder = criteo.ensure_default_data()
    shards = [
        criteo.load_shard(folder, cfg.holdout_fraction, cfg.seed, r, world_size) for r in range(world_size)
    ]
    per_epoch = min(criteo.num_batches(len(s.train), cfg.batch_size) for s in shards)
    for step in range(cfg.steps):
        epoch, start = divmod(step, per_epoch)
        parts = [
            next(criteo.iter_batches(s.train, cfg.batch_size, seed=cfg.seed, epoch=epoch, start_batch=start))
            for s in shards
        ]
        yield criteo.Batch(*(torch.cat(columns) for columns in zip(*parts, strict=True)))


def test_each_rank_reads_a_disjoint_shard_and_together_the_whole_split():
    folder = criteo.ensure_default_data()
    full = criteo.load_tensors(folder)
    train_rows, holdout_rows = criteo.split_indices(len(full), 0.1, seed=0)
    for world_size in (2, 3):
        shards = [criteo.load_shard(folder, 0.1, 0, r, world_size) for r in range(world_size)]
        for kind, expected in (("train", train_rows), ("holdout", holdout_rows)):
            rows = [getattr(s, f"{kind}_rows") for s in shards]
            np.testing.assert_array_equal(np.concatenate(rows), expected)  # union, in order, is the split
            assert sum(len(r) for r in rows) == len(np.unique(np.concatenate(rows)))  # disjoint
            assert max(len(r) for r in rows) - min(len(r) for r in rows) <= 1  # balanced
        for s in shards:
            assert len(s.rows_read) < len(full), s.rows_read  # no rank decodes the whole file
            assert set(s.train_rows) | set(s.holdout_rows) <= set(s.rows_read)
            rows = torch.from_numpy(s.train_rows)  # the tensors are those rows of the file
            for got, want in zip(
                s.train.batch(slice(None)), (full.dense, full.sparse, full.label), strict=True
            ):
                torch.testing.assert_close(got, want[rows], rtol=0, atol=0)
    one = criteo.load_shard(folder, 0.1, 0, 0, 1)  # a world of one: exactly the single-process split
    single_train, _ = criteo.train_holdout_split(full, 0.1, seed=0)
    torch.testing.assert_close(one.train.sparse, single_train.sparse, rtol=0, atol=0)


def test_two_ranks_train_like_one_process_over_the_global_batch(two_rank_run):
    cfg, (rank0, rank1) = two_rank_run
    assert rank0.losses == rank1.losses and rank0.evals == rank1.evals  # every rank reports the same

    single = replace(cfg, device="cuda:0" if cfg.device == "cuda" else cfg.device)
    _, holdout, model, optimizers, _ = build(single)  # one process, the whole data
    step = make_train_step(model, list(optimizers))
    losses = torch.stack([step(batch.to(holdout.label.device)) for batch in _global_batches(cfg, WORLD)])
    windows = losses.view(-1, cfg.log_every).mean(dim=1).tolist()
    torch.testing.assert_close(torch.tensor(rank0.losses), torch.tensor(windows), **LOSS_TOL)

    saved = torch.load(rank0.checkpoint, weights_only=True)
    assert saved["step"] == STEPS and saved["config"]["world_size"] == WORLD
    for name, tensor in model.state_dict().items():
        torch.testing.assert_close(saved["model"][name].cpu(), tensor.cpu(), **WEIGHT_TOL, msg=name)

    # holdout metrics over ALL holdout rows (gathered from both ranks), not an average of per-rank numbers
    batches = criteo.iter_batches(holdout, cfg.batch_size, drop_last=False, shuffle=False)
    expected = evaluate(model, batches)
    got = rank0.final
    assert got["examples"] == len(holdout) == 20_000
    for key in ("logloss", "auc", "baseline_logloss"):
        assert got[key] == pytest.approx(expected[key], rel=1e-4), key


def test_checkpoint_of_two_ranks_resumes_in_one_process(two_rank_run, tmp_path):
    cfg, (rank0, _) = two_rank_run
    run_dir = tmp_path / "resumed"
    run_dir.mkdir()
    shutil.copy(rank0.checkpoint, run_dir / "checkpoint.pt")
    device = "cuda:0" if cfg.device == "cuda" else cfg.device
    one = replace(cfg, run_dir=str(run_dir), device=device, resume=True)

    messages = []
    same = train(one, log=messages.append)  # at the checkpoint's step already: nothing to train
    assert not dist.is_initialized()  # one process: no process group was made
    assert f"resumed from {run_dir / 'checkpoint.pt'} at step {STEPS}" in messages
    assert any("written at world size 2, this run has 1" in m for m in messages), messages
    for key in ("logloss", "auc", "examples"):  # one process, all holdout rows, the same weights
        assert same.final[key] == pytest.approx(rank0.final[key], rel=1e-5), key

    more = train(replace(one, steps=STEPS + 2), log=messages.append)
    state = torch.load(more.checkpoint, weights_only=True)
    before = torch.load(rank0.checkpoint, weights_only=True)
    assert state["step"] == STEPS + 2 and state["config"]["world_size"] == 1
    adam_steps = {float(s["step"]) for s in state["optimizer"]["state"].values()}
    assert adam_steps == {STEPS + 2.0}  # the optimizer state went on from the checkpoint's, not from zero
    mlps = [k for k in state["model"] if k.startswith(("dense_arch.", "over_arch."))]
    assert mlps and all(not torch.equal(state["model"][k], before["model"][k]) for k in mlps)  # it trained on


def test_a_graph_step_under_torchrun_needs_the_fused_backend_and_replicated_tables(tmp_path):
    eager = _config(tmp_path, "cpu", cuda_graph=True, backend="eager", optimizer="sgd")
    check_config(eager, world_size=1)  # one process: fine
    with pytest.raises(ValueError, match="--cuda-graph under torchrun .* needs --backend fused, got 'eager'"):
        check_config(eager, world_size=2)
    fused = replace(eager, backend="fused")
    check_config(fused, world_size=2)  # the data-parallel fused step, captured
    with pytest.raises(ValueError, match="--cuda-graph with --shard-tables under torchrun"):
        check_config(replace(fused, shard_tables=True), world_size=2)
    check_config(replace(fused, shard_tables=True, cuda_graph=False), world_size=2)


def test_torchrun_environment_and_devices(monkeypatch):
    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    assert from_environment() == DistInfo() and not DistInfo().enabled  # no torchrun: a single process
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert from_environment() == DistInfo()  # --nproc-per-node 1: no process group either
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("LOCAL_RANK", "1")
    info = from_environment()
    assert (info.rank, info.world_size, info.local_rank, info.enabled, info.is_main) == (3, 4, 1, True, False)
    assert rank_device(info, "cpu") == torch.device("cpu")
    with pytest.raises(ValueError, match="cuda:LOCAL_RANK"):
        rank_device(info, "cuda:1")
    monkeypatch.setenv("RANK", "7")
    with pytest.raises(ValueError, match="outside WORLD_SIZE"):
        from_environment()
