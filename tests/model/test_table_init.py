"""DLRM's table init in seeded blocks (lecture_code.model.table_init): any rows drawn alone equal the same
rows of the whole table; one seed gives the same tables in every backend (test_model_backends.py)."""

from __future__ import annotations

import math

import pytest
import torch

from lecture_code.model.table_init import BLOCK_ROWS, draw_table_seed, init_table_rows_

N, D = 2 * BLOCK_ROWS + 123, 3  # three blocks, the last partial


def _table(seed: int, table: int = 1) -> torch.Tensor:
    return init_table_rows_(torch.full((N, D), float("nan")), seed, table, 0, N)


@pytest.mark.parametrize(
    "start, end", [(0, N), (5, 17), (BLOCK_ROWS - 3, BLOCK_ROWS + 4), (BLOCK_ROWS - 1, N), (N - 1, N), (7, 7)]
)
def test_rows_drawn_alone_equal_the_rows_of_the_whole_table(start, end):
    rows = init_table_rows_(torch.full((end - start, D), float("nan")), 5, 1, start, N)
    assert torch.equal(rows, _table(5)[start:end])


def test_draws_fill_dlrms_range_and_differ_by_seed_table_and_block():
    whole, bound = _table(5), math.sqrt(1 / N)
    assert not whole.isnan().any() and whole.abs().max() <= bound and whole.abs().max() > 0.99 * bound
    assert not torch.equal(whole, _table(6)) and not torch.equal(whole, _table(5, table=2))
    assert not torch.equal(whole[:BLOCK_ROWS], whole[BLOCK_ROWS : 2 * BLOCK_ROWS])


def test_the_seed_is_one_draw_from_the_global_generator_and_meta_tables_stay_empty():
    torch.manual_seed(3)
    first = draw_table_seed()
    after = torch.rand(1)
    torch.manual_seed(3)
    assert draw_table_seed() == first and torch.equal(torch.rand(1), after)
    meta = torch.empty(N, D, device="meta")
    assert init_table_rows_(meta, 5, 0, 0, N) is meta
    with pytest.raises(ValueError, match="rows 10:20 are not inside a table of 15"):
        init_table_rows_(torch.empty(10, D), 5, 0, 10, 15)
