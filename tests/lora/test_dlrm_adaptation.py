"""The case study, small: a DLRM trained on day 0 adapts to the shifted day with LoRA alone; the fused and
eager backends train the same adapters; the report lists the kernel each layer takes."""

from __future__ import annotations

import copy

import pytest
import torch

from kernels import runtime
from lecture_code.data import synthetic, train_holdout_split
from lecture_code.data.shifted_day import shifted_day
from lecture_code.lora import lora_modules, parameter_counts
from lecture_code.lora.dlrm_adaptation import AdaptationConfig, adapt, fused_paths, holdout_auc, pretrain
from lecture_code.model import DLRM, DLRMConfig

CFG = AdaptationConfig(pretrain_steps=150, batch_size=256, finetune_steps=40, finetune_batch_size=256)


@pytest.fixture(scope="module")
def setting():
    """A small DLRM (modulus hashing: no vocabulary) pretrained on day 0, and the shifted day's splits."""
    torch.manual_seed(0)
    day0 = shifted_day(12_000, seed=0, dense_weights=synthetic.LABEL_DENSE_WEIGHTS,
                       sparse_amplitudes=synthetic.LABEL_SPARSE_AMPLITUDES)  # fmt: skip
    model = DLRM(DLRMConfig.preset("small", (500,) * 26, hashing="modulus"))
    pretrain(model, day0, CFG)
    day_train, day_holdout = train_holdout_split(shifted_day(10_000, seed=1), 0.3, seed=0)
    return model, day_train, day_holdout


def test_lora_alone_recovers_the_shifted_day(setting):
    model, day_train, day_holdout = setting
    before = holdout_auc(model, day_holdout)
    weights = {k: v.clone() for k, v in model.state_dict().items()}
    adapted, seconds = adapt(model, day_train, CFG, "eager")
    after = holdout_auc(adapted, day_holdout)
    assert after > before + 0.05, (before, after)
    assert len(seconds) == CFG.finetune_steps
    assert all(torch.equal(model.state_dict()[k], v) for k, v in weights.items())  # adapt works on a copy
    counts = parameter_counts(adapted)
    assert counts.trainable == sum(
        m.lora_a.numel() + m.lora_b.numel() for m in lora_modules(adapted).values()
    )
    assert list(lora_modules(adapted)) == [
        f"{arch}.model.{i}" for arch in ("dense_arch", "over_arch") for i in (0, 2, 4)
    ]


@pytest.mark.filterwarnings("ignore:lora_linear. general path:RuntimeWarning")
def test_fused_and_eager_train_the_same_adapters(setting):
    model, day_train, _ = setting
    dev = runtime.default_device()  # the fused backend runs where the kernels run
    model, day_train = copy.deepcopy(model).to(dev), day_train.to(dev)
    cfg = AdaptationConfig(finetune_steps=2, finetune_batch_size=64)
    eager, _ = adapt(model, day_train, cfg, "eager")
    fused, _ = adapt(model, day_train, cfg, "fused")
    assert {m.backend for m in lora_modules(fused).values()} == {"fused"}
    for (name, e), f in zip(lora_modules(eager).items(), lora_modules(fused).values(), strict=True):
        assert not torch.equal(e.lora_b, torch.zeros_like(e.lora_b)), name  # it trained
        torch.testing.assert_close(f.lora_a, e.lora_a, atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(f.lora_b, e.lora_b, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("progress", [True, False])
def test_a_training_loop_shows_its_progress_on_stderr_when_asked(setting, capsys, progress):
    model, day_train, _ = setting
    adapt(
        model,
        day_train,
        AdaptationConfig(finetune_steps=2, finetune_batch_size=64, progress=progress),
        "eager",
    )
    assert ("adapt (eager)" in capsys.readouterr().err) is progress


def test_fused_paths_name_the_general_path_for_odd_widths(setting):
    model, day_train, _ = setting
    adapted, _ = adapt(model, day_train, AdaptationConfig(finetune_steps=0), "eager")
    paths = {row["module"]: row for row in fused_paths(adapted, rows=256)}
    assert (paths["dense_arch.model.0"]["K"], paths["dense_arch.model.0"]["kernel"]) == (13, "v1")
    assert (paths["over_arch.model.0"]["K"], paths["over_arch.model.0"]["kernel"]) == (367, "v1")
    assert (paths["over_arch.model.4"]["N"], paths["over_arch.model.4"]["kernel"]) == (1, "v1")
    assert "K = 13" in paths["dense_arch.model.0"]["why"]
    assert paths["dense_arch.model.2"]["why"] is None and paths["dense_arch.model.2"]["kernel"] in (
        "v2",
        "v3",
    )
    assert holdout_auc(adapted, train_holdout_split(day_train, 0.5)[1]) > 0.5
