"""The QLoRA notebook's fine-tuning run (lecture_code.lora.qlora_adaptation) at tiny sizes: pretraining learns
the task; adapters over the bf16 base and over its NF4 copy start from the same A and both learn the shift;
only the adapters train; the NF4 run's frozen weights take under a third of the bytes."""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F

import kernels
from lecture_code.lora.layer import LoRALinear
from lecture_code.lora.qlora_adaptation import adapt, frozen_weight_bytes, pretrain, tasks
from lecture_code.lora.qlora_layer import QLoRALinear

DEVICE = kernels.default_device()
WIDTH, BATCH = 64, 32


def _mse(model, task, dtype=torch.float32):  # on one fixed batch, not one the runs trained on
    x = torch.randn(256, WIDTH, device=DEVICE, generator=torch.Generator(device=DEVICE).manual_seed(9))
    with torch.no_grad():
        return F.mse_loss(model(x.to(dtype)).float(), task(x)).item()


def test_pretraining_learns_and_both_adaptations_learn_the_shift():
    teacher, shifted = tasks(WIDTH, DEVICE)
    untrained = _mse(pretrain(teacher, WIDTH, BATCH, 0, DEVICE), teacher)
    student = pretrain(teacher, WIDTH, BATCH, 150, DEVICE)
    learned = _mse(student, teacher)
    assert learned < 0.5 * untrained and learned < 0.5 * _mse(student, shifted)  # the task, not the shift
    before = _mse(copy.deepcopy(student).to(torch.bfloat16), shifted, torch.bfloat16)
    wraps = {  # the eager QLoRA path: the fused one is tested in tests/qlora, and is slow in the interpreter
        "lora": lambda lin: LoRALinear(lin, 4, alpha=8),
        "qlora": lambda lin: QLoRALinear(lin, 4, alpha=8, backend="eager"),
    }
    runs = {name: adapt(student, wrap, shifted, WIDTH, BATCH, 40) for name, wrap in wraps.items()}
    for name, run in runs.items():
        assert len(run.losses) == 40
        assert _mse(run.model, shifted, torch.bfloat16) < 0.8 * before, name  # the adapters learned the shift
        trainable = [n for n, p in run.model.named_parameters() if p.requires_grad]
        assert trainable and all(n.endswith(("lora_a", "lora_b")) for n in trainable), trainable
    assert all(torch.equal(a, b) for a, b in zip(runs["lora"].first_a, runs["qlora"].first_a, strict=True))
    bf16, nf4 = (frozen_weight_bytes(runs[n].model) for n in ("lora", "qlora"))
    assert bf16 == 2 * (64 * 64 * 2 + 16 * 64) and nf4 < 0.3 * bf16
