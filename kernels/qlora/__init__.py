"""QLoRA: a 4-bit (NF4) frozen base with LoRA adapters.

- :mod:`.nf4` — the NF4 format with double-quantized scales: ``quantize_nf4``, ``dequantize_nf4``,
  ``NF4Weight``; the pure-torch reference of the kernels below.
- :mod:`.dequantize` — NF4 → 16 bits in a kernel of its own (the pass the usual order runs before each GEMM).
- :mod:`.nf4_gemm` — the GEMM over an NF4 weight dequantized on chip, with a low-rank term in its epilogue.
- :mod:`.linear` — ``qlora_linear(x, weight, lora_a, lora_b, scale, version=None)``: the QLoRA linear,
  forward and backward; its versions ``"pairs"`` and ``"elements"`` run the NF4 GEMM (the
  ``fused_kernels::qlora_linear`` op), ``"via_16_bits"`` (the default, by measurement) the op below.
- :mod:`.via_16_bits` — the same layer through a 16-bit copy of W per call (the dequantize pass, then the
  fused LoRA kernels of :mod:`kernels.lora.linear`), the ``fused_kernels::qlora_via_16_bits`` op.

Import from the modules (``from kernels.qlora.linear import qlora_linear``); see :mod:`kernels.pointwise`.
"""
