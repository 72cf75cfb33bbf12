"""Does a step of the waterfall train what eager trains? One seed, the same batches, losses and table updates
compared (notebook 05's headline rows; :mod:`lecture_code.perf.dlrm_step` builds the steps)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from lecture_code.data import Batch
from lecture_code.environment import matmul_precision
from lecture_code.model import DLRMConfig
from lecture_code.perf import dlrm_step

__all__ = ["compare_with_eager", "packed_tables"]


def packed_tables(model: nn.Module) -> torch.Tensor:
    """All tables of a built step's model as one ``[R, D]`` tensor, from its state dict: the packed buffer
    of ``packed + index_add_``, else the per-table entries (the fused backend's state dict names its packed
    tables as eager does: checkpoints are interchangeable) concatenated in feature order."""
    state = model.state_dict()
    if "sparse_arch.weight" in state:
        return state["sparse_arch.weight"]
    f = 0
    tables = []
    while f"sparse_arch.embeddings.{f}.weight" in state:
        tables.append(state[f"sparse_arch.embeddings.{f}.weight"])
        f += 1
    return torch.cat(tables)


def compare_with_eager(
    name: str, config: DLRMConfig, device: torch.device, batches: Sequence[Batch], lr: float = 0.1
) -> dict:
    """Implementation ``name`` and ``eager, dense grads``, built from one seed, one SGD step on each batch:
    the largest |loss difference| over the steps, the largest |difference of the tables' updates|, and the
    largest table update (the scale those differences are small against). A ``TF32`` row is compared with
    eager run under TF32 too (``matmul_precision("high")``: eager reads the setting at every call), since its
    products round differently from fp32's. A ``bf16`` row (bf16 MLPs) has no eager twin: it is compared
    with fp32 eager, and differs by bf16's rounding (``against`` says so; its check is what it learns:
    :mod:`lecture_code.perf.auc_trajectory`). A graph step's warm-up steps are undone when it is built, so the
    updates are counted from after building."""
    precision = "high" if "TF32" in name else "highest"

    def run(impl: str) -> tuple[torch.Tensor, torch.Tensor]:
        torch.manual_seed(0)
        with matmul_precision(precision):
            step, model = dlrm_step.build_step(impl, config, device, batches[0], lr=lr)
            before = packed_tables(model).clone()
            losses = torch.stack([step(b).detach().clone() for b in batches])  # a graph's loss is overwritten
        return losses, packed_tables(model) - before

    (losses, update), (ref_losses, ref_update) = run(name), run("eager, dense grads")
    return {
        "implementation": name,
        "against": "eager, dense grads"
        + (" (TF32)" if precision == "high" else " (fp32: its MLPs round to bf16)" if "bf16" in name else ""),
        "steps": len(batches),
        "max |Δ loss|": (losses - ref_losses).abs().max().item(),
        "max |Δ table update|": (update - ref_update).abs().max().item(),
        "max |table update|": ref_update.abs().max().item(),
    }
