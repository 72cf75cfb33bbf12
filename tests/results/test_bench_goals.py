"""A benchmark that marks its own rows "met" reads the bounds from the one goals table, never a copy."""

from __future__ import annotations

from lecture_code.results.goals import goals_for


def test_the_multi_lora_bench_takes_its_goals_from_the_table():
    from benchmarks import bench_multi_lora

    goals = goals_for("multi_lora")
    as_table = {f"T={T} µs": us for T, (us, _) in bench_multi_lora.GOALS.items() if us is not None}
    as_table |= {f"T={T} % copy": pct for T, (_, pct) in bench_multi_lora.GOALS.items() if pct is not None}
    assert as_table == {g.key: g.bound for g in goals}
    assert set(bench_multi_lora.GOALS) <= {T for T, *_ in bench_multi_lora.GOAL_SHAPES}  # goals are run
