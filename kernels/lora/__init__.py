"""The fused LoRA linear, ``y = x Wᵀ + b + s·(x Aᵀ) Bᵀ``, forward and backward (notebook 07).

- :mod:`.linear` — ``lora_linear(x, weight, lora_a, lora_b, scale, ...)``, the public function: checks,
  the version ladder (``VERSIONS``, ``choose_version``), the autograd formulas, config lookup.
- :mod:`.gemm` — ``lowrank_gemm``: the GEMM with the low-rank term in its epilogue and its shrink in
  producer programs (v2, v3), and its tile rule ``gemm_rule``.
- :mod:`.branch` — ``lora_branch_``: the low-rank branch alone, added into a given output (v1).
- :mod:`.skinny` — ``skinny_products``: ``u = P·L`` and ``D = Pᵀ·T`` in one pass over a wide P (x or dY).
- :mod:`.small_m` — ``small_m_forward``/``small_m_backward``: the whole layer, base included, in one kernel
  each way at M ≤ 64 (``version="small"``).
- :mod:`.tune` — ``pretune`` and ``python -m kernels.lora.tune``: time the candidates, fill the cache.

Import from the modules (``from kernels.lora.linear import lora_linear``); see :mod:`kernels.pointwise`.
"""
