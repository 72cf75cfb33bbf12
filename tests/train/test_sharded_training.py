"""``--shard-tables`` in the training loop: the sharded step trains what one process trains on the global
batch, and its checkpoint (full tables, gathered) resumes at another world size.

Two gloo ranks train two steps with the tables sharded (some row-wise); one process with the whole tables
trains the same steps on both ranks' batches: losses and weights agree to float rounding (each rank built only
its shards, drawn from the same seed: tests/train/test_sharded_build.py). The sharded checkpoint then resumes
at one rank (unsharded) and at two (sharded) without further steps: the re-written checkpoint holds exactly
the saved tables and Adagrad state, and the holdout metrics over the same rows agree.
"""

from __future__ import annotations

import shutil
from dataclasses import replace

import pytest
import torch
from ranks import ranks_device

from lecture_code import data as criteo
from lecture_code.training import TrainConfig, build, make_train_step, read_checkpoint, train
from lecture_code.training.launch import train_processes
from lecture_code.training.train import check_config

STEPS = 2
# fp32: the same sums, some in another order (the pooled rows come back through the owners); the losses and
# tables agree near 1e-7 relative. The MLP weights get a looser bound: Adagrad's first step divides each
# gradient by its own magnitude (+ eps = 1e-8), so a rounding difference in a gradient near 1e-8 moves its
# weight by up to ~lr·1e-3 (3e-6 seen in 2 of 47k weights on a CPU, 2e-5 in 1 on two H100s). A missed 1/W
# or a lost table update: ~1e-2.
TOL = dict(rtol=1e-5, atol=1e-6)
WEIGHT_TOL = dict(rtol=1e-4, atol=1e-4)


def _config(data, run_dir, **overrides) -> TrainConfig:
    base = dict(
        data_dir=str(data), run_dir=str(run_dir), steps=STEPS, batch_size=64, holdout_fraction=0.005,
        log_every=1, checkpoint_every=0, progress=False, device="cpu", backend="fused",
        optimizer="rowwise_adagrad", lr=0.05, shard_tables=True,
        row_wise_above_mb=0.002,  # the tables above 2 KiB split by rows over every rank
    )  # fmt: skip
    return TrainConfig(**{**base, **overrides})


@pytest.fixture(scope="module")
def sharded_at_two(tiny_data, tmp_path_factory):
    device = ranks_device(2)  # CPU ranks (gloo) without a GPU, one GPU each (NCCL) on a GPU machine
    cfg = _config(tiny_data, tmp_path_factory.mktemp("sharded") / "run", device=device)
    results = train_processes(cfg, 2)
    return cfg, results, read_checkpoint(cfg.run_dir + "/checkpoint.pt", map_location="cpu")


def _assert_same_tables(got: dict, want: dict, **tol) -> None:
    """Equal model and table-optimizer state: exactly, or within ``tol`` (the MLPs within WEIGHT_TOL)."""
    assert got["model"].keys() == want["model"].keys()
    for key, value in want["model"].items():
        if tol:
            close = tol if "sparse_arch" in key else WEIGHT_TOL
            torch.testing.assert_close(got["model"][key], value, **close, msg=lambda m, k=key: f"{k}: {m}")
        else:
            assert torch.equal(got["model"][key], value), key
    for f, saved in want["embedding_optimizer"]["state"].items():
        moment = got["embedding_optimizer"]["state"][f]["momentum"]
        if tol:
            torch.testing.assert_close(moment, saved["momentum"], **tol)
        else:
            assert torch.equal(moment, saved["momentum"]), f"momentum of table {f}"


def _global_batches(cfg: TrainConfig, world_size: int):
    """The batches ``world_size`` ranks train on, step by step, concatenated in rank order."""
    shards = [
        criteo.load_shard(cfg.data_dir, cfg.holdout_fraction, cfg.seed, r, world_size)
        for r in range(world_size)
    ]
    for step in range(cfg.steps):
        parts = [
            next(criteo.iter_batches(s.train, cfg.batch_size, seed=cfg.seed, start_batch=step))
            for s in shards
        ]
        yield criteo.Batch(*(torch.cat(columns) for columns in zip(*parts, strict=True)))


