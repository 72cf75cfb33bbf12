"""time_train_steps times what it is given and counts what one step allocates."""

from __future__ import annotations

import pytest
import torch

from lecture_code.perf.step_timing import peak_step_bytes, time_train_steps

CPU = torch.device("cpu")


def test_peak_step_bytes_sees_a_known_allocation():
    def step():
        a = torch.ones(1 << 20)  # 4 MiB, alive while b is made
        b = torch.ones(1 << 19)  # 2 MiB
        return float(a[0] + b[0])

    peak = peak_step_bytes(step, CPU)
    assert 6 * 2**20 <= peak < 7 * 2**20


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
    assert timing.ms_per_step > 0 and timing.first_step_s > 0 and timing.peak_step_mb >= 0
    assert not reads  # the loss stays where it is
    time_train_steps(step, [1], CPU, steps=3, warmup=0, repeats=1, read_loss_every_step=True)
    assert len(reads) == 1 + 3 + 1


@pytest.mark.parametrize("kwargs", [{"steps": 0}, {"repeats": 0}, {"warmup": -1}])
def test_time_train_steps_rejects_bad_counts(kwargs):
    with pytest.raises(ValueError):
        time_train_steps(lambda b: torch.zeros(()), [0], CPU, **kwargs)
    with pytest.raises(ValueError, match="at least one batch"):
        time_train_steps(lambda b: torch.zeros(()), [], CPU)
