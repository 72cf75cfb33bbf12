"""Notebook 05's exercise, solved: exact SGD on the rows a batch touched, in torch ops."""

from __future__ import annotations

import torch

__all__ = ["sgd_rows"]


def sgd_rows(weight: torch.Tensor, ids: torch.Tensor, grad: torch.Tensor, lr: float) -> torch.Tensor:
    """``weight[ids[i]] -= lr · grad[i]`` for every lookup i, in place; a repeated row gets the sum.

    ``index_add_`` accumulates every lookup's gradient into its row (on a GPU with atomic adds, so the
    order of a row's additions, and its last bits, can vary run to run; the table-batched embedding sorts
    the ids and sums each row's gradients in a fixed order instead)."""
    return weight.index_add_(0, ids, grad, alpha=-lr)
