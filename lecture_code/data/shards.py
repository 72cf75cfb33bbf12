"""One rank's shard of a preprocessed split, read from parquet without reading the other ranks' rows.

Data-parallel training (``torchrun``, :mod:`lecture_code.training.distributed`) gives each of ``W`` ranks its
own rows. The split itself is the single-process one, :func:`~lecture_code.data.dataset.split_indices` over
the file's ``N`` rows (``N`` from the parquet footer: no row read), sorted train and holdout row numbers.
Rank ``r`` takes the ``r``-th of ``W`` contiguous, near-equal slices of each sorted list::

    train   = split_indices(N)[0][lo_t(r) : hi_t(r)]     slices differ in length by at most one row
    holdout = split_indices(N)[1][lo_h(r) : hi_h(r)]

Sorted row numbers in a contiguous slice lie in one contiguous range of the file, ``[first, last]``, roughly
``[r·N/W, (r+1)·N/W)``; the rank reads only the parquet row groups that overlap it (``read_row_range``), a
little more than ``N/W`` rows (partial row groups at both ends; the preprocessing writes ~33k-row groups),
never the whole file once ``W > 1`` and the file has more than one row group. The ranks' train slices are
disjoint and their union, in rank order, is the whole train split (the same for holdout): concatenating the
ranks' holdout predictions gives the holdout rows in single-process order.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from .dataset import CriteoTensors, _parquet_path, split_indices, table_to_tensors

__all__ = ["Shard", "load_shard", "read_row_range", "shard_slice"]


def shard_slice(n: int, rank: int, world_size: int) -> slice:
    """The ``rank``-th of ``world_size`` contiguous slices of ``range(n)``; lengths differ by at most one."""
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"need 0 <= rank < world_size, got rank={rank}, world_size={world_size}")
    return slice(rank * n // world_size, (rank + 1) * n // world_size)


def read_row_range(path, start: int, stop: int) -> tuple[CriteoTensors, range]:
    """Rows ``[start, stop)`` of a parquet file, reading only the row groups that overlap them.

    Returns the rows and the range of file rows actually decoded (whole row groups)."""
    parquet = pq.ParquetFile(_parquet_path(path))
    n = parquet.metadata.num_rows
    if not 0 <= start <= stop <= n:
        raise ValueError(f"row range [{start}, {stop}) is outside the file's {n} rows")
    bounds = np.cumsum([0] + [parquet.metadata.row_group(g).num_rows for g in range(parquet.num_row_groups)])
    groups = [g for g in range(parquet.num_row_groups) if bounds[g] < stop and bounds[g + 1] > start]
    if not groups:
        return table_to_tensors(parquet.schema_arrow.empty_table()), range(start, start)
    first = int(bounds[groups[0]])
    table = parquet.read_row_groups(groups).slice(start - first, stop - start)
    return table_to_tensors(table), range(first, int(bounds[groups[-1] + 1]))


@dataclass(frozen=True)
class Shard:
    """One rank's rows: its train and holdout slices, and which file rows it decoded to get them."""

    train: CriteoTensors
    holdout: CriteoTensors
    train_rows: np.ndarray  # file row numbers of ``train``, in order
    holdout_rows: np.ndarray  # file row numbers of ``holdout``, in order
    rows_read: range  # the file rows this rank decoded (whole row groups)


def load_shard(path, holdout_fraction: float, seed: int, rank: int, world_size: int) -> Shard:
    """Rank ``rank``'s shard of the ``(train, holdout)`` split of :func:`split_indices` (module docstring).

    ``world_size = 1`` gives exactly ``train_holdout_split(load_tensors(path), holdout_fraction, seed)``."""
    path = Path(path)
    num_rows = pq.ParquetFile(_parquet_path(path)).metadata.num_rows
    train_all, holdout_all = split_indices(num_rows, holdout_fraction, seed)
    train = train_all[shard_slice(len(train_all), rank, world_size)]
    holdout = holdout_all[shard_slice(len(holdout_all), rank, world_size)]
    mine = [a for a in (train, holdout) if len(a)]
    start = min(int(a[0]) for a in mine) if mine else 0
    stop = max(int(a[-1]) for a in mine) + 1 if mine else 0
    rows, read = read_row_range(path, start, stop)
    return Shard(rows.subset(train - start), rows.subset(holdout - start), train, holdout, read)
