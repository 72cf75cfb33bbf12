"""``N`` local processes started the way ``torchrun`` starts them, from Python: for tests and benchmarks.

For training from a shell use ``torchrun`` itself (:mod:`.distributed`). A test or a benchmark wants each
rank's return value back in the calling process, which a command line does not give; so :func:`spawn` starts
``world_size`` processes with :func:`torch.multiprocessing.start_processes` (:data:`START_METHOD`), sets in
each the variables ``torchrun`` sets (``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``,
``MASTER_ADDR``, ``MASTER_PORT``) and calls ``fn(*args)`` there, which then sees exactly what it would see
under ``torchrun``. Return values come back through files (``torch.save``); a rank that raises makes
:func:`spawn` raise (the others are stopped). ``fn`` must be importable by name (a module-level function).

    results = train_processes(TrainConfig(device="cpu", steps=20), world_size=2)   # one TrainResult per rank
"""

from __future__ import annotations

import os
import socket
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.multiprocessing as mp

__all__ = ["free_port", "spawn", "train_processes"]


# Without a GPU, "forkserver": one server process per caller imports torch and this package once, and each
# rank is forked from it, so a test or benchmark that starts several groups of ranks pays the imports once
# (about 5 s per rank on a 2-core CPU), where "spawn" pays them in every rank: the multi-process tests took
# half the time here. The server forks before any OpenMP thread exists in it. Its environment is the caller's
# when it started (the first call): variables set later do not reach the ranks. With a GPU, "spawn": the
# server's import of kernels asks CUDA for its devices, and CUDA may not be used in a process forked after.
START_METHOD = os.environ.get("LECTURE_START_METHOD", "spawn" if torch.cuda.is_available() else "forkserver")
mp.get_context("forkserver").set_forkserver_preload(["torch", "kernels", "lecture_code.training.train"])


def free_port() -> int:
    """A TCP port free on this machine now (for ``MASTER_PORT``)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_main(rank: int, world_size: int, port: int, out_dir: str, fn: Callable, args: tuple) -> None:
    env = {"RANK": rank, "LOCAL_RANK": rank, "WORLD_SIZE": world_size, "LOCAL_WORLD_SIZE": world_size}
    os.environ.update({k: str(v) for k, v in env.items()})
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    # torchrun's default (OMP_NUM_THREADS=1 for several processes), but sharing this process's threads (the
    # cores, or OMP_NUM_THREADS where the caller set it) instead of one
    torch.set_num_threads(max(1, torch.get_num_threads() // world_size))
    torch.save(fn(*args), Path(out_dir) / f"rank{rank}.pt")


def spawn(fn: Callable[..., Any], world_size: int, *args: Any) -> list[Any]:
    """Run ``fn(*args)`` in ``world_size`` new processes with torchrun's environment; the return values,
    in rank order (``world_size = 1``: one process without a process group, as ``--nproc-per-node 1``)."""
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    with tempfile.TemporaryDirectory(prefix="spawn") as out_dir:
        args = (world_size, free_port(), out_dir, fn, args)
        mp.start_processes(_rank_main, args=args, nprocs=world_size, start_method=START_METHOD)
        return [torch.load(Path(out_dir) / f"rank{r}.pt", weights_only=False) for r in range(world_size)]


def _train(cfg) -> Any:
    from lecture_code.training.train import train

    return train(cfg, log=lambda message: None)


def train_processes(cfg, world_size: int) -> list:
    """:func:`lecture_code.training.train` of ``cfg`` on ``world_size`` local ranks: each rank's
    :class:`~lecture_code.training.train.TrainResult` (rank 0 alone wrote the run folder)."""
    return spawn(_train, world_size, cfg)
