"""Inductor's Triton on a CPU, and the one place that touches torch/Triton internals.

- :mod:`.internals`: the private torch/Triton names the rest of ``lecture_code`` uses, and the one version
  check (:data:`~.internals.KNOWN_TO_WORK`: which torch/Triton pairs were run and tested);
- :mod:`.inductor_on_cpu`: make torch.compile write Triton on a CPU and run it under the interpreter
  (:func:`run_with_triton_on_cpu`), strict on the known pairs, falling back to C++ (and saying why) elsewhere;
- :mod:`.stub_driver`: a Triton driver that claims an H100 on a machine without a GPU;
- :mod:`.libdevice_shim`: ``libdevice.*`` calls mapped to ``tl`` functions the interpreter can run;
- :mod:`.interpreter_patches`: helpers jitted in the wrong mode swapped for twins, and undoing the
  interpreter's leftovers.
"""

from lecture_code.triton_cpu.inductor_on_cpu import (
    TritonOnCpuError,
    TritonOnCpuStatus,
    inductor_triton_on_cpu,
    run_with_triton_on_cpu,
    triton_on_cpu_available,
)
from lecture_code.triton_cpu.internals import KNOWN_TO_WORK, describe_versions, versions_known_to_work

__all__ = [
    "KNOWN_TO_WORK",
    "TritonOnCpuError",
    "TritonOnCpuStatus",
    "describe_versions",
    "inductor_triton_on_cpu",
    "run_with_triton_on_cpu",
    "triton_on_cpu_available",
    "versions_known_to_work",
]
