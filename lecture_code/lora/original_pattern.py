"""The original lecture's LoRA on a simple MLP, re-created small, to show what its two mistakes do.

The original (gpu-mode/lectures, ``lecture_018/lora_on_simple_mlp.py``) makes the adapter with
``torch.nn.Parameter(...).to(device)`` and freezes the base with ``<LinearWithLoRA>.linear.requires_grad =
False`` (notebook 07 quotes the lines). Both look right and neither does what it says:

1. ``Parameter.to(device)`` returns the parameter itself only when nothing moves. When it copies (the
   lecture's ``device`` is ``"cuda"``, and the parameter was made on the CPU) it returns the copy: a plain
   tensor, computed from the parameter, *not* an ``nn.Parameter``. Assigned to a module attribute, a plain
   tensor is not registered: ``model.parameters()`` does not list it, the optimizer never updates it, and
   its gradient flows back into the orphaned CPU parameter that nothing holds.
2. ``module.requires_grad = False`` sets an ordinary Python attribute on the module object. It changes no
   parameter: the base weight and bias keep ``requires_grad=True``, and the "frozen" layer trains.

So the adapter never learns and the base does: full fine-tuning with extra steps. Here ``target`` plays the
role of the lecture's ``device``: ``"cuda"`` on a GPU machine as in the original; on a CPU-only machine,
``torch.float64``, because ``.to("cpu")`` would not copy and would hide mistake 1, while a dtype change
copies exactly as a device change does. :func:`compare_after_steps` trains the re-creation and the correct
version (:func:`lecture_code.lora.apply_lora`) side by side and reports what moved.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from lecture_code.lora.apply import apply_lora, lora_modules

__all__ = ["StepReport", "compare_after_steps", "default_target", "mistaken_lora_mlp", "simple_mlp"]


def default_target() -> str | torch.dtype:
    """Where the re-creation's ``.to()`` sends the adapter: ``"cuda"`` if present, else float64 (a copy)."""
    return "cuda" if torch.cuda.is_available() else torch.float64


def simple_mlp(input_size: int = 16) -> nn.Sequential:
    """The lecture's MLP: ``Linear(n, n/2) → ReLU → Linear(n/2, n/4) → Sigmoid``."""
    return nn.Sequential(
        nn.Linear(input_size, input_size // 2),
        nn.ReLU(),
        nn.Linear(input_size // 2, input_size // 4),
        nn.Sigmoid(),
    )


class _MistakenLoRA(nn.Module):
    """The pattern of the original's ``LoRALayer``: A [in, r] and B [r, out] made, then ``.to(target)``."""

    def __init__(self, in_dim: int, out_dim: int, rank: int, alpha: float, target):
        super().__init__()
        self.A = nn.Parameter(torch.randn(in_dim, rank) / math.sqrt(rank)).to(target)  # mistake 1
        self.B = nn.Parameter(torch.zeros(rank, out_dim)).to(target)  # mistake 1
        self.alpha = alpha

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.alpha * (x @ self.A @ self.B)


class _MistakenLinearWithLoRA(nn.Module):
    def __init__(self, linear: nn.Linear, rank: int, alpha: float, target):
        super().__init__()
        self.linear = linear
        self.lora = _MistakenLoRA(linear.in_features, linear.out_features, rank, alpha, target)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x) + self.lora(x)


def mistaken_lora_mlp(target, rank: int = 5, alpha: float = 0.5, input_size: int = 16) -> nn.Sequential:
    """The original's recipe on :func:`simple_mlp`: wrap each ``Linear``, then "freeze" it (mistake 2)."""
    model = simple_mlp(input_size).to(target)
    for i, layer in enumerate(model):
        if isinstance(layer, nn.Linear):
            model[i] = _MistakenLinearWithLoRA(layer, rank, alpha, target)
            model[i].linear.requires_grad = False  # mistake 2: a Python attribute, no parameter changes
    return model


@dataclass
class StepReport:
    """What an optimizer built from ``model.parameters()`` saw and what ``steps`` steps changed."""

    name: str
    rank: int
    scale: float  # what multiplies the branch: the original's alpha; LoRALinear's alpha / r
    optimizer_numel: int  # numbers the optimizer updates
    adapter_registered: bool  # A and B are among model.parameters()
    base_frozen: bool  # every base weight and bias has requires_grad=False
    base_changed: bool
    a_changed: bool
    b_changed: bool


def _train(model: nn.Module, bases, a, b, scale: float, x, y, steps: int, name: str) -> StepReport:
    before = [t.detach().clone() for t in (*bases, a, b)]
    params = list(model.parameters())
    ids = {id(p) for p in params}
    optimizer = torch.optim.SGD(params, lr=0.5)
    for _ in range(steps):
        optimizer.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
    after = [t.detach() for t in (*bases, a, b)]
    changed = [not torch.equal(u, v) for u, v in zip(before, after, strict=True)]
    return StepReport(
        name=name,
        rank=min(a.shape),
        scale=scale,
        optimizer_numel=sum(p.numel() for p in params if p.requires_grad),
        adapter_registered=id(a) in ids and id(b) in ids,
        base_frozen=not any(t.requires_grad for t in bases),
        base_changed=any(changed[: len(bases)]),
        a_changed=changed[-2],
        b_changed=changed[-1],
    )


def compare_after_steps(target=None, steps: int = 2, seed: int = 0) -> list[StepReport]:
    """Train the original's pattern and ``apply_lora`` on the same MLP and data for ``steps`` SGD steps.

    Two steps, because B starts at zero: step 1 moves B only (dA = s·(dY B)ᵀ x is 0 while B = 0), step 2
    moves A too — in the correct version. Returns one :class:`StepReport` per version.
    """
    target = default_target() if target is None else target
    torch.manual_seed(seed)
    probe = torch.empty(0).to(target)
    x = torch.randn(32, 16).to(probe)
    y = torch.rand(32, 4).to(probe)

    torch.manual_seed(seed)
    mistaken = mistaken_lora_mlp(target)
    wrapped = [m for m in mistaken if isinstance(m, _MistakenLinearWithLoRA)]
    bases = [t for m in wrapped for t in (m.linear.weight, m.linear.bias)]
    first = wrapped[0].lora
    reports = [_train(mistaken, bases, first.A, first.B, first.alpha, x, y, steps, "original's pattern")]

    torch.manual_seed(seed)
    right = apply_lora(simple_mlp().to(target), ["0", "2"], r=5, alpha=2.5)  # s = 2.5 / 5 = the original 0.5
    layers = list(lora_modules(right).values())
    bases = [t for m in layers for t in (m.base.weight, m.base.bias)]
    first = layers[0]
    reports.append(_train(right, bases, first.lora_a, first.lora_b, first.scale, x, y, steps, "LoRALinear"))
    return reports
