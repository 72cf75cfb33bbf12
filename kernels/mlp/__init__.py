"""The fused MLP: two linear layers and their activations in one kernel, the hidden layer kept on chip
(notebook 04's last section).

- :mod:`.fused_mlp` — ``fused_mlp(x, w1, b1, w2, b2, ...)`` and ``MAX_HIDDEN``, the widest hidden layer
  that stays on chip.

Import from the module (``from kernels.mlp.fused_mlp import fused_mlp``): see :mod:`kernels.pointwise`.
"""
