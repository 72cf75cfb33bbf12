"""The fused DLRM step data-parallel (lecture_code.training.data_parallel): W ranks, each with its slice of
the global batch, train the model one process trains on the whole global batch; the replicas stay bitwise
equal.

Without a GPU: gloo, 2 and 3 processes (Triton's interpreter runs the kernels); on a GPU machine the same
tests take one GPU per rank (NCCL).
"""

from __future__ import annotations

import pytest
import torch
from ranks import ranks_device

from lecture_code.data import Batch
from lecture_code.model import DLRM, DLRMConfig
from lecture_code.perf.dlrm_step import make_batches
from lecture_code.training import distributed, make_optimizers, make_train_step
from lecture_code.training.data_parallel import make_fused_data_parallel
from lecture_code.training.launch import spawn

CONFIG = DLRMConfig((6, 40, 3, 200), hashing="modulus", dense_arch_layer_sizes=(8, 16),
                    over_arch_layer_sizes=(16, 1))  # fmt: skip
PER_RANK, STEPS, LR = 8, 3, 0.05
# fp32: the ranks' row sums and MLP gradients add the same terms as one process in another order (and 1/3
# rounds); three steps of SGD/Adagrad keep the difference near 1e-7 relative. Without the exchange (each rank
# updating with its own rows) the tables differ by ~1e-2: far outside.
TOL = dict(rtol=1e-5, atol=1e-6)


def _train(world: int, optimizer: str, device: str, exchange: bool = True):
    """In each rank (or the one process when world is 1): STEPS steps over this rank's slice of each global
    batch; returns (losses, state_dict on the CPU, the device type trained on)."""
    info = distributed.from_environment()
    dev = distributed.rank_device(info, device)
    batches = make_batches(CONFIG, PER_RANK * world, STEPS, torch.device("cpu"), ids="zipf", seed=3)
    with distributed.process_group(info, dev):
        torch.manual_seed(info.rank)  # different draws per rank: the broadcast must make them equal
        with dev:
            model = DLRM(CONFIG, backend="fused", embedding_optimizer=optimizer, embedding_lr=LR)
        after = make_fused_data_parallel(model) if info.enabled and exchange else None
        step_opts = [o for o in make_optimizers(model, optimizer, LR) if o is not None]
        mine = slice(info.rank * PER_RANK, (info.rank + 1) * PER_RANK) if info.enabled else slice(None)
        local = [Batch(*(t[mine] for t in b)).to(dev) for b in batches]
        step = make_train_step(model, step_opts, after_backward=after)
        losses = [float(step(b)) for b in local]
        state = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
        return losses, state, next(model.parameters()).device.type


def _assert_replicas_equal(results):
    for _, state, _ in results[1:]:
        for key, value in state.items():
            assert torch.equal(value, results[0][1][key]), f"replicas differ in {key}"


def _train_and_control(world: int, optimizer: str, device: str, control: bool):
    """:func:`_train` with the exchange, then (``control``) the same run with each rank updating its tables
    from its own rows alone (one group of processes for both: starting one costs more than training). One
    process group for both runs too: a second group on the same port raced the first one's teardown (a rank
    reached the closing store: "Failed to recv" on a 2-core CI machine)."""
    info = distributed.from_environment()
    with distributed.process_group(info, distributed.rank_device(info, device)):  # _train's own: a no-op
        return _train(world, optimizer, device), control and _train(world, optimizer, device, exchange=False)


@pytest.mark.parametrize("world, optimizer, control", [(2, "sgd", True), (3, "rowwise_adagrad", False)])
def test_ranks_train_what_one_process_trains_on_the_global_batch(world, optimizer, control):
    device = ranks_device(world)  # CPU ranks (gloo) without a GPU, one GPU each (NCCL) on a GPU machine
    both = spawn(_train_and_control, world, world, optimizer, device, control)
    results = [r[0] for r in both]
    assert {r[2] for r in results} == {device}
    _assert_replicas_equal(results)
    ref_losses, ref_state, _ = _train(world, optimizer, device)  # one process, no group: rank 0's draws
    rank_mean = torch.tensor([r[0] for r in results]).mean(0)  # equal batches: the global mean loss
    torch.testing.assert_close(rank_mean, torch.tensor(ref_losses), **TOL)
    for key, value in ref_state.items():
        torch.testing.assert_close(results[0][1][key], value, **TOL, msg=lambda m, k=key: f"{k}: {m}")
    if control:  # without the exchange the replicas drift apart, far outside the tolerance
        key = "sparse_arch.embeddings.3.weight"
        assert not torch.allclose(both[0][1][1][key], both[1][1][1][key], **TOL)


def _uncaptured_and_captured(world: int):
    """In each rank: the data-parallel step uncaptured, then replayed from one CUDA graph (row exchange and
    all-reduce captured), from the same start; returns both runs' (losses, state) and the graphs released."""
    from lecture_code.training.graphs import make_graphed_train_step, release_graphs

    info = distributed.from_environment()
    dev = distributed.rank_device(info, "cuda")
    batches = make_batches(CONFIG, PER_RANK * world, STEPS + 1, torch.device("cpu"), ids="zipf", seed=3)
    mine = slice(info.rank * PER_RANK, (info.rank + 1) * PER_RANK)
    local = [Batch(*(t[mine] for t in b)).to(dev) for b in batches]
    runs = []
    with distributed.process_group(info, dev):
        for captured in (False, True):
            torch.manual_seed(0)
            with dev:
                model = DLRM(CONFIG, backend="fused", embedding_optimizer="sgd", embedding_lr=LR)
            after = make_fused_data_parallel(model)
            opts = [o for o in make_optimizers(model, "sgd", LR) if o is not None]
            if captured:
                step = make_graphed_train_step(model, opts, local[0], after_backward=after)
            else:
                step = make_train_step(model, opts, after_backward=after)
            losses = [float(step(b)) for b in local[1:]]
            runs.append((losses, {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}))
        released = release_graphs()  # what process_group's exit does; here to count them
    return runs, released


@pytest.mark.gpu
def test_the_captured_data_parallel_step_equals_the_uncaptured_one_and_the_ranks_exit():
    """NCCL on 2 GPUs. That ``spawn`` returns at all is part of the test: a graph that still holds captured
    collectives keeps ``destroy_process_group`` from returning (lecture_code.training.graphs)."""
    world = 2
    if ranks_device(world) != "cuda":
        pytest.skip("collectives are captured in CUDA graphs on GPUs only (gloo cannot be captured)")
    results = spawn(_uncaptured_and_captured, world, world)
    for (eager, graphed), released in results:
        assert released == 1
        assert graphed[0] == eager[0]  # losses, bitwise
        for key, value in eager[1].items():
            assert torch.equal(graphed[1][key], value), f"captured step differs in {key}"
    _assert_replicas_equal([(None, r[0][1][1], None) for r in results])
