"""Click-through-rate metrics: logloss and AUC on a held-out split, and the constant predictor to beat.

AUC comes from scikit-learn (``roc_auc_score``); we do not re-implement it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np
import torch
from sklearn.metrics import log_loss, roc_auc_score


def constant_predictor_logloss(positive_rate: float) -> float:
    """Logloss of always predicting the positive rate p: -(p log p + (1-p) log(1-p))."""
    p = min(max(positive_rate, 1e-12), 1 - 1e-12)
    return -(p * math.log(p) + (1 - p) * math.log(1 - p))


@torch.no_grad()
def evaluate(model: torch.nn.Module, batches: Iterable) -> dict[str, float]:
    """Logloss and AUC of ``model.predict_proba`` over batches with ``dense``, ``sparse``, ``label``.

    Returns ``logloss``, ``auc``, the constant predictor's logloss on the same labels
    (``baseline_logloss``; its AUC is 0.5) and the number of ``examples``.
    """
    was_training = model.training
    model.eval()
    probs, labels = [], []
    for batch in batches:
        probs.append(model.predict_proba(batch.dense, batch.sparse).float().cpu())
        labels.append(batch.label.float().cpu())
    model.train(was_training)
    p = torch.cat(probs).numpy().astype(np.float64)
    y = torch.cat(labels).numpy()
    return {
        "logloss": float(log_loss(y, np.clip(p, 1e-7, 1 - 1e-7), labels=[0, 1])),
        "auc": float(roc_auc_score(y, p)) if 0 < y.sum() < len(y) else float("nan"),
        "baseline_logloss": constant_predictor_logloss(float(y.mean())),
        "examples": float(len(y)),
    }
