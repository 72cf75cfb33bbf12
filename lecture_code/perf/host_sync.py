"""Finding 1: a host sync in the training loop (``loss.item()`` every step), measured.

A CUDA GPU runs behind the host: Python queues kernels and moves on, so while the GPU computes step ``k`` the
host is already launching step ``k + 1``. ``loss.item()`` breaks that: it copies the loss device → host and
*waits* for it, i.e. for every kernel queued so far. The GPU then runs dry while the host launches the next
step's kernels from scratch: host time and GPU time add up instead of overlapping. The fix is what
:mod:`lecture_code.training` does: add the loss to a device tensor and read it every ``log_every`` steps.

``CUDA_LAUNCH_BLOCKING=1`` (an environment variable, read when CUDA starts) makes *every* kernel launch wait
for its kernel: a sync after each of the hundreds of launches in a step. It is a debugging switch (an error
is then reported at the launch that caused it, not at some later sync); :func:`measure_launch_blocking`
times a step under it in a child process, to show what it costs.

On a CPU the loss is already on the host: there is nothing to wait for and all rows time the same work.

``python -m lecture_code.perf.host_sync`` prints one timing as a JSON line (the child process runs this).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from lecture_code.perf.step_timing import StepTiming, Variant, time_interleaved, time_train_steps
from lecture_code.perf.workload import Workload, load_workload, make_model, make_step

__all__ = ["ITEM_EVERY_STEP", "LAUNCH_BLOCKING", "ON_DEVICE", "measure_host_sync", "measure_launch_blocking"]

ITEM_EVERY_STEP = "loss.item() every step"
ON_DEVICE = "loss summed on the device"
LAUNCH_BLOCKING = "CUDA_LAUNCH_BLOCKING=1"


def measure_host_sync(
    workload: Workload, steps: int = 20, warmup: int = 3, repeats: int = 3
) -> list[StepTiming]:
    """One model and step, timed two ways with repeats interleaved: reading the loss every step, and
    keeping it on the device (:func:`~lecture_code.perf.step_timing.time_interleaved`)."""
    step = make_step(make_model(workload))
    variants = [
        Variant(ITEM_EVERY_STEP, step, workload.batches, read_loss_every_step=True),
        Variant(ON_DEVICE, step, workload.batches),
    ]
    return time_interleaved(variants, workload.device, steps=steps, warmup=warmup, repeats=repeats)


def measure_launch_blocking(
    data_dir: str | Path | None, preset: str, batch_size: int, steps: int, warmup: int, repeats: int
) -> StepTiming:
    """Time the on-device loop in a child process started with ``CUDA_LAUNCH_BLOCKING=1``."""
    args = [
        sys.executable,
        "-m",
        "lecture_code.perf.host_sync",
        "--preset",
        preset,
        "--batch-size",
        str(batch_size),
        "--steps",
        str(steps),
        "--warmup",
        str(warmup),
        "--repeats",
        str(repeats),
    ] + (["--data", str(data_dir)] if data_dir else [])
    env = {**os.environ, "CUDA_LAUNCH_BLOCKING": "1"}
    done = subprocess.run(args, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"the CUDA_LAUNCH_BLOCKING=1 child failed:\n{done.stderr[-2000:]}")
    row = json.loads(done.stdout.strip().splitlines()[-1])
    return StepTiming.from_row({**row, "label": LAUNCH_BLOCKING})


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description="Time the on-device-loss training loop; print one JSON row.")
    p.add_argument("--data", help="preprocessed Criteo folder (default: the synthetic default data)")
    p.add_argument("--preset", default="small", choices=["small", "kaggle"])
    p.add_argument("--batch-size", type=int, default=512)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--repeats", type=int, default=3)
    a = p.parse_args(argv)
    workload = load_workload(a.data, a.preset, a.batch_size)
    step = make_step(make_model(workload))
    timing = time_train_steps(
        step,
        workload.batches,
        workload.device,
        label=ON_DEVICE,
        steps=a.steps,
        warmup=a.warmup,
        repeats=a.repeats,
    )
    print(json.dumps(timing.as_row(samples=True)))


if __name__ == "__main__":
    main()
