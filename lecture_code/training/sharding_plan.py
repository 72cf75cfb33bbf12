"""Which rank holds which rows: the sharding plan of the embedding tables, and what it moves per step.

Tables too large for one GPU are split over the ``W`` ranks (model parallel); the MLPs stay replicated
(data parallel). Two layouts, TorchRec's names:

- **table-wise**: a whole table on one rank. Tables go largest first to the rank holding the fewest bytes so
  far (ties: the lower rank), so the ranks end up balanced by bytes.
- **row-wise**: a table above ``row_wise_above_bytes`` is cut into ``W`` contiguous blocks of
  ``ceil(n / W)`` rows, block ``r`` on rank ``r`` (the last blocks shorter or empty when ``n`` is small).
  The owner of row ``i`` is ``i // ceil(n / W)``: TorchRec's row-wise bucketizing.

A rank's bytes are its rows times ``bytes_per_row`` (``D`` × the weight's element size, plus the optimizer's
per-row state: 4 bytes for row-wise Adagrad). With ``memory_budget_bytes`` (per rank), a table that alone
exceeds the budget goes row-wise unless a threshold is given, and a plan that still leaves any rank above the
budget is refused with the plan in the error. TorchRec's planner does the same job with cost models
(``EmbeddingShardingPlanner``, ``Topology(hbm_cap=...)``, proposers, ``ShardingType.TABLE_WISE`` /
``ROW_WISE``); this one is greedy and only counts bytes.

The plan is a plain value: every rank computes the same one from the same arguments (no communication),
and ``print(plan)`` shows it. :func:`exchange_bytes` counts what the sharded lookup of
:mod:`lecture_code.training.sharded_embedding` sends per step, :func:`replicated_exchange_bytes` what the
data-parallel step of :mod:`lecture_code.training.data_parallel` sends (its docstring derives both).

At sizes no test machine holds, the plan alone says what each rank would allocate (the sharded build allocates
exactly its shards: :mod:`lecture_code.training.sharded_training`)::

    python -m lecture_code.training.sharding_report --tables terabyte --dim 128 --world-size 4
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "ROW_WISE",
    "TABLE_WISE",
    "ShardingPlan",
    "TableShard",
    "exchange_bytes",
    "plan_sharding",
    "replicated_exchange_bytes",
]

TABLE_WISE, ROW_WISE = "table_wise", "row_wise"


@dataclass(frozen=True)
class TableShard:
    """Rows ``row_start : row_end`` of table ``table``, held by ``rank``."""

    table: int
    rank: int
    row_start: int
    row_end: int

    @property
    def rows(self) -> int:
        return self.row_end - self.row_start


@dataclass(frozen=True)
class ShardingPlan:
    """Each table's layout and its shards, ordered by (rank, table): a rank's shards in table order."""

    table_sizes: tuple[int, ...]
    dim: int
    world_size: int
    bytes_per_row: int
    layouts: tuple[str, ...]  # per table: TABLE_WISE or ROW_WISE
    shards: tuple[TableShard, ...]

    def __post_init__(self):
        for f, n in enumerate(self.table_sizes):
            parts = sorted((s for s in self.shards if s.table == f), key=lambda s: s.row_start)
            starts = [s.row_start for s in parts]
            ends = [s.row_end for s in parts]
            if not parts or starts[0] != 0 or ends[-1] != n or starts[1:] != ends[:-1]:
                got = [(s.row_start, s.row_end) for s in parts]
                raise ValueError(
                    f"ShardingPlan: the shards of table {f} must cover rows 0..{n} in contiguous non-empty "
                    f"blocks, got {got}"
                )
            ranks = [s.rank for s in parts]
            if len(set(ranks)) != len(ranks) or not all(0 <= r < self.world_size for r in ranks):
                raise ValueError(f"ShardingPlan: table {f} needs distinct ranks in 0..{self.world_size - 1} "
                                 f"for its shards, got {ranks}")  # fmt: skip
        if list(self.shards) != sorted(self.shards, key=lambda s: (s.rank, s.table)):
            raise ValueError("ShardingPlan: shards must be ordered by (rank, table)")

    def shards_of(self, rank: int) -> tuple[TableShard, ...]:
        """The shards ``rank`` holds, in table order (its local tables)."""
        return tuple(s for s in self.shards if s.rank == rank)

    def rank_bytes(self) -> list[int]:
        """Bytes each rank holds (its rows × ``bytes_per_row``)."""
        held = [0] * self.world_size
        for s in self.shards:
            held[s.rank] += s.rows * self.bytes_per_row
        return held

    def __str__(self) -> str:
        lines = [f"sharding plan: {len(self.table_sizes)} tables on {self.world_size} ranks"]
        for f, (n, layout) in enumerate(zip(self.table_sizes, self.layouts, strict=True)):
            where = ", ".join(
                f"rank {s.rank} rows {s.row_start}:{s.row_end}" for s in self.shards if s.table == f
            )
            lines.append(f"  table {f:>3}  {n:>12,} rows  {layout:<10}  {where}")
        for r, b in enumerate(self.rank_bytes()):
            lines.append(f"  rank {r}: {len(self.shards_of(r))} shards, {b:,} bytes")
        return "\n".join(lines)


def _positive_int(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"plan_sharding: {name} must be an int >= 1, got {value!r}")
    return value


def plan_sharding(
    table_sizes: Sequence[int],
    dim: int,
    world_size: int,
    *,
    memory_budget_bytes: float | None = None,
    row_wise_above_bytes: float | None = None,
    element_bytes: int = 4,
    state_bytes_per_row: int = 0,
) -> ShardingPlan:
    """The plan for tables of ``table_sizes`` rows of ``dim`` elements on ``world_size`` ranks.

    ``row_wise_above_bytes``: tables larger go row-wise (default: ``memory_budget_bytes``, so a table that
    alone overflows a rank is split; ``None`` and no budget: every table table-wise).
    ``memory_budget_bytes``: per rank; a plan leaving a rank above it raises ``ValueError``.
    ``element_bytes``: 4 for fp32 tables; ``state_bytes_per_row``: 4 for row-wise Adagrad, 0 for SGD.
    """
    sizes = tuple(table_sizes)
    if not sizes:
        raise ValueError("plan_sharding: table_sizes must name at least one table, got none")
    for f, n in enumerate(sizes):
        _positive_int(f"table_sizes[{f}]", n)
    _positive_int("dim", dim)
    _positive_int("world_size", world_size)
    _positive_int("element_bytes", element_bytes)
    if (
        isinstance(state_bytes_per_row, bool)
        or not isinstance(state_bytes_per_row, int)
        or state_bytes_per_row < 0
    ):
        raise ValueError(
            f"plan_sharding: state_bytes_per_row must be an int >= 0, got {state_bytes_per_row!r}"
        )
    for name, value in (
        ("memory_budget_bytes", memory_budget_bytes),
        ("row_wise_above_bytes", row_wise_above_bytes),
    ):
        if value is not None and not value > 0:
            raise ValueError(f"plan_sharding: {name} must be > 0 or None, got {value!r}")
    row_bytes = dim * element_bytes + state_bytes_per_row
    threshold = row_wise_above_bytes if row_wise_above_bytes is not None else memory_budget_bytes
    row_wise = [threshold is not None and n * row_bytes > threshold for n in sizes]
    shards: list[TableShard] = []
    held = [0] * world_size
    for f, n in enumerate(sizes):
        if row_wise[f]:
            block = math.ceil(n / world_size)
            for r in range(world_size):
                start, end = min(n, r * block), min(n, (r + 1) * block)
                if end > start:
                    shards.append(TableShard(f, r, start, end))
                    held[r] += (end - start) * row_bytes
    for f in sorted((f for f in range(len(sizes)) if not row_wise[f]), key=lambda f: (-sizes[f], f)):
        r = min(range(world_size), key=lambda r: (held[r], r))
        shards.append(TableShard(f, r, 0, sizes[f]))
        held[r] += sizes[f] * row_bytes
    layouts = tuple(ROW_WISE if w else TABLE_WISE for w in row_wise)
    plan = ShardingPlan(
        sizes, dim, world_size, row_bytes, layouts, tuple(sorted(shards, key=lambda s: (s.rank, s.table)))
    )
    if memory_budget_bytes is not None and max(held) > memory_budget_bytes:
        r = held.index(max(held))
        raise ValueError(
            f"plan_sharding: rank {r} would hold {held[r]:,} bytes, above memory_budget_bytes = "
            f"{memory_budget_bytes:,.0f}; lower row_wise_above_bytes or add ranks. The plan:\n{plan}"
        )
    return plan


def exchange_bytes(
    plan: ShardingPlan, batch_per_rank: int, bag_size: int = 1, element_bytes: int = 4
) -> list[dict[str, float]]:
    """Bytes each rank SENDS to other ranks per training step of the sharded lookup (its own chunk of each
    all-to-all stays local and is not counted); ``B`` = ``batch_per_rank``, ``L`` = ``bag_size``:

    - ``ids``: ``8·B·L`` per table on another rank, row-wise tables by the other ranks' share of rows
      (the expected bytes under uniform ids); ``lengths``: ``8·B`` per shard on another rank;
    - ``pooled``: the owner returns ``D·e`` per bag to each of the ``W − 1`` other ranks, per shard it holds;
    - ``gradients``: backward sends ``D·e`` per bag per shard on another rank back to its owner;
    - ``counts``: the ``5`` int64 per peer exchanged first.
    """
    W, D = plan.world_size, plan.dim
    out = []
    for r in range(W):
        other = [s for s in plan.shards if s.rank != r]
        ids = sum(8 * batch_per_rank * bag_size * s.rows / plan.table_sizes[s.table] for s in other)
        own = len(plan.shards_of(r))
        out.append({
            "counts": 5 * 8 * (W - 1),
            "ids": ids,
            "lengths": 8 * batch_per_rank * len(other),
            "pooled": (W - 1) * batch_per_rank * own * D * element_bytes,
            "gradients": batch_per_rank * len(other) * D * element_bytes,
        })  # fmt: skip
    return out


def replicated_exchange_bytes(num_tables: int, dim: int, world_size: int, batch_per_rank: int,
                              bag_size: int = 1, element_bytes: int = 4) -> dict[str, float]:  # fmt: skip
    """Bytes each rank sends per step in the data-parallel fused step (tables replicated): its ids and its
    upstream gradient rows, all-gathered (each rank's part reaches the ``W − 1`` others)."""
    peers, bags = world_size - 1, batch_per_rank * num_tables
    return {"ids": peers * 8 * bags * bag_size, "gradients": peers * bags * dim * element_bytes}
