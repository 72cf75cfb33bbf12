"""Hand-written Triton and CUDA kernels for the lecture, each beside a pure-torch reference.

Importing this package decides the runtime mode first (see :mod:`kernels.runtime`): on a machine without a
GPU it sets ``TRITON_INTERPRET=1`` before any kernel module defines a ``@triton.jit`` function.
This package stands alone: it never imports ``lecture_code``.

One concept per module; import the public function from its module, e.g.
``from kernels.bias_relu import bias_relu`` (the module stays reachable as ``kernels.bias_relu`` for
``inspect.getsource``). References live in :mod:`kernels.reference`; the launch helpers every kernel shares
(argument checks, grid arithmetic, tile rules, the column-sum reduction) in :mod:`kernels.launch`, so kernels
import from there and never from one another.
"""

from kernels.runtime import ensure_mode

MODE = ensure_mode()

from kernels.runtime import default_device, has_gpu, interpreting, sizes  # noqa: E402

__all__ = ["MODE", "default_device", "has_gpu", "interpreting", "sizes"]
