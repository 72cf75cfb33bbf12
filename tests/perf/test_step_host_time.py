"""The step benchmark's host timer and sync count (perf.step_host_time), and its CSV rows (perf.dlrm_step)."""

from __future__ import annotations

import itertools
import math
import sys
import warnings

import pytest
import torch

from lecture_code.perf import step_host_time
from lecture_code.perf.dlrm_step import StepMeasurement, StepResult, load_results
from lecture_code.perf.step_host_time import SYNC_WARNING, host_ms_per_step, sync_sites

CPU = torch.device("cpu")


def test_host_timer_on_a_cpu_times_the_loop_per_step():
    calls = []
    ms, clean = host_ms_per_step(lambda b: calls.append(b), ["a", "b"], CPU, wall_ms=1.0, n=5)
    assert calls == ["a", "b", "a", "b", "a"] and clean and 0 <= ms < 50


class _FakeEvent:
    """A CUDA event whose ``query`` answers from a script: True = the GPU woke before the host finished."""

    answers: list[bool] = []

    def record(self):
        pass

    def query(self):
        return self.answers.pop(0)


@pytest.mark.parametrize(
    ("woke", "clean", "steps_per_try"),
    [
        ([False], True, [8]),  # asleep throughout: the first try counts
        ([True, True, False], True, [8, 4, 2]),  # woke: half the steps and twice the sleep, until asleep
        ([True, True, True, True], False, [8, 4, 2, 1]),  # always woke (a sync): an upper bound, said so
    ],
)
def test_host_timer_retries_until_the_gpu_still_sleeps(monkeypatch, woke, clean, steps_per_try):
    sleeps, issued = [], []
    _FakeEvent.answers = list(woke)
    monkeypatch.setattr(step_host_time.torch.cuda, "Event", _FakeEvent)
    monkeypatch.setattr(step_host_time.torch.cuda, "synchronize", lambda device=None: issued.append("sync"))
    monkeypatch.setattr(step_host_time, "gpu_sleep", sleeps.append)
    _, got_clean = host_ms_per_step(lambda b: issued.append(b), [0], torch.device("cuda"), wall_ms=2.0, n=8)
    assert got_clean is clean
    per_try = [len(list(g)) for k, g in itertools.groupby(issued, key=lambda x: x == "sync") if not k]
    assert per_try == steps_per_try
    # each sleep lasts twice the wall time of its steps (2e6 cycles per ms), doubled on every retry
    assert sleeps == [int(2e6 * 2 * n * 2.0 * 2**i) for i, n in enumerate(steps_per_try)]


def test_no_syncs_counted_on_a_cpu():
    assert len(sync_sites(lambda b: torch.ones(3).sum().item(), None, CPU)) == 0


def _fake_sync_debug_mode(monkeypatch) -> dict:
    """Torch's sync debug mode without a GPU: ``mode`` is what the step sees; it warns as torch would."""
    state = {"mode": "default"}
    monkeypatch.setattr(step_host_time.torch.cuda, "set_sync_debug_mode", lambda m: state.update(mode=m))
    monkeypatch.setattr(step_host_time.torch.cuda, "synchronize", lambda device=None: None)
    return state


def test_syncs_counted_after_a_warm_up_step(monkeypatch):
    state, calls = _fake_sync_debug_mode(monkeypatch), []

    def step(batch):  # waits twice in every step, and once more in its first step only
        calls.append(state["mode"])
        if state["mode"] == "warn":
            for _ in range(2 + (len(calls) == 1)):
                warnings.warn(SYNC_WARNING, stacklevel=1)
            warnings.warn("torch.cuda.synchronize() is not needed here", stacklevel=1)  # not a sync

    assert len(sync_sites(step, None, torch.device("cuda"))) == 2
    assert calls == ["default", "warn"] and state["mode"] == "default"  # the warm-up ran with the mode off
    calls.clear()
    line = step.__code__.co_firstlineno + 4  # the warnings.warn(SYNC_WARNING) line
    assert sync_sites(step, None, torch.device("cuda")) == [f"perf/test_step_host_time.py:{line}"] * 2
    calls.clear()
    # no warm-up: the first step's one-time wait is counted too
    assert len(sync_sites(step, None, torch.device("cuda"), warmup=0)) == 3


def test_sync_debug_mode_is_turned_off_when_the_step_raises(monkeypatch):
    state = _fake_sync_debug_mode(monkeypatch)

    def step(batch):
        if state["mode"] == "warn":
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        sync_sites(step, None, torch.device("cuda"))
    assert state["mode"] == "default"


