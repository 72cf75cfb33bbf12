"""The sharding plan of Criteo's real tables and each rank's bytes, printed without a GPU.

The sharded build allocates on each rank exactly its shards of the plan
(:mod:`lecture_code.training.sharded_training`), so the plan's bytes per rank are what each rank's tables
take, at sizes no test machine holds: the 1TB tables (177.9M rows) at ``D = 128`` are 84.9 GiB, more than one
80 GB GPU; over 4 ranks the fullest holds 23.3 GiB (25.1 GB)::

    python -m lecture_code.training.sharding_report --tables terabyte --dim 128 --world-size 4
    python -m lecture_code.training.sharding_report --tables kaggle --dim 16 --world-size 2
"""

from __future__ import annotations

import argparse

from lecture_code.data.schema import criteo_table_rows
from lecture_code.training.sharding_plan import ShardingPlan, plan_sharding

__all__ = ["main"]


def main(argv: list[str] | None = None) -> ShardingPlan:
    """Print the plan of Criteo's Kaggle or 1TB tables (cardinality + 1 rows each) and each rank's bytes."""
    p = argparse.ArgumentParser(
        prog="python -m lecture_code.training.sharding_report",
        description="Which rank holds which rows of Criteo's tables, and the bytes each rank allocates.",
    )
    p.add_argument("--tables", choices=["kaggle", "terabyte"], default="terabyte")
    p.add_argument("--dim", type=int, default=128, help="D (TorchRec's 1TB DLRM: 128)")
    p.add_argument("--world-size", type=int, default=4)
    p.add_argument("--optimizer", choices=["sgd", "rowwise_adagrad"], default="sgd")
    p.add_argument("--budget-gib", type=float, help="per rank: refuse a plan above it")
    p.add_argument("--row-wise-above-mb", type=float, help="tables above this many MiB split by rows")
    args = p.parse_args(argv)
    plan = plan_sharding(
        criteo_table_rows(args.tables), args.dim, args.world_size,
        memory_budget_bytes=args.budget_gib * 2**30 if args.budget_gib else None,
        row_wise_above_bytes=args.row_wise_above_mb * 2**20 if args.row_wise_above_mb else None,
        state_bytes_per_row=4 if args.optimizer == "rowwise_adagrad" else 0,
    )  # fmt: skip
    total, held = sum(plan.table_sizes) * plan.bytes_per_row, plan.rank_bytes()
    print(plan)
    most = max(held)
    print(f"all tables: {total:,} bytes ({total / 2**30:.1f} GiB), what one unsharded rank allocates")
    print(f"sharded: the fullest rank allocates {most:,} bytes ({most / 2**30:.1f} GiB, {most / total:.0%})")
    return plan


if __name__ == "__main__":
    main()
