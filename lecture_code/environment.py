"""What every notebook prints first: device, versions and runtime mode."""

from __future__ import annotations

import contextlib
import platform
import sys
from collections.abc import Iterator

import torch

from kernels import runtime  # first: it sets TRITON_INTERPRET before triton is imported on a CPU
from lecture_code.paths import REPO_ROOT as REPO_ROOT  # notebooks' paths start here, not in notebooks/


def device() -> torch.device:
    """The device for models and tensors: :func:`kernels.runtime.default_device` decides, for everyone.

    cuda when a GPU is present and Triton is not interpreting; cpu otherwise (also on a GPU machine where the
    user set ``TRITON_INTERPRET=1``: interpreted kernels read CPU tensors).
    """
    return runtime.default_device()


@contextlib.contextmanager
def matmul_precision(precision: str) -> Iterator[None]:
    """``torch.set_float32_matmul_precision(precision)`` inside the block, the previous setting restored after
    (``"high"``: fp32 matmuls may use TF32 tensor cores; torch's default is ``"highest"``)."""
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision(precision)
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(before)


def describe() -> dict[str, str]:
    """Device name, torch/triton/python versions and the kernels' runtime mode."""
    import triton  # only now: ``kernels`` (imported above) has decided the runtime mode

    if runtime.has_gpu():
        name = torch.cuda.get_device_name()
    else:
        name = f"CPU ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)"
    return {
        "device": name,
        "mode": runtime.mode(),
        "sizes": runtime.sizes().name,
        "torch": torch.__version__,
        "triton": triton.__version__,
        "python": sys.version.split()[0],
    }


def print_environment() -> None:
    for key, value in describe().items():
        print(f"{key:>7}: {value}")
