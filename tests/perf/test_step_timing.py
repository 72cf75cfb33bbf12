"""time_train_steps / time_interleaved time what they are given, in the order they say, and count what one
step allocates."""

from __future__ import annotations

import pytest
import torch

from lecture_code.perf.step_timing import (
    StepTiming,
    Variant,
    peak_step_bytes,
    time_interleaved,
    time_train_steps,
)

CPU = torch.device("cpu")


def test_peak_step_bytes_sees_a_known_allocation():
    def step():
        a = torch.ones(1 << 20)  # 4 MiB, alive while b is made
        b = torch.ones(1 << 19)  # 2 MiB
        return float(a[0] + b[0])

    peak = peak_step_bytes(step, CPU)
    assert 6 * 2**20 <= peak < 7 * 2**20


def test_peak_step_bytes_ignores_frees_of_older_blocks():
    """A block allocated under an earlier profile and freed in this step does not lower the step's peak."""
    holder = {}
    peak_step_bytes(lambda: holder.setdefault("old", torch.ones(1 << 21)), CPU)  # 8 MiB, seen by a profile

    def step():
        holder.pop("old")  # frees the 8 MiB: allocated before this step
        a = torch.ones(1 << 19)  # 2 MiB
        return float(a[0])

    assert 2 * 2**20 <= peak_step_bytes(step, CPU) < 3 * 2**20


def test_time_train_steps_runs_every_step_and_reads_loss_when_asked(monkeypatch):
    seen = []

    def step(batch):
        seen.append(batch)
        return torch.tensor(float(batch))

    reads = []
    original_item = torch.Tensor.item
    monkeypatch.setattr(torch.Tensor, "item", lambda self: reads.append(1) or original_item(self))
    timing = time_train_steps(step, [1, 2, 3], CPU, label="x", steps=4, warmup=2, repeats=2)
    assert len(seen) == 1 + 2 + 2 * 4 + 1  # first call, warm-up, repeats, the memory step
    assert seen[:4] == [1, 2, 3, 1]  # batches are cycled
    assert timing.label == "x" and timing.steps == 4 and timing.repeats == 2
    assert len(timing.samples_ms) == 2 and timing.first_step_s > 0 and timing.peak_step_mib >= 0
    assert not reads  # the loss stays where it is
    time_train_steps(step, [1], CPU, steps=3, warmup=0, repeats=1, read_loss_every_step=True)
    assert len(reads) == 1 + 3 + 1


def test_time_interleaved_alternates_repeats_and_keeps_each_one():
    """A B A B ...: every repeat of every variant runs its ``steps`` steps, in the interleaved order."""
    calls = []

    def make(name, sleep_s):
        def step(batch):
            calls.append(name)
            torch.ones(1 << 12).sum()  # a little real work
            if sleep_s:
                import time

                time.sleep(sleep_s)
            return torch.zeros(())

        return step

    variants = [Variant("A", make("A", 0.0), [0]), Variant("B", make("B", 0.004), [0])]
    a, b = time_interleaved(variants, CPU, steps=3, warmup=1, repeats=4)
    # First step and warm-up per variant, then 4 rounds of (3 x A, 3 x B), then one memory step each.
    assert calls == ["A", "A", "B", "B"] + (["A"] * 3 + ["B"] * 3) * 4 + ["A", "B"]
    for timing in (a, b):
        assert len(timing.samples_ms) == 4 and timing.repeats == 4 and timing.steps == 3
        assert timing.ms_min <= timing.ms_per_step <= timing.ms_max
        assert timing.ms_per_step == pytest.approx(
            sorted(timing.samples_ms)[1] / 2 + sorted(timing.samples_ms)[2] / 2
        )
    assert b.ms_min >= 4.0 > a.ms_min  # B sleeps 4 ms a step: its every repeat shows it, A's does not
    for timing in (a, b):  # the issue clock stops before the loop's final wait: never above the wall clock
        assert len(timing.issue_samples_ms) == 4
        assert all(i <= w for i, w in zip(timing.issue_samples_ms, timing.samples_ms, strict=True))
    assert b.issue_ms >= 4.0 > a.issue_ms
    assert [t.label for t in (a, b)] == ["A", "B"]


def test_step_timing_rows_round_trip():
    timing = StepTiming("x", 2.0, 1.5, 0.1, 10, 3, (2.5, 2.0, 1.0))
    row = timing.as_row()
    assert (row["ms_min"], row["ms_per_step"], row["ms_max"]) == (1.0, 2.0, 2.5)
    assert "samples_ms" not in row and timing.as_row(samples=True)["samples_ms"] == [2.5, 2.0, 1.0]
    assert StepTiming.from_row(timing.as_row(samples=True)) == timing


@pytest.mark.parametrize("kwargs", [{"steps": 0}, {"repeats": 0}, {"warmup": -1}])
def test_time_train_steps_rejects_bad_counts(kwargs):
    with pytest.raises(ValueError):
        time_train_steps(lambda b: torch.zeros(()), [0], CPU, **kwargs)
    with pytest.raises(ValueError, match="at least one batch"):
        time_train_steps(lambda b: torch.zeros(()), [], CPU)
    with pytest.raises(ValueError, match="at least one variant"):
        time_interleaved([], CPU)


@pytest.mark.gpu
def test_issue_clock_stops_before_the_gpu_finishes():
    cuda = torch.device("cuda")
    big = torch.ones(2**28, device=cuda)  # 1 GiB: each sum reads it in ≥ 0.2 ms at ≤ 5 TB/s; issuing takes µs
    (t,) = time_interleaved(
        [Variant("sum", lambda b: big.sum(), [None])], cuda, steps=50, warmup=2, repeats=3
    )
    assert t.ms_per_step > 0.2 and t.issue_ms < 0.5 * t.ms_per_step  # the host ran ahead of the GPU