@pytest.mark.slow
def test_sharded_training_equals_one_process_over_the_global_batch(sharded_at_two):
    """Two ranks with sharded tables train what one process with the whole tables trains on both ranks'
    batches (the replicated data-parallel step equals the same, tests/train/test_fused_data_parallel.py)."""
    cfg, results, sharded = sharded_at_two
    _, _, model, optimizers, _ = build(replace(cfg, shard_tables=False))  # one process, the unsharded model
    step = make_train_step(model, [o for o in optimizers if o is not None])
    losses = [float(step(batch.to(next(model.parameters()).device))) for batch in _global_batches(cfg, 2)]
    torch.testing.assert_close(torch.tensor(results[0].losses), torch.tensor(losses), **TOL)
    for key, value in model.state_dict().items():
        close = TOL if "sparse_arch" in key else WEIGHT_TOL
        torch.testing.assert_close(
            sharded["model"][key], value.cpu(), **close, msg=lambda m, k=key: f"{k}: {m}"
        )
    moments = [s["momentum"] for s in sharded["embedding_optimizer"]["state"].values()]
    assert any(float(m.abs().sum()) > 0 for m in moments)  # the tables' Adagrad state was updated


# Resumed in this process (world size 1): the gathered tables load unsharded. Resharding onto 3 ranks is
# tested without the training loop, where it costs one group of processes less (test_sharded_embedding.py).
@pytest.mark.slow
def test_a_checkpoint_saved_at_two_ranks_resumes_at_one(sharded_at_two, tmp_path):
    cfg, results, saved = sharded_at_two
    run_dir = tmp_path / "resume"
    run_dir.mkdir()
    shutil.copy(cfg.run_dir + "/checkpoint.pt", run_dir / "checkpoint.pt")
    resumed_cfg = replace(cfg, run_dir=str(run_dir), resume=True)  # steps == the saved step: no step
    resumed = train(resumed_cfg, log=lambda m: None)
    _assert_same_tables(read_checkpoint(run_dir / "checkpoint.pt", map_location="cpu"), saved)
    for key in ("logloss", "auc"):  # the same weights over the same holdout rows, split another way
        assert resumed.final[key] == pytest.approx(results[0].final[key], rel=1e-5), key


@pytest.mark.slow
def test_a_checkpoint_saved_at_two_ranks_resumes_sharded(sharded_at_two, tmp_path):
    """The loop builds each rank's shards, then loads its rows of the checkpoint's full tables into them."""
    cfg, _, saved = sharded_at_two
    run_dir = tmp_path / "resume_sharded"
    run_dir.mkdir()
    shutil.copy(cfg.run_dir + "/checkpoint.pt", run_dir / "checkpoint.pt")
    train_processes(replace(cfg, run_dir=str(run_dir), resume=True), 2)  # no step: the saved step
    _assert_same_tables(read_checkpoint(run_dir / "checkpoint.pt", map_location="cpu"), saved)


def test_shard_tables_needs_the_fused_backend():
    with pytest.raises(ValueError, match="--shard-tables .* got --backend eager: pass --backend fused"):
        check_config(TrainConfig(backend="eager", shard_tables=True), world_size=2)


def test_fused_tables_that_outgrow_a_gpu_are_sharded_without_the_flag(monkeypatch):
    from lecture_code.training import sharded_training
    from lecture_code.training.train import _outgrow_one_gpu

    sizes, cpu = (1000, 24), torch.device("cpu")
    small = TrainConfig(backend="fused", optimizer="rowwise_adagrad", preset="small")  # D = 16
    need = (1000 + 24) * (4 * 16 + 4)  # fp32 rows + Adagrad's one float per row
    assert not _outgrow_one_gpu(small, sizes, cpu)  # CPU ranks: no budget (rank_budget is None)
    monkeypatch.setattr(sharded_training, "rank_budget", lambda device: need)
    assert not _outgrow_one_gpu(small, sizes, cpu)  # exactly fits
    monkeypatch.setattr(sharded_training, "rank_budget", lambda device: need - 1)
    assert _outgrow_one_gpu(small, sizes, cpu)
    assert not _outgrow_one_gpu(replace(small, backend="eager"), sizes, cpu)  # only the fused tables shard
    with pytest.raises(ValueError, match="outgrow one GPU .* drop --cuda-graph"):
        _outgrow_one_gpu(replace(small, cuda_graph=True), sizes, cpu)
