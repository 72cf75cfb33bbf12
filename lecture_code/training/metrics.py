"""Click-through-rate metrics: logloss and AUC on a held-out split, and the constant predictor to beat.

AUC comes from scikit-learn (``roc_auc_score``); we do not re-implement it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np
import torch


def constant_predictor_logloss(positive_rate: float) -> float:
    """Logloss of always predicting the positive rate p: -(p log p + (1-p) log(1-p))."""
    p = min(max(positive_rate, 1e-12), 1 - 1e-12)
    return -(p * math.log(p) + (1 - p) * math.log(1 - p))


@torch.no_grad()
def predict(model: torch.nn.Module, batches: Iterable) -> tuple[torch.Tensor, torch.Tensor]:
    """``(probabilities, labels)``, float32 ``[n]`` each on the model's device, over batches with ``dense``,
    ``sparse``, ``label`` (``model.predict_proba``; the model is left in the mode it was in)."""
    was_training = model.training
    model.eval()
    probs, labels = [], []
    for batch in batches:
        probs.append(model.predict_proba(batch.dense, batch.sparse).float())
        labels.append(batch.label.float())
    model.train(was_training)
    empty = torch.zeros(0)
    return (torch.cat(probs), torch.cat(labels)) if probs else (empty, empty)


def ctr_metrics(probs: torch.Tensor, labels: torch.Tensor) -> dict[str, float]:
    """Logloss and AUC of click probabilities against 0/1 labels (any device), the constant predictor's
    logloss on the same labels (``baseline_logloss``; its AUC is 0.5) and the number of ``examples``."""
    from sklearn.metrics import log_loss, roc_auc_score  # here: importing scikit-learn takes 2.5 s

    p = probs.detach().cpu().numpy().astype(np.float64)
    y = labels.detach().cpu().numpy()
    return {
        "logloss": float(log_loss(y, np.clip(p, 1e-7, 1 - 1e-7), labels=[0, 1])),
        "auc": float(roc_auc_score(y, p)) if 0 < y.sum() < len(y) else float("nan"),
        "baseline_logloss": constant_predictor_logloss(float(y.mean())),
        "examples": float(len(y)),
    }


def evaluate(model: torch.nn.Module, batches: Iterable) -> dict[str, float]:
    """:func:`ctr_metrics` of :func:`predict`: logloss, AUC, ``baseline_logloss``, ``examples``.

    Under ``torchrun`` each rank predicts its holdout shard and the metrics are taken over all ranks'
    rows at once (:func:`lecture_code.training.distributed.evaluate_all_ranks`)."""
    return ctr_metrics(*predict(model, batches))
