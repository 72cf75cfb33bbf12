"""The sharding plan (lecture_code.training.sharding_plan): layouts, balance, budget, bytes; no processes."""

from __future__ import annotations

import pytest

from lecture_code.training.sharding_plan import (
    ROW_WISE,
    TABLE_WISE,
    ShardingPlan,
    TableShard,
    exchange_bytes,
    plan_sharding,
    replicated_exchange_bytes,
)
from lecture_code.training.sharding_report import main


def test_table_wise_goes_largest_first_to_the_least_loaded_rank():
    plan = plan_sharding([100, 90, 10, 10, 5], dim=2, world_size=2)
    assert plan.layouts == (TABLE_WISE,) * 5
    owner = {s.table: s.rank for s in plan.shards}
    assert owner == {0: 0, 1: 1, 2: 1, 3: 0, 4: 1}  # 100 | 90, then 10 → rank 1 (90), 10 → rank 0, 5 → rank 1
    assert plan.rank_bytes() == [110 * 8, 105 * 8]
    assert [s.table for s in plan.shards_of(1)] == [1, 2, 4]  # a rank's shards in table order


def test_row_wise_cuts_contiguous_blocks_of_ceil_rows_over_ranks():
    plan = plan_sharding([10, 3], dim=4, world_size=3, row_wise_above_bytes=100)  # 10 rows = 160 bytes
    assert plan.layouts == (ROW_WISE, TABLE_WISE)
    blocks = [(s.rank, s.row_start, s.row_end) for s in plan.shards if s.table == 0]
    assert sorted(blocks) == [(0, 0, 4), (1, 4, 8), (2, 8, 10)]
    small = plan_sharding([5], dim=1, world_size=4, row_wise_above_bytes=1)
    assert [(s.rank, s.row_start, s.row_end) for s in small.shards] == [(0, 0, 2), (1, 2, 4), (2, 4, 5)]


def test_a_table_above_the_budget_goes_row_wise_and_an_overfull_plan_is_refused():
    plan = plan_sharding([1000, 10], dim=4, world_size=2, memory_budget_bytes=12_000, state_bytes_per_row=4)
    assert plan.layouts == (ROW_WISE, TABLE_WISE)
    assert plan.bytes_per_row == 20 and max(plan.rank_bytes()) <= 12_000
    with pytest.raises(ValueError, match=r"rank \d would hold .* above memory_budget_bytes = 4,000") as err:
        plan_sharding([1000, 10], dim=4, world_size=2, memory_budget_bytes=4_000)
    assert "sharding plan: 2 tables on 2 ranks" in str(err.value)


def test_the_plan_prints_every_table_and_rank():
    text = str(plan_sharding([10, 3], dim=4, world_size=2, row_wise_above_bytes=100))
    assert "table   0            10 rows  row_wise    rank 0 rows 0:5, rank 1 rows 5:10" in text
    assert "table   1             3 rows  table_wise  rank 0 rows 0:3" in text
    assert "rank 1: 1 shards, 80 bytes" in text


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(table_sizes=[]), "table_sizes must name at least one table, got none"),
        (dict(table_sizes=[4, 0]), r"table_sizes\[1\] must be an int >= 1, got 0"),
        (dict(dim=0), "dim must be an int >= 1, got 0"),
        (dict(world_size=1.5), "world_size must be an int >= 1, got 1.5"),
        (dict(memory_budget_bytes=0), "memory_budget_bytes must be > 0 or None, got 0"),
        (dict(state_bytes_per_row=-4), "state_bytes_per_row must be an int >= 0, got -4"),
    ],
)
def test_bad_arguments_name_themselves(kwargs, message):
    args = {"table_sizes": [4, 5], "dim": 2, "world_size": 2, **kwargs}
    with pytest.raises(ValueError, match=message):
        plan_sharding(**args)


def test_shards_that_do_not_cover_a_table_are_refused():
    with pytest.raises(
        ValueError, match=r"shards of table 0 must cover rows 0..10 .* got \[\(0, 4\), \(5, 10\)\]"
    ):
        ShardingPlan((10,), 2, 2, 8, (ROW_WISE,), (TableShard(0, 0, 0, 4), TableShard(0, 1, 5, 10)))


def test_exchange_bytes_count_what_leaves_each_rank():
    plan = plan_sharding([100, 90, 10], dim=2, world_size=2)  # rank 0: table 0; rank 1: tables 1, 2
    B, L = 4, 3
    rank0, rank1 = exchange_bytes(plan, batch_per_rank=B, bag_size=L)
    assert rank0 == {"counts": 40, "ids": 2 * 8 * B * L, "lengths": 2 * 8 * B, "pooled": 1 * B * 2 * 4,
                     "gradients": 2 * B * 2 * 4}  # fmt: skip
    assert rank1 == {"counts": 40, "ids": 8 * B * L, "lengths": 8 * B, "pooled": 2 * B * 2 * 4,
                     "gradients": 1 * B * 2 * 4}  # fmt: skip
    assert replicated_exchange_bytes(3, 2, 2, B, L) == {"ids": 8 * B * 3 * L, "gradients": B * 3 * 2 * 4}


def test_the_report_prints_each_ranks_bytes_of_the_terabyte_tables(capsys):
    """``python -m lecture_code.training.sharding_report``: the 1TB tables at D = 128 outgrow one 80 GB GPU;
    over 4 ranks each holds about a quarter (one table of 48.9M rows sets the fullest)."""
    plan = main(["--tables", "terabyte", "--dim", "128", "--world-size", "4"])
    out = capsys.readouterr().out
    total, held = sum(plan.table_sizes) * 128 * 4, plan.rank_bytes()
    assert sum(plan.table_sizes) == 177_944_275 + 26 and total > 80e9 and sum(held) == total
    assert max(held) < 0.3 * total
    for r, b in enumerate(held):
        assert f"rank {r}: {len(plan.shards_of(r))} shards, {b:,} bytes" in out
    assert f"all tables: {total:,} bytes" in out and f"the fullest rank allocates {max(held):,} bytes" in out
