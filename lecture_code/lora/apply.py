"""``apply_lora``: wrap named ``nn.Linear`` submodules of a model in ``LoRALinear``, as PEFT's
``target_modules`` does, and freeze everything else.

Matching a target against a module's qualified name (``model.named_modules()``), one rule per target:

- the exact name (``"over_arch.model.0"``), or a name ending in ``"." + target`` (``"0"`` would match every
  child called ``0``): PEFT's rule for a list of strings;
- a glob with ``*``, ``?`` or ``[...]`` (``"dense_arch.*"``), matched against the whole name.

Only ``nn.Linear`` modules are wrapped (a glob may also match the ``Sequential`` or ``ReLU`` around them).
Every target must match at least one linear layer, otherwise :func:`apply_lora` raises and lists the linear
layers there are: a typo never silently trains nothing.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable
from typing import NamedTuple

from torch import nn

from lecture_code.lora.layer import LoRALinear

__all__ = [
    "ParameterCount",
    "apply_lora",
    "freeze",
    "linear_names",
    "lora_modules",
    "merge_lora",
    "parameter_counts",
    "set_backend",
    "unmerge_lora",
    "wrap_linear",
]


class ParameterCount(NamedTuple):
    trainable: int
    total: int

    @property
    def fraction(self) -> float:
        return self.trainable / self.total if self.total else 0.0

    def __str__(self) -> str:
        return f"trainable {self.trainable:,} of {self.total:,} parameters ({100 * self.fraction:.3f}%)"


def _matches(name: str, target: str) -> bool:
    if any(ch in target for ch in "*?["):
        return fnmatch.fnmatchcase(name, target)
    return name == target or name.endswith("." + target)


def linear_names(model: nn.Module) -> list[str]:
    """Qualified names of the ``nn.Linear`` layers that :func:`apply_lora` can wrap: not those already inside
    a ``LoRALinear``, and not the model itself (wrap a bare ``nn.Linear`` with ``LoRALinear`` directly)."""
    inside = {f"{n}.base" for n, m in model.named_modules() if isinstance(m, LoRALinear)}
    return [n for n, m in model.named_modules() if n and isinstance(m, nn.Linear) and n not in inside]


def apply_lora(
    model: nn.Module,
    target_modules: Iterable[str],
    r: int,
    alpha: float | None = None,
    dropout: float = 0.0,
    backend: str = "eager",
    use_rslora: bool = False,
    freeze_base: bool = True,
) -> nn.Module:
    """Replace every ``nn.Linear`` named by ``target_modules`` with a :class:`LoRALinear`; return ``model``.

    ``r``, ``alpha``, ``dropout``, ``backend``, ``use_rslora``: as for :class:`LoRALinear` (PEFT's ``r``,
    ``lora_alpha``, ``lora_dropout``, ``use_rslora``). ``freeze_base``: also set ``requires_grad=False`` on
    every other parameter of the model (embeddings, untargeted layers), as PEFT does, so that only the
    adapters train (adapters added earlier stay trainable). The model is changed in place.
    """
    if isinstance(target_modules, str):
        target_modules = [target_modules]
    targets = list(target_modules)
    if not targets:
        raise ValueError("apply_lora: target_modules is empty")
    candidates = linear_names(model)
    chosen: dict[str, None] = {}
    for target in targets:
        if not isinstance(target, str) or not target:
            raise TypeError(f"apply_lora: each target must be a non-empty string, got {target!r}")
        hits = [n for n in candidates if _matches(n, target)]
        if not hits:
            already = [n for n in lora_modules(model) if _matches(n, target)]
            why = f" ({already} already have an adapter)" if already else ""
            raise ValueError(
                f"apply_lora: target {target!r} matches no nn.Linear of {type(model).__name__}{why}. "
                f"Linear layers: {candidates}"
            )
        chosen.update(dict.fromkeys(hits))
    if freeze_base:
        freeze(model)
    for name in chosen:
        wrap_linear(model, name, r, alpha, dropout, backend, use_rslora)
    return model


def freeze(model: nn.Module) -> None:
    """``requires_grad=False`` on every parameter of ``model`` except the LoRA adapters' A and B."""
    adapters = {id(p) for m in lora_modules(model).values() for p in (m.lora_a, m.lora_b)}
    for p in model.parameters():
        if id(p) not in adapters:
            p.requires_grad_(False)


def wrap_linear(
    model: nn.Module, name: str, r: int, alpha=None, dropout=0.0, backend="eager", use_rslora=False
):
    """Replace the ``nn.Linear`` at qualified name ``name`` (exactly) by a ``LoRALinear``; return it."""
    parent_name, _, child = name.rpartition(".")
    parent = model.get_submodule(parent_name)
    wrapped = LoRALinear(getattr(parent, child), r, alpha, dropout, backend, use_rslora)
    setattr(parent, child, wrapped)
    return wrapped


def lora_modules(model: nn.Module) -> dict[str, LoRALinear]:
    """Every ``LoRALinear`` of ``model`` by qualified name, in module order."""
    return {n: m for n, m in model.named_modules() if isinstance(m, LoRALinear)}


def _each(model: nn.Module) -> list[LoRALinear]:
    found = list(lora_modules(model).values())
    if not found:
        raise ValueError(f"{type(model).__name__} has no LoRALinear layers (call apply_lora first)")
    return found


def set_backend(model: nn.Module, backend: str) -> nn.Module:
    """Switch every adapter of ``model`` to ``"eager"`` or ``"fused"``."""
    for layer in _each(model):
        layer.set_backend(backend)
    return model


def merge_lora(model: nn.Module) -> nn.Module:
    """Merge every adapter into its base weight (see :meth:`LoRALinear.merge`)."""
    for layer in _each(model):
        layer.merge()
    return model


def unmerge_lora(model: nn.Module) -> nn.Module:
    """Undo :func:`merge_lora`."""
    for layer in _each(model):
        layer.unmerge()
    return model


def parameter_counts(model: nn.Module) -> ParameterCount:
    """Trainable (``requires_grad``) and total parameter counts of ``model``."""
    params = list(model.parameters())
    return ParameterCount(sum(p.numel() for p in params if p.requires_grad), sum(p.numel() for p in params))
