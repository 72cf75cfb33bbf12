"""A later synthetic "day" whose click signal moved: the same kind of traffic, clicks for different reasons.

The features come from the synthetic generator (``synthetic.generate_criteo_tsv`` with another seed: a new
day of the same users and items, written in the raw format and read back by the real reader). Only the
label rule changes. The generator draws ``label ~ Bernoulli(sigmoid(b + Σ_j w_j log1p(I_j) +
Σ_f a_f effect_f(id_f)))``; the shifted day uses the same form with other weights and amplitudes:

=======  =====================  ======================
term     generator (day 0)      shifted day
=======  =====================  ======================
I1       +0.5                   −0.5 (flipped)
I6       —                      +0.5 (new)
C2       +1.0 · effect          −1.0 · effect (flipped)
=======  =====================  ======================

(every other term as on day 0), and the intercept ``b`` calibrated so the day's positive rate stays
Kaggle's 0.256. ``effect_f`` is the generator's own per-id effect, so the categorical part of the shift is
a re-weighting of tastes the day-0 embeddings already carry, and the dense part is a re-weighting of the
count features: both reachable by adapting the MLPs alone. :func:`label_logit` recomputes the generator's
rule exactly from the features (the tests check it against the generator), then any other weights.

Returned as ``CriteoTensors`` in the processed form of ``load_tensors`` (dense ``log1p`` float32, raw ids,
float labels), so a model trained on the default data reads it unchanged. Deterministic per seed. This
module knows no model.
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import torch

from .dataset import CriteoTensors
from .preprocess import transform_dense
from .reader import iter_criteo_chunks
from .schema import DENSE_COLUMNS, KAGGLE_POSITIVE_RATE, MISSING_ID, SPARSE_COLUMNS
from .synthetic import (
    _EFFECT_KEY,  # the generator's per-id effect key: the one piece not public
    LABEL_DENSE_WEIGHTS,
    LABEL_SPARSE_AMPLITUDES,
    generate_criteo_tsv,
    scramble_ids,
    unscramble_ids,
)

__all__ = [
    "DEFAULT_ROWS",
    "DEFAULT_SEED",
    "SHIFTED_DENSE_WEIGHTS",
    "SHIFTED_SPARSE_AMPLITUDES",
    "calibrated_intercept",
    "label_logit",
    "read_day_features",
    "shifted_day",
]

DEFAULT_ROWS = 40_000
DEFAULT_SEED = 1  # the default data is seed 0: seed 1 is "the next day"
_LABEL_STREAM = 0x5D1F7  # second entry of the label generator's seed: labels never reuse feature draws

SHIFTED_DENSE_WEIGHTS: dict[str, float] = {**LABEL_DENSE_WEIGHTS, "I1": -0.5, "I6": 0.5}
SHIFTED_SPARSE_AMPLITUDES: dict[str, float] = {**LABEL_SPARSE_AMPLITUDES, "C2": -1.0}


def label_logit(
    dense: np.ndarray,
    sparse: np.ndarray,
    dense_weights: Mapping[str, float],
    sparse_amplitudes: Mapping[str, float],
) -> np.ndarray:
    """``Σ_j w_j log1p(max(I_j, 0)) + Σ_f a_f effect_f(id_f)`` per row (no intercept), float64 ``[n]``.

    ``dense`` int64 ``[n, 13]`` raw counts (0 where missing), ``sparse`` int64 ``[n, 26]`` raw ids
    (``MISSING_ID`` where missing, which contributes 0), as the reader returns them. With the generator's
    ``LABEL_DENSE_WEIGHTS`` and ``LABEL_SPARSE_AMPLITUDES`` this is the generator's own logit.
    """
    unknown = sorted(set(dense_weights) - set(DENSE_COLUMNS)) + sorted(
        set(sparse_amplitudes) - set(SPARSE_COLUMNS)
    )
    if unknown:
        raise ValueError(f"label_logit: unknown feature name(s) {unknown}; use I1..I13 and C1..C26")
    logit = np.zeros(dense.shape[0])
    for name, weight in dense_weights.items():
        logit += weight * np.log1p(np.maximum(dense[:, DENSE_COLUMNS.index(name)], 0))
    for name, amplitude in sparse_amplitudes.items():
        f = SPARSE_COLUMNS.index(name)
        ids = sparse[:, f]
        missing = ids == MISSING_ID
        ranks = unscramble_ids(np.where(missing, 0, ids).astype(np.uint64), f)
        effect = scramble_ids(ranks, _EFFECT_KEY + f) * (2.0 / 2**32) - 1.0
        logit += amplitude * np.where(missing, 0.0, effect)
    return logit


def calibrated_intercept(logit: np.ndarray, positive_rate: float) -> float:
    """The ``b`` with mean ``sigmoid(logit + b)`` = ``positive_rate`` (bisection; the mean grows with b)."""
    if not 0.0 < positive_rate < 1.0:
        raise ValueError(f"positive_rate must be in (0, 1), got {positive_rate}")
    low, high = -20.0, 20.0
    for _ in range(60):
        mid = 0.5 * (low + high)
        if np.mean(1.0 / (1.0 + np.exp(-(logit + mid)))) < positive_rate:
            low = mid
        else:
            high = mid
    return 0.5 * (low + high)


def read_day_features(num_rows: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(dense int64 [n, 13], sparse int64 [n, 26], generator labels int8 [n])`` of a synthetic day: written
    by the generator as a raw file in a temporary folder and read back by the real reader."""
    with tempfile.TemporaryDirectory(prefix="shifted_day_") as tmp:
        path = generate_criteo_tsv(Path(tmp) / "day.tsv", num_rows, seed=seed)
        chunks = list(iter_criteo_chunks(path, strict=True))
    dense = np.concatenate([c.dense for c in chunks])
    sparse = np.concatenate([c.sparse for c in chunks])
    labels = np.concatenate([c.label for c in chunks])
    return dense, sparse, labels


def shifted_day(
    num_rows: int = DEFAULT_ROWS,
    seed: int = DEFAULT_SEED,
    dense_weights: Mapping[str, float] = SHIFTED_DENSE_WEIGHTS,
    sparse_amplitudes: Mapping[str, float] = SHIFTED_SPARSE_AMPLITUDES,
    positive_rate: float = KAGGLE_POSITIVE_RATE,
) -> CriteoTensors:
    """``num_rows`` rows of a later day, labelled by the moved rule (module docstring), as ``CriteoTensors``.

    Deterministic: the same arguments give identical tensors. Pass the generator's ``LABEL_DENSE_WEIGHTS``
    and ``LABEL_SPARSE_AMPLITUDES`` for an unshifted day (labels redrawn from the day-0 rule).
    """
    if num_rows < 1:
        raise ValueError(f"num_rows must be >= 1, got {num_rows}")
    dense, sparse, _ = read_day_features(num_rows, seed)
    logit = label_logit(dense, sparse, dense_weights, sparse_amplitudes)
    logit += calibrated_intercept(logit, positive_rate)
    rng = np.random.default_rng([seed, _LABEL_STREAM])
    label = (rng.random(len(logit)) < 1.0 / (1.0 + np.exp(-logit))).astype(np.float32)
    return CriteoTensors(
        torch.from_numpy(np.ascontiguousarray(transform_dense(dense))),
        torch.from_numpy(np.ascontiguousarray(sparse)),
        torch.from_numpy(label),
    )
