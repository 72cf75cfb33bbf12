"""Checkpoints that let training resume exactly where it stopped.

A checkpoint holds the model and optimizer state, the step counter, the training config it was made with,
and the RNG states. Data order is a pure function of (seed, epoch), so the step counter alone says which
batch comes next. Files are written atomically (temp file, then rename): an interrupted save never leaves a
half-written checkpoint in place of a good one.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import torch


def save_checkpoint(
    path: str | Path, *, model, optimizer, step: int, config: dict[str, Any], embedding_optimizer=None
) -> Path:
    """``embedding_optimizer``: the tables' optimizer state (a dict), kept apart from the dense optimizer's
    so that both move between backends (:mod:`lecture_code.training.optimizers`)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    state = {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "embedding_optimizer": embedding_optimizer,
        "step": step,
        "config": config,
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


def load_checkpoint(path: str | Path, *, model, optimizer=None, map_location=None) -> dict[str, Any]:
    """Restore model (and optimizer, RNG) state in place; returns the checkpoint dict (step, config)."""
    state = torch.load(path, map_location=map_location, weights_only=False)
    model.load_state_dict(state["model"])
    if optimizer is not None:
        optimizer.load_state_dict(state["optimizer"])
    torch.set_rng_state(state["rng_cpu"])
    if state.get("rng_cuda") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["rng_cuda"])
    return state
