"""Training: the loss goes down, beats the constant predictor, and --resume continues exactly."""

from __future__ import annotations

import pytest
import torch

from lecture_code import data as criteo
from lecture_code.profiling import trace_files
from lecture_code.train import TrainConfig, parse_args, train


@pytest.fixture(scope="module")
def tiny_data(tmp_path_factory):
    root = tmp_path_factory.mktemp("criteo")
    raw = criteo.generate_criteo_tsv(root / "raw.tsv", 12_000, seed=3)
    out = root / "processed"
    criteo.preprocess(raw, out, frequency_threshold=2, show_progress=False)
    return out


def _config(data_dir, run_dir, **overrides) -> TrainConfig:
    base = dict(
        data_dir=str(data_dir), run_dir=str(run_dir), steps=40, batch_size=128, log_every=5,
        checkpoint_every=0, progress=False, device="cpu",
    )  # fmt: skip
    return TrainConfig(**{**base, **overrides})


def test_loss_decreases_and_beats_constant_predictor(tiny_data, tmp_path):
    result = train(_config(tiny_data, tmp_path, steps=80, lr=2e-3))
    first, last = result.losses[0], sum(result.losses[-3:]) / 3
    assert last < first - 0.02, result.losses
    assert result.final["auc"] > 0.6
    assert result.final["logloss"] < result.final["baseline_logloss"]


@pytest.mark.parametrize("hashing", ["vocabulary", "modulus"])
def test_resume_is_exact(tiny_data, tmp_path, hashing):
    # ~10,800 training rows / 512 = 21 batches per epoch: 30 steps cross an epoch boundary, and 13 does not.
    common = dict(batch_size=512, hashing=hashing)
    straight = train(_config(tiny_data, tmp_path / "a", steps=30, **common))
    train(_config(tiny_data, tmp_path / "b", steps=13, **common))
    resumed = train(_config(tiny_data, tmp_path / "b", steps=30, resume=True, **common))
    a = torch.load(straight.checkpoint, weights_only=False)
    b = torch.load(resumed.checkpoint, weights_only=False)
    assert a["step"] == b["step"] == 30
    for name, tensor in a["model"].items():
        torch.testing.assert_close(b["model"][name], tensor, rtol=0, atol=0, msg=name)
    assert straight.final["logloss"] == resumed.final["logloss"]


def test_resume_without_checkpoint_is_a_clear_error(tiny_data, tmp_path):
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        train(_config(tiny_data, tmp_path / "empty", resume=True))


def test_cli_flags_map_to_config():
    cfg = parse_args(["--preset", "kaggle", "--steps", "7", "--compile", "--profile", "--device", "cpu"])
    assert (cfg.preset, cfg.steps, cfg.compile, cfg.profile, cfg.device) == ("kaggle", 7, True, True, "cpu")
    with pytest.raises(SystemExit):
        parse_args(["--preset", "nope"])


def test_profile_writes_a_trace(tiny_data, tmp_path):
    train(_config(tiny_data, tmp_path, steps=6, profile=True))
    traces = trace_files(tmp_path / "profile")
    assert traces and traces[0].stat().st_size > 1000
