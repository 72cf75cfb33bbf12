"""Batches from a preprocessed Criteo folder, as contiguous torch tensors: no Python object per row.

Notation: N rows, B batch size; 13 dense features, F = 26 sparse features.

In memory (the default data; Kaggle-sized data on a machine with the RAM): ``load_tensors`` reads
``data.parquet`` into three tensors::

    dense   float32 [N, 13]   log(1 + max(x, 0)), missing -> 0
    sparse  int64   [N, F]    raw 32-bit ids, MISSING_ID = -1 where empty
    label   float32 [N]       0.0 or 1.0

A batch is one gather per tensor (``dense[idx]``) with ``idx`` a slice of a seeded permutation, instead of
B calls to ``__getitem__`` and a collate. Batch ``k`` of epoch ``e`` depends only on ``(seed, e, k)``, so
``iter_batches(..., start_batch=k)`` continues an interrupted epoch exactly (resume after a checkpoint).
On a GPU, move the whole dataset once (``data.to("cuda")``) and the gathers run on the GPU.

Larger than memory (the 1TB set): ``iter_parquet_batches`` streams one parquet row group at a time,
shuffling row-group order and rows within a group (a local shuffle, not a uniform permutation).
Raw ids become embedding rows with ``vocabulary.vocabulary_rows`` or ``CriteoTensors.with_vocabulary_rows``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch

from .metadata import PARQUET_FILE
from .schema import DENSE_COLUMNS, LABEL, SPARSE_COLUMNS
from .vocabulary import vocabulary_rows


class Batch(NamedTuple):
    dense: torch.Tensor  # float32 [B, 13]
    sparse: torch.Tensor  # int64 [B, F]
    label: torch.Tensor  # float32 [B]

    def to(self, device, non_blocking: bool = False) -> Batch:
        return Batch(*(t.to(device, non_blocking=non_blocking) for t in self))


@dataclass(frozen=True)
class CriteoTensors:
    """A whole split as three row-aligned tensors (shapes in the module docstring)."""

    dense: torch.Tensor
    sparse: torch.Tensor
    label: torch.Tensor

    def __len__(self) -> int:
        return self.label.shape[0]

    def batch(self, rows: slice | torch.Tensor) -> Batch:
        """Rows as a ``Batch``: views for a slice, one gather per tensor for an index tensor."""
        if isinstance(rows, slice):
            return Batch(self.dense[rows], self.sparse[rows], self.label[rows])
        # index_select: several times faster than advanced indexing (t[rows]) on a CPU
        return Batch(*(t.index_select(0, rows) for t in (self.dense, self.sparse, self.label)))

    def subset(self, index: torch.Tensor | np.ndarray) -> CriteoTensors:
        return CriteoTensors(*self.batch(torch.as_tensor(index, dtype=torch.int64, device=self.label.device)))

    def to(self, device) -> CriteoTensors:
        return CriteoTensors(self.dense.to(device), self.sparse.to(device), self.label.to(device))

    def with_vocabulary_rows(self, vocabularies: list[np.ndarray]) -> CriteoTensors:
        """The same rows with raw ids replaced by embedding rows (0 = missing, unseen or rare)."""
        sparse = self.sparse.cpu().numpy()
        rows = np.stack([vocabulary_rows(v, sparse[:, f]) for f, v in enumerate(vocabularies)], axis=1)
        return CriteoTensors(self.dense, torch.from_numpy(rows).to(self.sparse.device), self.label)


def _parquet_path(path) -> Path:
    path = Path(path)
    return path / PARQUET_FILE if path.is_dir() else path


def table_to_tensors(table: pa.Table) -> CriteoTensors:
    """Arrow table with the processed columns -> contiguous tensors."""
    n = table.num_rows
    dense = np.empty((n, len(DENSE_COLUMNS)), dtype=np.float32)
    for j, name in enumerate(DENSE_COLUMNS):
        dense[:, j] = table.column(name).to_numpy()
    sparse = np.empty((n, len(SPARSE_COLUMNS)), dtype=np.int64)
    for f, name in enumerate(SPARSE_COLUMNS):
        sparse[:, f] = table.column(name).to_numpy()
    label = table.column(LABEL).to_numpy().astype(np.float32)
    return CriteoTensors(torch.from_numpy(dense), torch.from_numpy(sparse), torch.from_numpy(label))


def load_tensors(path) -> CriteoTensors:
    """Read a processed folder (or its parquet file) into memory."""
    return table_to_tensors(pq.read_table(_parquet_path(path)))


def split_indices(num_rows: int, holdout_fraction: float, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Sorted, disjoint ``(train, holdout)`` row indices; ``round(num_rows * holdout_fraction)`` held out."""
    if not 0.0 <= holdout_fraction <= 1.0:
        raise ValueError("holdout_fraction must be in [0, 1]")
    order = np.random.default_rng(seed).permutation(num_rows)
    k = round(num_rows * holdout_fraction)
    return np.sort(order[k:]), np.sort(order[:k])


