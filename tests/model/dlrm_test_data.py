"""Random vocabularies and raw Criteo-like id batches for the DLRM model tests (imported by the tests).

Raw ids are 32-bit values in [0, 2^32) (so half of them are >= 2^31) with missing = -1. Batches mix
vocabulary ids (seen), random ids (almost always unseen), missing ids, and ids just below the smallest and
just above the largest vocabulary entry, where an off-by-one in a search would show.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import torch

ID_SPACE = 1 << 32  # raw Criteo ids are 32-bit


def random_vocabulary(rng: np.random.Generator, size: int) -> np.ndarray:
    """A sorted int64 array of ``size`` distinct ids drawn from [0, 2^32)."""
    vocab = np.unique(rng.integers(0, ID_SPACE, size=size + 8, dtype=np.int64))
    return np.sort(rng.choice(vocab, size=size, replace=False))


def random_ids(rng: np.random.Generator, vocabulary: np.ndarray, batch: int) -> torch.Tensor:
    """Raw ids int64 ``[batch]``: half seen; the rest unseen, missing (-1) or at the vocabulary's edges."""
    kinds = rng.integers(0, 4, size=batch)
    ids = rng.integers(0, ID_SPACE, size=batch, dtype=np.int64)  # unseen (with overwhelming probability)
    if len(vocabulary):
        seen = rng.choice(vocabulary, size=batch)
        edges = np.array([vocabulary[0] - 1, vocabulary[-1] + 1, vocabulary[0], vocabulary[-1]]).clip(
            -1, ID_SPACE - 1
        )
        ids = np.where(kinds <= 1, seen, ids)
        ids = np.where(kinds == 2, rng.choice(edges, size=batch), ids)
    ids = np.where(kinds == 3, np.where(rng.random(batch) < 0.5, -1, ids), ids)
    return torch.from_numpy(ids.astype(np.int64))


def random_metadata(rng: np.random.Generator, num_features: int, max_vocab: int = 40) -> SimpleNamespace:
    """The duck type ``DLRM.from_metadata`` reads: ``vocabularies`` and ``num_embeddings_per_feature``."""
    vocabularies = [random_vocabulary(rng, int(rng.integers(1, max_vocab))) for _ in range(num_features)]
    return SimpleNamespace(
        vocabularies=vocabularies,
        num_embeddings_per_feature=tuple(len(v) + 1 for v in vocabularies),
    )


def random_batch(rng: np.random.Generator, metadata: SimpleNamespace, batch: int, num_dense: int = 13):
    """``(dense float32 [B, N], sparse int64 [B, F])`` with fresh random values (never zeros or ones)."""
    dense = torch.from_numpy(np.log1p(rng.exponential(10.0, size=(batch, num_dense))).astype(np.float32))
    sparse = torch.stack([random_ids(rng, v, batch) for v in metadata.vocabularies], dim=1)
    return dense, sparse
