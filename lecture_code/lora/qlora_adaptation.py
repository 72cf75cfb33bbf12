"""A short fine-tuning run on a 4-bit base against the 16-bit base (the QLoRA notebook): do the same adapters,
trained the same way, reach the same loss over an NF4 copy of a base as over the base itself?

Synthetic, small enough for a CPU: a *teacher* MLP (three linear layers, GELU between them) defines a task,
``y = teacher(x)`` for random x; a *student* of the same shape, from another random start, is pretrained on it
with all its weights in fp32 (:func:`pretrain`). The *shifted task* moves each teacher weight by a random
rank-4 update (:func:`tasks`). :func:`adapt` then casts the pretrained student to bf16, wraps its linear
layers (``LoRALinear`` over the bf16 weights, or ``QLoRALinear`` over their NF4 copy), draws the adapters from
one seed (the same A in both runs; B = 0, as PEFT starts) and trains only them (Adam) on the shifted task, on
the same batches. Loss: mean squared error against the targets, in fp32.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from lecture_code.lora.layer import LoRALinear
from lecture_code.lora.qlora_layer import QLoRALinear

__all__ = ["Run", "adapt", "frozen_weight_bytes", "mlp", "pretrain", "tasks"]

LINEARS = (0, 2, 4)  # the linear layers' places in :func:`mlp`'s Sequential


def mlp(width: int, seed: int, device: torch.device | str) -> nn.Sequential:
    """``width → width → width → 16``, GELU between the layers, weights from ``seed``."""
    torch.manual_seed(seed)
    layers = [nn.Linear(width, width), nn.GELU(), nn.Linear(width, width), nn.GELU(), nn.Linear(width, 16)]
    return nn.Sequential(*layers).to(device)


def tasks(width: int, device: torch.device | str) -> tuple[nn.Sequential, nn.Sequential]:
    """``(teacher, shifted)``: the teacher's weights of the usual scale 1/√K, and its copy with each weight
    moved by a random rank-4 update of about half that scale."""
    teacher = mlp(width, 1, device)
    g = torch.Generator(device=device).manual_seed(3)
    with torch.no_grad():
        for i in LINEARS:
            teacher[i].weight.normal_(0, teacher[i].weight.shape[1] ** -0.5, generator=g)
        shifted = copy.deepcopy(teacher)
        for i in LINEARS:
            n, k = shifted[i].weight.shape
            u, v = (
                torch.randn(n, 4, generator=g, device=device),
                torch.randn(4, k, generator=g, device=device),
            )
            shifted[i].weight += 0.5 * (u @ v) / (4 * k) ** 0.5
    return teacher, shifted


def _batches(task: nn.Module, width: int, batch: int, seed: int, device):
    """An endless stream of (x, task(x)), x standard normal ``[batch, width]``, from ``seed``."""
    g = torch.Generator(device=device).manual_seed(seed)
    while True:
        x = torch.randn(batch, width, generator=g, device=device)
        with torch.no_grad():  # closed before the yield: grad mode is per thread, not per generator
            y = task(x)
        yield x, y


def pretrain(
    teacher: nn.Module, width: int, batch: int, steps: int, device, lr: float = 3e-3
) -> nn.Sequential:
    """A student (:func:`mlp`, seed 2) trained on the teacher's task with all its weights, fp32, Adam."""
    student = mlp(width, 2, device)
    opt = torch.optim.Adam(student.parameters(), lr=lr)
    data = _batches(teacher, width, batch, 0, device)
    for _ in range(steps):
        x, y = next(data)
        opt.zero_grad()
        F.mse_loss(student(x), y).backward()
        opt.step()
    return student


@dataclass
class Run:
    """One adaptation: the adapted model, the loss of every step, and each layer's A as drawn."""

    model: nn.Sequential
    losses: list[float]
    first_a: list[torch.Tensor]


def adapt(
    student: nn.Module,
    wrap: Callable[[nn.Linear], nn.Module],
    shifted: nn.Module,
    width: int,
    batch: int,
    steps: int,
    lr: float = 1e-2,
) -> Run:
    """A bf16 copy of ``student`` with ``wrap`` around each linear layer (``wrap(linear)`` returns a
    ``LoRALinear`` or a ``QLoRALinear``), its adapters alone trained on ``shifted`` (module docstring)."""
    model = copy.deepcopy(student).to(torch.bfloat16)
    torch.manual_seed(0)  # the same A in every run
    for i in LINEARS:
        model[i] = wrap(model[i])
    first_a = [model[i].lora_a.detach().clone() for i in LINEARS]
    opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=lr)
    data, losses = _batches(shifted, width, batch, 1, next(model.parameters()).device), []
    for _ in range(steps):
        x, y = next(data)
        loss = F.mse_loss(model(x.bfloat16()).float(), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return Run(model, losses, first_a)


def frozen_weight_bytes(model: nn.Module) -> int:
    """Bytes of the frozen base weights: the 16-bit tensors of ``LoRALinear`` layers, the NF4 buffers of
    ``QLoRALinear`` layers."""
    lora = [m.base.weight for m in model.modules() if isinstance(m, LoRALinear)]
    nf4 = [b for m in model.modules() if isinstance(m, QLoRALinear) for b in m.buffers()]
    return sum(t.numel() * t.element_size() for t in lora + nf4)
