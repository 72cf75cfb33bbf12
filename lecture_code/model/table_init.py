"""DLRM's table init, drawn so that any block of rows can be made alone: what sharded tables are built from.

Every backend and the sharded build use it, so one seed gives one set of tables, row for row, whether a
process holds all of them or each rank only its shards.

- **One draw from torch's global generator per sparse arch** (:func:`draw_table_seed`, at the point of the
  build where the tables are made): ``torch.manual_seed(s)`` before ``DLRM(...)`` still decides the whole
  model, and the MLPs built after the tables get the same draws whether the tables exist or not.
- **Table ``f``'s rows in blocks of** :data:`BLOCK_ROWS`; block ``k`` is ``Uniform(-sqrt(1/n_f),
  sqrt(1/n_f))`` (DLRM's init) from its own CPU generator seeded by ``(seed, f, k)``. A row's value depends
  only on ``(seed, f, row)``: a rank makes rows ``a : b`` from the blocks that hold them (at most two
  partial blocks of extra draws) and never holds more than one block beside its shards. One global stream
  for all tables would force every rank to draw every table to reach its own rows.

The draws run on the CPU (the values do not depend on the device that holds the table) and are copied into
the table a block at a time.
"""

from __future__ import annotations

import hashlib
import math

import torch

__all__ = ["BLOCK_ROWS", "draw_table_seed", "init_table_rows_"]

BLOCK_ROWS = 1 << 16
"""Rows per independently seeded block (4 MiB of fp32 draws at ``D = 16``, 32 MiB at ``D = 128``)."""


def draw_table_seed() -> int:
    """The seed of a sparse arch's tables: one draw from torch's global (CPU) generator."""
    return int(torch.randint(0, 2**62, (), dtype=torch.int64, device="cpu"))  # CPU under a device context too


def _block_generator(seed: int, table: int, block: int) -> torch.Generator:
    digest = hashlib.blake2b(f"{seed}:{table}:{block}".encode(), digest_size=8).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest, "little"))


@torch.no_grad()
def init_table_rows_(
    out: torch.Tensor, seed: int, table: int, row_start: int, table_rows: int
) -> torch.Tensor:
    """Fill ``out [r, D]`` with rows ``row_start : row_start + r`` of table ``table`` (``table_rows`` rows in
    all) as drawn from ``seed``; returns ``out``. A meta tensor is left as it is (no memory, no draws)."""
    if out.is_meta:
        return out
    rows, dim = out.shape
    row_end = row_start + rows
    if not 0 <= row_start <= row_end <= table_rows:
        raise ValueError(
            f"init_table_rows_: rows {row_start}:{row_end} are not inside a table of {table_rows}"
        )
    bound = math.sqrt(1.0 / table_rows)
    for block in range(row_start // BLOCK_ROWS, math.ceil(row_end / BLOCK_ROWS)):
        lo, hi = block * BLOCK_ROWS, min((block + 1) * BLOCK_ROWS, table_rows)  # the whole block, always
        values = torch.empty(hi - lo, dim, device="cpu").uniform_(
            -bound, bound, generator=_block_generator(seed, table, block)
        )
        a, b = max(lo, row_start), min(hi, row_end)
        out[a - row_start : b - row_start].copy_(values[a - lo : b - lo])
        del values  # before the next block is drawn: one block of draws alive at a time
    return out
