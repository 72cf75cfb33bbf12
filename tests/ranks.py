"""Where a multi-process test's ranks run the fused kernels: the device its own machine gives them.

Without a GPU: gloo processes on the CPU, the kernels under Triton's interpreter. On a GPU machine the
interpreter is off (kernels/runtime.py), so CPU tensors cannot reach a kernel: each rank takes a GPU of its
own (NCCL), and the test skips, saying why, where there are fewer GPUs than ranks.
"""

from __future__ import annotations

import pytest
import torch

from kernels import runtime


def ranks_device(world: int) -> str:
    """``"cpu"`` or ``"cuda"`` for ``world`` ranks (skips the test when the GPUs are too few)."""
    if runtime.mode() != "gpu":
        return "cpu"
    gpus = torch.cuda.device_count()
    if gpus < world:
        pytest.skip(
            f"{world} ranks of the fused kernels need {world} GPUs on a GPU machine (NCCL, one each; the "
            f"interpreter that runs them on CPU ranks is off there); this one has {gpus}"
        )
    return "cuda"
