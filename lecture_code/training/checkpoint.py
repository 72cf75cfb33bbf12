"""Checkpoints that let training resume exactly where it stopped.

A checkpoint holds the model and optimizer state, the step counter, the training config it was made with,
and the RNG states. Data order is a pure function of (seed, epoch), so the step counter alone says which
batch comes next. Files are written atomically (temp file, then rename): an interrupted save never leaves a
half-written checkpoint in place of a good one.

Loading never runs code from the file: ``torch.load(weights_only=True)``, whose unpickler rebuilds tensors,
numbers, strings and containers of them and refuses every other object. A checkpoint holds nothing else (the
config's paths are saved as strings), so no extra type is allowed; a file that names any other object (a
downloaded run folder whose ``checkpoint.pt`` calls ``os.system`` while it is unpickled) is refused with an
:class:`UnsafeCheckpointError` before anything it names is called.
"""

from __future__ import annotations

import os
import pickle
import re
import tempfile
from pathlib import Path
from typing import Any

import torch


class UnsafeCheckpointError(pickle.UnpicklingError):
    """A checkpoint file that holds more than tensors and plain containers: refused, nothing in it was run."""


def save_checkpoint(
    path: str | Path, *, model, optimizer, step: int, config: dict[str, Any], embedding_optimizer=None,
    model_state: dict | None = None,
) -> Path:  # fmt: skip
    """``embedding_optimizer``: the tables' optimizer state (a dict), kept apart from the dense optimizer's
    so that both move between backends (:mod:`lecture_code.training.optimizers`). ``model_state``: written
    instead of ``model.state_dict()`` (a sharded model's tables gathered, :mod:`.sharded_training`)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    state = {
        "model": model.state_dict() if model_state is None else model_state,
        "optimizer": optimizer.state_dict(),
        "embedding_optimizer": embedding_optimizer,
        "step": step,
        "config": {k: os.fspath(v) if isinstance(v, os.PathLike) else v for k, v in config.items()},
        "rng_cpu": torch.get_rng_state(),
        "rng_cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
    }
    fd, tmp = tempfile.mkstemp(prefix=path.name, suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        torch.save(state, tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return path


def read_checkpoint(path: str | Path, map_location=None) -> dict[str, Any]:
    """The checkpoint dict at ``path``, unpickled with ``weights_only=True`` (tensors and plain containers
    only); :class:`UnsafeCheckpointError` for a file that names any other object (it is never called)."""
    try:
        return torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as err:
        named = re.search(r"GLOBAL ([\w.]+)", str(err))
        what = f"a reference to {named.group(1)}" if named else "an object that is not a tensor or container"
        raise UnsafeCheckpointError(
            f"refused to load the checkpoint {path}: it holds {what}, and unpickling it could run code. "
            "A checkpoint written by lecture_code.training holds only tensors, numbers, strings and "
            "containers of them; this file was not written by it, or was changed since."
        ) from None


def load_checkpoint(path: str | Path, *, model, optimizer=None, map_location=None) -> dict[str, Any]:
    """Restore model (and optimizer, RNG) state in place; returns the checkpoint dict (step, config).
    The file is read by :func:`read_checkpoint`: one that would run code is refused."""
    state = read_checkpoint(path, map_location=map_location)
    model.load_state_dict(state["model"])
    if optimizer is not None:
        optimizer.load_state_dict(state["optimizer"])
    # RNG states are CPU byte tensors whatever map_location moved them to; a checkpoint of several ranks
    # holds one CUDA state per GPU of rank 0's machine, this one may have fewer
    torch.set_rng_state(state["rng_cpu"].cpu())
    if state.get("rng_cuda") is not None and torch.cuda.is_available():
        cuda_states = state["rng_cuda"][: torch.cuda.device_count()]
        torch.cuda.set_rng_state_all([s.cpu() for s in cuda_states])
    return state
