"""The DLRM training workload every experiment times: data, a model per variant, a train step.

``load_workload`` reads a preprocessed Criteo folder (default: the embedded synthetic data), takes the first
``num_batches`` batches of a seeded shuffle and puts them on the device once, so no experiment measures
host → device copies of data it did not ask about. ``make_model`` builds a fresh, identically initialised
DLRM per variant; ``make_step`` is the loop's own step (:func:`~lecture_code.training.make_train_step`);
``profile_training_steps`` records a few of them with :func:`lecture_code.profiling.profiler.step_profiler`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import islice
from pathlib import Path

import torch

from lecture_code import data as criteo
from lecture_code.environment import device as default_device
from lecture_code.model import DLRM, DLRMConfig
from lecture_code.profiling.profiler import step_profiler, trace_files
from lecture_code.profiling.quiet import quiet_profiler
from lecture_code.profiling.trace_analysis import load_trace
from lecture_code.training.step import make_train_step

__all__ = ["Workload", "load_workload", "make_model", "make_step", "profile_training_steps"]


@dataclass
class Workload:
    metadata: object  # lecture_code.data metadata: table sizes and vocabularies
    batches: list  # criteo Batch tuples, already on ``device``
    device: torch.device
    preset: str
    batch_size: int

    def describe(self) -> dict:
        return {"preset": self.preset, "batch_size": self.batch_size, "device_type": self.device.type}


def load_workload(
    data_dir: str | Path | None = None,
    preset: str = "small",
    batch_size: int = 512,
    num_batches: int = 8,
    device: torch.device | str | None = None,
    seed: int = 0,
) -> Workload:
    data_dir = Path(data_dir) if data_dir else criteo.ensure_default_data()
    device = torch.device(device) if device else default_device()
    tensors = criteo.load_tensors(data_dir)
    if criteo.num_batches(len(tensors), batch_size) < 1:
        raise ValueError(f"batch size {batch_size} is larger than the {len(tensors)} rows in {data_dir}")
    batches = [b.to(device) for b in islice(criteo.iter_batches(tensors, batch_size, seed=seed), num_batches)]
    return Workload(criteo.load_metadata(data_dir), batches, device, preset, batch_size)


def make_model(
    workload: Workload, hashing: str = "vocabulary", seed: int = 0, tables: Sequence[int] | None = None
) -> DLRM:
    """A fresh DLRM of the workload's preset, seeded. ``tables`` (rows per table) replaces the data's table
    sizes, e.g. the Kaggle cardinalities; the ids then need a hash that fits any table: ``"modulus"``."""
    torch.manual_seed(seed)
    if tables is None:
        model = DLRM.from_metadata(workload.metadata, preset=workload.preset, hashing=hashing)
    else:
        if hashing != "modulus":
            raise ValueError(f"tables of other sizes than the data's need hashing='modulus', got {hashing!r}")
        model = DLRM(DLRMConfig.preset(workload.preset, tuple(tables), hashing=hashing))
    return model.to(workload.device)


def make_step(model: torch.nn.Module, compile_model: bool = False, lr: float = 1e-3):
    """``step(batch) -> loss``: zero grads, forward + BCE loss, backward, Adam step (the training loop's)."""
    return make_train_step(model, torch.optim.Adam(model.parameters(), lr=lr), compile_model)


def profile_training_steps(
    workload: Workload,
    trace_dir: str | Path,
    read_loss_every_step: bool = False,
    detail: bool = True,
    step=None,
):
    """Profile 3 training steps (after 1 skipped and 1 warm-up step) of ``step`` (default: a fresh model's).

    ``detail``: record shapes, memory and stacks too (:func:`~lecture_code.profiling.step_profiler`).
    Returns ``(profiler, events)``: the profiler for its op tables, the trace's events as a DataFrame
    (:func:`lecture_code.profiling.load_trace`). Older traces in ``trace_dir`` are removed first.
    """
    trace_dir = Path(trace_dir)
    step = step or make_step(make_model(workload))
    for old in trace_files(trace_dir):
        old.unlink()
    with quiet_profiler(), step_profiler(trace_dir, wait=1, warmup=1, active=3, detail=detail) as prof:
        for i in range(5):
            loss = step(workload.batches[i % len(workload.batches)])
            if read_loss_every_step:
                loss.item()
            prof.step()
    return prof, load_trace(trace_files(trace_dir)[-1])
