"""QLoRA: a 4-bit (NF4) frozen base with LoRA adapters.

- :mod:`.nf4` — the NF4 format with double-quantized scales: ``quantize_nf4``, ``dequantize_nf4``,
  ``NF4Weight``; the pure-torch reference of the fused kernels.

Import from the modules (``from kernels.qlora.nf4 import quantize_nf4``); see :mod:`kernels.pointwise`.
"""
