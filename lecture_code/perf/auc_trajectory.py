"""Does a lower-precision step learn what fp32 eager learns? Holdout AUC along one training run, side by side.

The bf16 step (:mod:`lecture_code.perf.bf16_mlps`) does not take eager's steps to fp32's last bits, so it is
judged by what training is for: from one seed, on the same batches in the same order, both models are
evaluated on the same held-out batches every ``every`` steps (and before the first), and the largest
|AUC difference| over those evaluations is the gap (RESULTS.md's goal: ≤ 1e-3 over 300 steps, Kaggle preset,
batch 2048). The data is the repository's synthetic Criteo set (labels drawn from a logistic model of the
features: there is something to learn); the benchmark's random batches have labels independent of the
features, on which every AUC stays near 0.5.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import torch
from torch import nn

from lecture_code.data import Batch
from lecture_code.model import DLRMConfig
from lecture_code.perf.dlrm_step import build_step
from lecture_code.perf.workload import load_workload
from lecture_code.training.metrics import evaluate

__all__ = ["REFERENCE", "auc_gap_vs_eager", "auc_trajectories", "criteo_batches", "max_auc_gap"]

REFERENCE = "eager, dense grads"
"""The fp32 eager step every trajectory is compared with (the model of notebook 01, plain SGD)."""


def auc_trajectories(
    trainers: Mapping[str, tuple[Callable[[Batch], object], nn.Module]],
    train: Sequence[Batch],
    holdout: Sequence[Batch],
    steps: int,
    every: int,
) -> tuple[list[int], dict[str, list[float]]]:
    """Train every ``(step, model)`` of ``trainers`` on ``train`` (cycled, the same batch for all at each
    step) for ``steps`` steps; evaluate each model's holdout AUC before the first step, every ``every`` steps
    and after the last. Returns ``(evaluated_at, {name: aucs})``."""
    if steps < 1 or every < 1:
        raise ValueError(f"steps and every must be positive, got {steps}, {every}")
    at: list[int] = []
    aucs: dict[str, list[float]] = {name: [] for name in trainers}
    for i in range(steps + 1):
        if i % every == 0 or i == steps:
            at.append(i)
            for name, (_, model) in trainers.items():
                aucs[name].append(evaluate(model, holdout)["auc"])
        if i < steps:
            for step, _ in trainers.values():
                step(train[i % len(train)])
    return at, aucs


def max_auc_gap(aucs: Sequence[float], reference: Sequence[float]) -> float:
    """The largest |AUC − the reference's AUC| over the evaluations of one run."""
    return max(abs(a - r) for a, r in zip(aucs, reference, strict=True))


def auc_gap_vs_eager(
    name: str,
    config: DLRMConfig,
    device: torch.device,
    train: Sequence[Batch],
    holdout: Sequence[Batch],
    steps: int = 300,
    every: int = 50,
    lr: float = 0.1,
) -> dict:
    """Implementation ``name`` of :mod:`lecture_code.perf.dlrm_step` and fp32 eager (:data:`REFERENCE`), each
    built from ``torch.manual_seed(0)`` (one initialisation), trained and evaluated by
    :func:`auc_trajectories`: both trajectories and ``max |Δ AUC|``."""
    trainers = {}
    for impl in (REFERENCE, name):
        torch.manual_seed(0)
        trainers[impl] = build_step(impl, config, device, train[0], lr=lr)
    at, aucs = auc_trajectories(trainers, train, holdout, steps, every)
    return {
        "implementation": name,
        "against": REFERENCE,
        "steps": steps,
        "evaluated_at": at,
        "auc": aucs[name],
        "reference_auc": aucs[REFERENCE],
        "max |Δ AUC|": max_auc_gap(aucs[name], aucs[REFERENCE]),
    }


def criteo_batches(
    batch_size: int, device: torch.device, holdout_batches: int = 4
) -> tuple[list[Batch], list[Batch]]:
    """``(train, holdout)`` of the default synthetic Criteo data (:func:`~lecture_code.perf.workload.
    load_workload`, one seeded shuffle): the first ``holdout_batches`` batches held out, the rest to train
    on. Its raw ids fit any table under the modulus hash."""
    batches = load_workload(batch_size=batch_size, num_batches=10**6, device=device).batches
    if len(batches) <= holdout_batches:
        raise ValueError(f"{len(batches)} batches of {batch_size}: too few to hold {holdout_batches} out")
    return batches[holdout_batches:], batches[:holdout_batches]
