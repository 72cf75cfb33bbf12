"""Host (Python) time of one fused DLRM training step, every Triton launch stubbed out (CPU): the ops called
directly (``kernels.library``'s plain-eager path) against the same step through the ``torch.library`` ops.

The step of ``DLRM(backend="fused")`` with SGD in its backward (the tests' small model, batch 24) on the CPU,
with :class:`kernels.fast_launch.CachedLauncher` and :class:`~kernels.fast_launch.TunedLauncher` made no-ops:
each call still pays its checks, allocations, autograd and dispatch, not a kernel (on a GPU Triton's launcher
adds its own µs per launch, counted in neither row). Then the same loop with ``kernels.library.plain_eager``
forced False, so every op call goes through the dispatcher; the op calls are counted per step.

    python -m benchmarks.probe_dlrm_step_host          # µs per step, direct and through the ops

CPU only (it stubs the launchers process-wide).
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

import kernels  # noqa: F401  (sets TRITON_INTERPRET=1 first on a CPU machine)
from kernels import fast_launch, library
from lecture_code.data import Batch
from lecture_code.model import DLRM, DLRMConfig
from lecture_code.training import make_optimizers, make_train_step

TABLES = (3, 7, 50, 11)


def _step_and_batch(batch: int = 24):
    config = DLRMConfig.preset("small", TABLES, hashing="modulus", over_arch_layer_sizes=(32, 1))
    model = DLRM(config, None, backend="fused", embedding_optimizer="sgd", embedding_lr=0.05)
    rng = np.random.default_rng(0)
    dense = torch.from_numpy(np.log1p(rng.exponential(10.0, size=(batch, 13))).astype(np.float32))
    sparse = torch.from_numpy(rng.integers(-1, 1 << 20, size=(batch, len(TABLES)), dtype=np.int64))
    label = torch.from_numpy(rng.integers(0, 2, size=batch).astype(np.float32))
    return make_train_step(model, make_optimizers(model, "sgd", 0.05)), Batch(dense, sparse, label)


def time_us(step, batch, iters: int, repeats: int) -> float:
    """Median over ``repeats`` of the mean µs per step over ``iters`` steps (after 10 warm-up steps)."""
    for _ in range(10):
        step(batch)
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(iters):
            step(batch)
        samples.append((time.perf_counter() - t0) / iters * 1e6)
    return statistics.median(samples)


def _count_op_calls() -> dict[str, int]:
    """Wrap every registered op's ``torch.library`` op so its calls are counted (by name)."""
    calls: dict[str, int] = {}
    for name, op in library.registered().items():

        def counted(*args, _real=op.op, _name=name, **kwargs):
            calls[_name] = calls.get(_name, 0) + 1
            return _real(*args, **kwargs)

        op.op = counted
    return calls


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--iters", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    if torch.cuda.is_available():
        raise SystemExit("probe_dlrm_step_host: run it on a CPU machine (it stubs every launch)")
    torch.set_num_threads(1)
    fast_launch.CachedLauncher.__call__ = lambda self, *a, **k: None
    fast_launch.TunedLauncher.__call__ = lambda self, *a, **k: None
    step, batch = _step_and_batch()
    calls = _count_op_calls()
    direct = time_us(step, batch, args.iters, args.repeats)
    direct_calls = sum(calls.values())
    calls.clear()
    library.plain_eager = lambda *tensors: False
    via_ops = time_us(step, batch, args.iters, args.repeats)
    per_step = sum(calls.values()) / (10 + args.iters * args.repeats)
    print(
        f"fused DLRM step, launches stubbed, µs per step on this CPU: direct {direct:.0f} ({direct_calls} op "
        f"calls), through the ops {via_ops:.0f} ({per_step:g} op calls per step)"
    )


if __name__ == "__main__":
    main()
