"""Your turn: exact SGD on the rows a batch touched, in place, in torch operations.

``weight`` [R, D] is one packed table, ``ids`` [n] the row of each lookup (rows may repeat), ``grad`` [n, D]
one gradient per lookup, ``lr`` a float. Every looked-up row must move by ``-lr`` times the SUM of its
lookups' gradients (a row looked up twice gets both), every other row must stay as it is, and the function
returns ``weight`` itself (updated in place, not a new tensor). Check it with
``check_sgd_rows(sgd_rows.sgd_rows)``.
"""

from __future__ import annotations

import torch

__all__ = ["sgd_rows"]


def sgd_rows(weight: torch.Tensor, ids: torch.Tensor, grad: torch.Tensor, lr: float) -> torch.Tensor:
    """``weight[ids[i]] -= lr · grad[i]`` for every lookup i, in place; a repeated row gets the sum."""
    # TODO: update the looked-up rows of weight (one torch call is enough)
    return weight