def _line() -> int:
    """The caller's line number."""
    return sys._getframe(1).f_lineno


@pytest.mark.gpu
def test_syncs_counted_and_host_timer_clean_on_a_gpu():
    cuda = torch.device("cuda")
    x = torch.ones(1000, device=cuda)
    assert len(sync_sites(lambda b: x.sum().item(), None, cuda)) >= 1
    assert sync_sites(lambda b: x.sum().item(), None, cuda) == [f"perf/test_step_host_time.py:{_line()}"]
    assert len(sync_sites(lambda b: x.mul_(1.0), None, cuda)) == 0
    first = []
    assert sync_sites(lambda b: first or first.append(x.sum().item()), None, cuda) == []  # first step only
    ms, clean = host_ms_per_step(lambda b: x.mul_(1.0), [None], cuda, wall_ms=0.1)
    assert clean and ms < 1.0  # one small launch per step: host work only, well under a millisecond
    _, clean = host_ms_per_step(lambda b: x.sum().item(), [None], cuda, wall_ms=0.1, tries=2)
    assert not clean  # .item() waits for the sleeping GPU: the timer says its clock held a wait


# (asleep ms, clean), issue ms, GPU ms, syncs -> (host ms, clean, clock): host-bound without a sync, the
# issue clock waits nowhere; a sync inside the step may hold a wait; a GPU slower than the host may fill the
# queue; no GPU time to compare with; a graph replay, where the asleep clock is smaller; a tie, to the asleep
# clock with its flag; a CPU, with no issue clock
HOST_BOUND_CASES = [
    ((7.7, True), 5.5, 0.9, 0, (5.5, True, "issue")),
    ((7.7, True), 5.5, 0.9, 2, (5.5, False, "issue")),
    ((7.7, True), 0.5, 0.9, 0, (0.5, False, "issue")),
    ((7.7, True), 5.5, None, 0, (5.5, False, "issue")),
    ((0.02, True), 0.3, 0.3, 0, (0.02, True, "asleep")),
    ((0.02, False), 0.02, 0.3, 0, (0.02, False, "asleep")),
    ((0.02, True), math.nan, None, 0, (0.02, True, "asleep")),
]


@pytest.mark.parametrize("asleep, issue, gpu, syncs, expected", HOST_BOUND_CASES)
def test_host_bound_takes_the_smaller_clock_and_says_if_it_can_hold_a_wait(
    asleep, issue, gpu, syncs, expected
):
    assert step_host_time.host_bound(asleep, issue, gpu, syncs) == expected


def test_load_results_reads_old_and_new_csv_rows():
    old = {"implementation": "fused", "ids": "uniform", "ms_per_step": 4.2, "ms_min": 3.5, "ms_max": 4.6,
           "gpu_ms": math.nan, "host_ms": 5.4, "samples_per_s": 4.9e5, "state_mib": math.nan,
           "peak_mib": math.nan, "error": math.nan, "batch": 2048, "device": "x"}  # fmt: skip
    (r,) = load_results([old])
    assert isinstance(r, StepResult) and r.gpu_ms is None and r.peak_mib is None and r.error == ""
    assert math.isnan(r.syncs_per_step) and r.host_clean is None and r.host_ms == 5.4
    assert r.host_timer == ""
    row = {
        **old,
        "gpu_ms": 0.5,
        "syncs_per_step": 2.0,
        "host_clean": False,
        "error": "boom",
        "host_timer": "issue",
    }
    (r,) = load_results([row])
    assert (r.gpu_ms, r.syncs_per_step, r.host_clean, r.error, r.host_timer) == (
        0.5,
        2.0,
        False,
        "boom",
        "issue",
    )
    (r,) = load_results([{**row, "host_timer": math.nan, "sync_sites": math.nan}])  # the columns, cells empty
    assert r.host_timer == "" and r.sync_sites == ""
    (r,) = load_results([{**row, "sync_sites": "training/graphs.py:80"}])
    assert r.sync_sites == "training/graphs.py:80"
    # the old notebook's way of building a StepResult from its fields still works on a new row
    new = {**old, "syncs_per_step": 0.0, "host_clean": True}
    assert StepResult(**{k: new[k] for k in StepResult.__dataclass_fields__}).host_ms == 5.4


def test_step_measurement_is_a_step_result_with_defaults():
    r = StepMeasurement("fused", "uniform", 1.0, 0.9, 1.1, None, 0.5, 2e6, None, None)
    assert isinstance(r, StepResult) and math.isnan(r.syncs_per_step) and r.host_clean is None
