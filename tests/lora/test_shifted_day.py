"""The shifted day: deterministic per seed, the generator's features in load_tensors' form, the generator's
label rule recomputed exactly, and a label signal that really moved."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lecture_code.data import load_tensors, preprocess, synthetic
from lecture_code.data.schema import DENSE_COLUMNS, MISSING_ID, NUM_DENSE, SPARSE_COLUMNS
from lecture_code.data.shifted_day import (
    SHIFTED_DENSE_WEIGHTS,
    SHIFTED_SPARSE_AMPLITUDES,
    label_logit,
    shifted_day,
)

DAY0_RULE = {
    "dense_weights": synthetic.LABEL_DENSE_WEIGHTS,
    "sparse_amplitudes": synthetic.LABEL_SPARSE_AMPLITUDES,
}


def test_deterministic_per_seed():
    a, b, c = shifted_day(3000, seed=4), shifted_day(3000, seed=4), shifted_day(3000, seed=5)
    for name in ("dense", "sparse", "label"):
        assert torch.equal(getattr(a, name), getattr(b, name)), name
    assert not torch.equal(a.dense, c.dense) and not torch.equal(a.label, c.label)


def test_features_are_what_preprocessing_makes_of_the_same_day(tmp_path):
    raw = synthetic.generate_criteo_tsv(tmp_path / "day.tsv", 2500, seed=7)
    preprocess(raw, tmp_path / "processed", show_progress=False)
    expected = load_tensors(tmp_path / "processed")
    day = shifted_day(2500, seed=7)
    assert day.dense.dtype == torch.float32 and day.sparse.dtype == torch.int64
    assert torch.equal(day.dense, expected.dense) and torch.equal(day.sparse, expected.sparse)


def test_label_logit_is_the_generators_rule():
    block = synthetic._draw_block(np.random.default_rng(11), 4000, 0.0)
    dense = np.stack(
        [np.where(m, 0, d) for d, m in zip(block["dense"], block["dense_missing"], strict=True)], axis=1
    )
    sparse = np.stack(
        [
            np.where(m, MISSING_ID, synthetic.scramble_ids(r, f).astype(np.int64))
            for f, (r, m) in enumerate(zip(block["ranks"], block["sparse_missing"], strict=True))
        ],
        axis=1,
    )
    np.testing.assert_allclose(
        label_logit(dense, sparse, **DAY0_RULE), block["logit_without_intercept"], atol=1e-12
    )


def _corr(x: torch.Tensor, y: torch.Tensor) -> float:
    return float(np.corrcoef(x.double().numpy(), y.double().numpy())[0, 1])


def test_the_click_signal_moved():
    """On the same features, I1 and C2 change the sign of their relation to the label; I6 gains one."""
    before, after = shifted_day(20_000, seed=3, **DAY0_RULE), shifted_day(20_000, seed=3)
    assert torch.equal(before.dense, after.dense)
    i1, i6 = DENSE_COLUMNS.index("I1"), DENSE_COLUMNS.index("I6")
    assert _corr(before.dense[:, i1], before.label) > 0.05 and _corr(after.dense[:, i1], after.label) < -0.05
    assert abs(_corr(before.dense[:, i6], before.label)) < 0.05 < _corr(after.dense[:, i6], after.label)
    c2 = torch.from_numpy(label_logit(np.zeros((20_000, NUM_DENSE)), after.sparse.numpy(), {}, {"C2": 1.0}))
    assert _corr(c2, before.label) > 0.05 and _corr(c2, after.label) < -0.05
    for day in (before, after):
        assert abs(day.label.mean().item() - 0.256) < 0.01  # the intercept keeps Kaggle's positive rate


def test_the_documented_shift():
    moved = {k: v for k, v in SHIFTED_DENSE_WEIGHTS.items() if synthetic.LABEL_DENSE_WEIGHTS.get(k) != v}
    assert moved == {"I1": -0.5, "I6": 0.5}
    moved = {k: v for k, v in SHIFTED_SPARSE_AMPLITUDES.items() if synthetic.LABEL_SPARSE_AMPLITUDES[k] != v}
    assert moved == {"C2": -1.0}


def test_bad_arguments():
    with pytest.raises(ValueError, match=r"unknown feature name\(s\) \['I14'\]"):
        label_logit(
            np.zeros((1, NUM_DENSE)), np.zeros((1, len(SPARSE_COLUMNS)), dtype=np.int64), {"I14": 1}, {}
        )
    with pytest.raises(ValueError, match="num_rows must be >= 1"):
        shifted_day(0)
    with pytest.raises(ValueError, match=r"positive_rate must be in \(0, 1\)"):
        shifted_day(10, positive_rate=1.0)
