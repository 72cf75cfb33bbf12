"""Inductor's Triton on a CPU: torch.compile writes Triton kernels on a machine without a GPU.

- :mod:`.inductor_on_cpu`: make torch.compile write Triton on a CPU and run it under the interpreter
  (:func:`run_with_triton_on_cpu`), strict on the known pairs, falling back to C++ (and saying why) elsewhere;
- :mod:`.stub_driver`: a Triton driver that claims an H100 on a machine without a GPU;
- :mod:`.libdevice_shim`: ``libdevice.*`` calls mapped to ``tl`` functions the interpreter can run;
- :mod:`.interpreter_patches`: helpers jitted in the wrong mode swapped for twins, and undoing the
  interpreter's leftovers.

Every torch/Triton internal these modules touch is reached through :mod:`lecture_code.internals`, behind its
one version check (:data:`~lecture_code.internals.KNOWN_TO_WORK`: which torch/Triton pairs were run and
tested).
"""

from lecture_code.triton_cpu.inductor_on_cpu import (
    TritonOnCpuError,
    TritonOnCpuStatus,
    inductor_triton_on_cpu,
    run_with_triton_on_cpu,
    triton_on_cpu_available,
)

__all__ = [
    "TritonOnCpuError",
    "TritonOnCpuStatus",
    "inductor_triton_on_cpu",
    "run_with_triton_on_cpu",
    "triton_on_cpu_available",
]
