"""Small models for the compile-inspection tests: an MLP with bias + ReLU and a 4-feature DLRM.

Sizes are tiny on purpose: every distinct graph costs a compile (seconds of gcc on a 2-core CPU, or the
Triton interpreter). The tensors live on the GPU when there is one (inductor then writes Triton natively).
"""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from torch import nn

from lecture_code.model import DLRM, DLRMConfig

NUM_SPARSE = 4
BATCH = 16


def _seed() -> int:
    value = random.randrange(1 << 30)
    print(f"seed={value}")
    return value


@pytest.fixture(scope="session")
def device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


@pytest.fixture(scope="module")
def mlp(device):
    """``Linear(13, 32) → ReLU → Linear(32, 8) → ReLU`` and one input batch ``[16, 13]``."""
    torch.manual_seed(_seed())
    model = nn.Sequential(nn.Linear(13, 32), nn.ReLU(), nn.Linear(32, 8), nn.ReLU()).to(device)
    x = torch.randn(BATCH, 13, device=device)
    return model, x


@pytest.fixture(scope="module")
def tiny_dlrm(device):
    """A DLRM with 4 sparse features (vocabulary hashing), a batch of raw ids with unseen and missing ids,
    and click labels: ``(model, dense, sparse, labels)``."""
    seed = _seed()
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    vocabularies = [np.sort(rng.choice(1 << 20, size=5 + 3 * f, replace=False)) for f in range(NUM_SPARSE)]
    config = DLRMConfig.preset("small", tuple(len(v) + 1 for v in vocabularies), hashing="vocabulary")
    model = DLRM(config, vocabularies).to(device)
    columns = []
    for vocab in vocabularies:
        pool = np.concatenate([vocab, [-1, (1 << 20) + 7, int(vocab[0]) + 1]])  # seen, missing, unseen
        columns.append(torch.from_numpy(rng.choice(pool, size=BATCH)))
    sparse = torch.stack(columns, dim=1).to(device)
    dense = torch.from_numpy(np.log1p(rng.exponential(10.0, size=(BATCH, 13))).astype(np.float32)).to(device)
    labels = torch.from_numpy(rng.integers(0, 2, size=BATCH).astype(np.float32)).to(device)
    return model, dense, sparse, labels
