"""Hand-written Triton and CUDA kernels for the lecture, each beside a pure-torch reference.

Importing this package decides the runtime mode first (see :mod:`kernels.runtime`): on a machine without a
GPU it sets ``TRITON_INTERPRET=1`` before any kernel module defines a ``@triton.jit`` function.
This package stands alone: it never imports ``lecture_code``.
"""

from kernels.runtime import ensure_mode

MODE = ensure_mode()

from kernels.runtime import default_device, has_gpu, interpreting, sizes  # noqa: E402
from kernels.vector_add import vector_add  # noqa: E402

__all__ = ["MODE", "default_device", "has_gpu", "interpreting", "sizes", "vector_add"]
