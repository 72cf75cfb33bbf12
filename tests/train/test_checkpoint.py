"""Checkpoints load with ``weights_only=True``: a file that would run code while unpickled is refused."""

from __future__ import annotations

import builtins
from pathlib import Path

import pytest
import torch

from lecture_code.training import (
    TrainConfig,
    UnsafeCheckpointError,
    read_checkpoint,
    save_checkpoint,
    train,
)


class _WritesAMarker:
    """Unpickled, this calls ``exec`` on code that creates ``marker``: what a planted checkpoint could do."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return builtins.exec, (f"open({str(self.marker)!r}, 'w').close()",)


def _planted_checkpoint(path: Path, marker: Path) -> Path:
    """A checkpoint with every key a real one has, and one object that writes ``marker`` when unpickled."""
    torch.save(
        {"model": {}, "optimizer": {}, "step": 1, "config": {}, "payload": _WritesAMarker(marker)}, path
    )
    return path


def test_the_planted_payload_runs_when_loaded_unsafely(tmp_path):
    """The check below means something: this file runs its code under ``weights_only=False``."""
    marker = tmp_path / "marker"
    torch.load(_planted_checkpoint(tmp_path / "planted.pt", marker), weights_only=False)
    assert marker.exists()


def test_a_checkpoint_that_would_run_code_is_refused(tmp_path):
    marker = tmp_path / "marker"
    path = _planted_checkpoint(tmp_path / "checkpoint.pt", marker)
    with pytest.raises(
        UnsafeCheckpointError, match=r"refused to load the checkpoint .*reference to (builtins\.)?exec"
    ):
        read_checkpoint(path)
    assert not marker.exists()


def test_resume_refuses_a_planted_checkpoint(tiny_data, tmp_path):
    """``--resume`` on a downloaded run folder: the error names the file, the payload never runs."""
    marker = tmp_path / "marker"
    run_dir = tmp_path / "downloaded_run"
    run_dir.mkdir()
    _planted_checkpoint(run_dir / "checkpoint.pt", marker)
    cfg = TrainConfig(
        data_dir=str(tiny_data), run_dir=str(run_dir), steps=2, batch_size=128, progress=False, device="cpu",
        resume=True,
    )  # fmt: skip
    with pytest.raises(UnsafeCheckpointError, match="could run code"):
        train(cfg)
    assert not marker.exists()


def test_a_saved_checkpoint_reads_back_with_paths_as_strings(tmp_path):
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.randn(4, 3)).sum().backward()
    optimizer.step()
    config = {"run_dir": tmp_path / "run", "steps": 5}  # a Path would need an allowed global: saved as str
    path = save_checkpoint(
        tmp_path / "checkpoint.pt", model=model, optimizer=optimizer, step=5, config=config
    )
    state = read_checkpoint(path)
    assert state["step"] == 5 and state["config"] == {"run_dir": str(tmp_path / "run"), "steps": 5}
    for name, tensor in model.state_dict().items():
        torch.testing.assert_close(state["model"][name], tensor, rtol=0, atol=0, msg=name)
    assert state["optimizer"]["state"][0]["exp_avg"].shape == (2, 3)
