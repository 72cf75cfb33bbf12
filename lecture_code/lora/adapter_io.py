"""Adapter-only checkpoints: the A and B tensors plus the config needed to rebuild them, nothing of the base.

An adapter is small (r·(K + N) numbers per adapted layer) and the base model is large and shared, so a
fine-tune is shipped as the adapter alone, as PEFT's ``adapter_model`` files are. The file holds::

    {"format": 1,
     "modules": {"<qualified name>": {"r": .., "alpha": .., "dropout": .., "use_rslora": ..,
                                      "in_features": .., "out_features": ..}, ...},
     "tensors": {"<qualified name>.lora_a": [r, K], "<qualified name>.lora_b": [N, r], ...}}

written with ``torch.save`` and read with ``torch.load(weights_only=True)`` (plain containers and tensors:
loading runs no pickled code). :func:`load_adapter` rebuilds the adapters on a fresh base model (same
architecture, no adapters yet) at exactly the recorded module names, or fills existing adapters of the same
shape; any mismatch raises, naming the module.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from lecture_code.lora.apply import freeze, lora_modules, wrap_linear
from lecture_code.lora.layer import LoRALinear

__all__ = ["ADAPTER_FORMAT", "adapter_config", "adapter_state_dict", "load_adapter", "save_adapter"]

ADAPTER_FORMAT = 1


def adapter_config(model: nn.Module) -> dict[str, dict]:
    """Per adapted module: what rebuilds its adapter (rank, alpha, dropout, rslora) and the shapes it fits."""
    return {
        name: {
            "r": m.r,
            "alpha": m.alpha,
            "dropout": m.dropout_p,
            "use_rslora": m.use_rslora,
            "in_features": m.in_features,
            "out_features": m.out_features,
        }
        for name, m in lora_modules(model).items()
    }


def adapter_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """``{"<module>.lora_a": A, "<module>.lora_b": B}`` for every adapter (detached; base weights left out).

    Refuses a merged model: its base weights carry s·B A, and the adapter alone no longer describes them.
    """
    tensors = {}
    for name, m in lora_modules(model).items():
        if m.merged:
            raise RuntimeError(f"adapter_state_dict: {name!r} is merged; unmerge before saving the adapter")
        tensors[f"{name}.lora_a"] = m.lora_a.detach()
        tensors[f"{name}.lora_b"] = m.lora_b.detach()
    if not tensors:
        raise ValueError(f"{type(model).__name__} has no LoRALinear layers: there is no adapter to save")
    return tensors


def save_adapter(model: nn.Module, path) -> Path:
    """Write the adapter of ``model`` (config + A/B tensors, on the CPU) to ``path``; return the path."""
    path = Path(path)
    tensors = {k: v.cpu().clone() for k, v in adapter_state_dict(model).items()}
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"format": ADAPTER_FORMAT, "modules": adapter_config(model), "tensors": tensors}, path)
    return path


def _read(source) -> dict:
    data = source if isinstance(source, dict) else torch.load(Path(source), weights_only=True)
    if not isinstance(data, dict) or data.get("format") != ADAPTER_FORMAT:
        raise ValueError(f"load_adapter: not a format-{ADAPTER_FORMAT} adapter file: {source!r}")
    return data


def load_adapter(model: nn.Module, source, backend: str = "eager") -> nn.Module:
    """Put the adapter in ``source`` (a path from :func:`save_adapter`, or its loaded dict) on ``model``.

    Modules that are plain ``nn.Linear`` get a fresh ``LoRALinear`` with the recorded config and ``backend``
    (the rest of the model is frozen, as :func:`apply_lora` does); modules that already are ``LoRALinear``
    must have the recorded rank and shapes. Then A and B are copied in. Returns ``model``.
    """
    data = _read(source)
    modules, tensors = data["modules"], data["tensors"]
    existing = lora_modules(model)
    for name, cfg in modules.items():
        try:
            layer = model.get_submodule(name)
        except AttributeError:
            raise ValueError(
                f"load_adapter: the model has no module {name!r} for the saved adapter"
            ) from None
        shape = (cfg["out_features"], cfg["in_features"])
        base = layer.base if isinstance(layer, LoRALinear) else layer
        if not isinstance(base, nn.Linear) or tuple(base.weight.shape) != shape:
            found = tuple(base.weight.shape) if isinstance(base, nn.Linear) else type(base).__name__
            raise ValueError(
                f"load_adapter: {name!r} must be a linear layer with weight [out, in] = {list(shape)}, "
                f"got {found}"
            )
        if name in existing and (existing[name].r, existing[name].alpha) != (cfg["r"], cfg["alpha"]):
            raise ValueError(
                f"load_adapter: {name!r} has r={existing[name].r}, alpha={existing[name].alpha:g}; the saved "
                f"adapter has r={cfg['r']}, alpha={cfg['alpha']:g}"
            )
    fresh = [name for name in modules if name not in existing]
    if fresh:
        freeze(model)
    for name in fresh:
        cfg = modules[name]
        wrap_linear(model, name, cfg["r"], cfg["alpha"], cfg["dropout"], backend, cfg["use_rslora"])
    with torch.no_grad():
        for name in modules:
            layer = model.get_submodule(name)
            for part in ("lora_a", "lora_b"):
                saved = tensors[f"{name}.{part}"]
                target = getattr(layer, part)
                if saved.shape != target.shape:
                    raise ValueError(
                        f"load_adapter: {name}.{part} has shape {list(saved.shape)} in the file but "
                        f"{list(target.shape)} in the model"
                    )
                target.copy_(saved)
    return model