def train_holdout_split(data: CriteoTensors, holdout_fraction: float = 0.1, seed: int = 0):
    """Deterministic random split: ``(train, holdout)`` as ``CriteoTensors``."""
    train, holdout = split_indices(len(data), holdout_fraction, seed)
    return data.subset(train), data.subset(holdout)


def num_batches(num_rows: int, batch_size: int, drop_last: bool = True) -> int:
    return num_rows // batch_size if drop_last else -(-num_rows // batch_size)


def epoch_permutation(num_rows: int, seed: int, epoch: int) -> torch.Tensor:
    """The row order of one epoch: a function of (seed, epoch) only."""
    return torch.from_numpy(np.random.default_rng([seed, epoch]).permutation(num_rows))


def iter_batches(
    data: CriteoTensors,
    batch_size: int,
    seed: int = 0,
    epoch: int = 0,
    start_batch: int = 0,
    drop_last: bool = True,
    shuffle: bool = True,
    device=None,
) -> Iterator[Batch]:
    """Yield batches ``start_batch, start_batch + 1, ...`` of one epoch (see module docstring)."""
    n = len(data)
    order = epoch_permutation(n, seed, epoch).to(data.label.device) if shuffle else None
    for b in range(start_batch, num_batches(n, batch_size, drop_last)):
        rows = slice(b * batch_size, min((b + 1) * batch_size, n))
        batch = data.batch(rows if order is None else order[rows])
        yield batch if device is None else batch.to(device)


def iter_parquet_batches(
    path, batch_size: int, seed: int | None = None, epoch: int = 0, drop_last: bool = False
) -> Iterator[Batch]:
    """Stream batches from a parquet file larger than memory, one row group at a time.

    ``seed=None``: file order. Otherwise row groups in a seeded order and rows shuffled within each group.
    Memory: one row group plus one partial batch.
    """
    parquet = pq.ParquetFile(_parquet_path(path))
    rng = np.random.default_rng([seed, epoch]) if seed is not None else None
    groups = np.arange(parquet.num_row_groups)
    if rng is not None:
        rng.shuffle(groups)
    carry: CriteoTensors | None = None  # the rows of the last group that did not fill a batch
    for g in groups.tolist():
        part = table_to_tensors(parquet.read_row_group(g))
        if rng is not None:
            part = part.subset(rng.permutation(len(part)))
        if carry is not None:
            part = _concat(carry, part)
        full = len(part) // batch_size * batch_size
        for start in range(0, full, batch_size):
            yield part.batch(slice(start, start + batch_size))
        carry = CriteoTensors(*part.batch(slice(full, None)))
    if carry is not None and len(carry) and not drop_last:
        yield carry.batch(slice(None))


def _concat(a: CriteoTensors, b: CriteoTensors) -> CriteoTensors:
    cat = torch.cat
    return CriteoTensors(cat([a.dense, b.dense]), cat([a.sparse, b.sparse]), cat([a.label, b.label]))
