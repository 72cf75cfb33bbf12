"""Hand-written Triton and CUDA kernels for the lecture, each beside a pure-torch reference.

Importing this package decides the runtime mode first (see :mod:`kernels.runtime`): on a machine without a
GPU it sets ``TRITON_INTERPRET=1`` before any kernel module defines a ``@triton.jit`` function.
This package stands alone: it never imports ``lecture_code``.

One folder per concept, one concept per file:

- ``pointwise/`` vector add, bias + ReLU, add-mul-activation (notebook 04)
- ``mlp/`` the fused MLP (notebook 04)
- ``dlrm/`` the table-batched embedding and the dot interaction (notebook 05)
- ``gemm/`` a GEMM built up one idea at a time: tiles, grouped order, persistent grid, descriptors, low-rank
  epilogue (the GEMM notebook, before LoRA)
- ``lora/`` the fused LoRA linear: its GEMM, low-rank branch, skinny passes, pre-tuning (notebook 07)
- ``multi_lora/`` many adapters in one batch: shrink/expand and their metadata (notebook 08)
- ``cuda/`` the same pointwise kernels in CUDA C++ (notebook 04)

At the top, only what every folder shares: :mod:`kernels.runtime` (GPU or interpreter, the device),
:mod:`kernels.launch` (argument checks, grid and tile arithmetic, the column-sum reduction),
:mod:`kernels.fast_launch` (cached launches), :mod:`kernels.configs` (config carriers, the autotune cache),
:mod:`kernels.reference` (the pure-torch definitions of correct) and :mod:`kernels.internals` (every Triton
internal used, behind one version check). Folders import from the top, never from one another.

Import a public function from its module, e.g. ``from kernels.pointwise.bias_relu import bias_relu``: the
module stays reachable as ``kernels.pointwise.bias_relu`` for ``inspect.getsource``.
"""

from kernels.runtime import ensure_mode

MODE = ensure_mode()

from kernels.runtime import default_device, has_gpu, interpreting, sizes  # noqa: E402

__all__ = ["MODE", "default_device", "has_gpu", "interpreting", "sizes"]
