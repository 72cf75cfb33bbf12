"""Training: the loss goes down, beats the constant predictor, and --resume continues exactly."""

from __future__ import annotations

import pytest
import torch

from lecture_code.data import load_metadata
from lecture_code.data.schema import TERABYTE_CARDINALITIES
from lecture_code.profiling.profiler import trace_files
from lecture_code.training import TrainConfig, train
from lecture_code.training.cli import parse_args
from lecture_code.training.train import check_config, table_sizes


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
    a = torch.load(straight.checkpoint, weights_only=True)
    b = torch.load(resumed.checkpoint, weights_only=True)
    assert a["step"] == b["step"] == 30
    for name, tensor in a["model"].items():
        torch.testing.assert_close(b["model"][name], tensor, rtol=0, atol=0, msg=name)
    assert straight.final["logloss"] == resumed.final["logloss"]


def test_resume_without_checkpoint_is_a_clear_error(tiny_data, tmp_path):
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        train(_config(tiny_data, tmp_path / "empty", resume=True))


def test_cli_flags_map_to_config():
    cfg = parse_args(["--preset", "kaggle", "--steps", "7", "--compile", "--profile", "--device", "cpu"])
    got = (cfg.preset, cfg.steps, cfg.backend, cfg.profile, cfg.device)
    assert got == ("kaggle", 7, "compile", True, "cpu")
    cfg = parse_args(["--backend", "fused", "--optimizer", "rowwise_adagrad", "--cuda-graph"])
    assert (cfg.backend, cfg.optimizer, cfg.cuda_graph) == ("fused", "rowwise_adagrad", True)
    with pytest.raises(SystemExit):
        parse_args(["--preset", "nope"])


def test_the_1tb_tables_flag_gives_criteos_rows_and_needs_the_modulus_hash(tiny_data):
    cfg = parse_args(
        ["--preset", "terabyte", "--tables", "terabyte", "--hashing", "modulus", "--no-checkpoint"]
    )
    assert (cfg.preset, cfg.tables, cfg.hashing, cfg.checkpoint) == ("terabyte", "terabyte", "modulus", False)
    sizes = table_sizes(cfg, load_metadata(tiny_data, vocabularies=False))
    assert sizes == tuple(c + 1 for c in TERABYTE_CARDINALITIES) and sum(sizes) == 177_944_301
    data_sizes = table_sizes(TrainConfig(), load_metadata(tiny_data, vocabularies=False))
    assert data_sizes == load_metadata(tiny_data, vocabularies=False).num_embeddings_per_feature
    with pytest.raises(
        ValueError, match="--tables terabyte.*pass --hashing modulus, got --hashing vocabulary"
    ):
        check_config(TrainConfig(tables="terabyte"))
    with pytest.raises(ValueError, match="tables must be one of"):
        check_config(TrainConfig(tables="huge", hashing="modulus"))


def test_no_checkpoint_writes_none(tiny_data, tmp_path):
    result = train(_config(tiny_data, tmp_path, steps=3, checkpoint_every=1, checkpoint=False))
    assert result.checkpoint is None and not (tmp_path / "checkpoint.pt").exists()
    assert len(result.evals) == 1  # the final evaluation still runs


def test_profile_writes_a_trace(tiny_data, tmp_path):
    train(_config(tiny_data, tmp_path, steps=6, profile=True))
    traces = trace_files(tmp_path / "profile")
    assert traces and traces[0].stat().st_size > 1000


def test_progress_messages_go_to_the_log_callable(tiny_data, tmp_path):
    messages = []
    result = train(_config(tiny_data, tmp_path, steps=5), log=messages.append)
    logloss, baseline, auc = (result.final[k] for k in ("logloss", "baseline_logloss", "auc"))
    expected = f"step 5: holdout logloss {logloss:.4f} (constant predictor {baseline:.4f}), AUC {auc:.4f}"
    assert messages == [expected]


def test_inside_a_notebook_messages_are_plain_stdout_lines(tiny_data, tmp_path, monkeypatch, capfd):
    """In a Jupyter kernel stderr shows in a red box and loguru may colour it: plain stdout lines instead."""
    from lecture_code.training import logs

    assert not logs.in_jupyter_kernel()  # pytest is not a kernel: loguru, as in a terminal
    assert logs.default_log() == logs.logger.info
    monkeypatch.setattr(logs, "in_jupyter_kernel", lambda: True)
    assert logs.default_log() is logs.stdout_log
    train(_config(tiny_data, tmp_path, steps=5))
    out, err = capfd.readouterr()
    assert out.startswith("step 5: holdout logloss ") and out.count("\n") == 1
    assert "\x1b[" not in out and err == ""  # no colour codes, nothing on stderr
