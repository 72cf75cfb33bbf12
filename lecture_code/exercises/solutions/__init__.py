"""One answer per exercise, imported by the notebooks' exercise cells until the learner writes their own.

- :mod:`.bias_gelu`: ``bias_gelu(x, bias, out)``, a Triton kernel with the row's tail masked (notebook 04);
- :mod:`.sgd_rows`: ``sgd_rows(weight, ids, grad, lr)``, exact SGD on the touched rows in torch ops
  (notebook 05);
- :mod:`.linear_relu`: ``linear_relu(x, weight, bias, out)``, a tiled GEMM with bias + ReLU in its epilogue
  (the GEMM notebook);
- :mod:`.lora_linear`: ``lora_linear(x, weight, lora_a, lora_b, scale, bias=None)``, a LoRA linear with a
  hand-written backward (notebook 07);
- :mod:`.lora_da`: ``lora_da(dy, x, lora_b, scale)``, LoRA's dA in torch ops (notebook 07);
- :mod:`.multi_lora_expand`: ``multi_lora_expand(y, t, lora_b, adapter_ids)``, a Triton kernel that skips
  rows with id −1 and masks the column tail (notebook 08);
- :mod:`.nf4_dequantize`: ``dequantize_nf4(packed, absmax, code, shape, blocksize, dtype)``, NF4 codes to 16
  bits, the high nibble first, each block's absmax (the QLoRA notebook).
"""

from lecture_code.exercises.solutions.bias_gelu import bias_gelu
from lecture_code.exercises.solutions.linear_relu import linear_relu
from lecture_code.exercises.solutions.lora_da import lora_da
from lecture_code.exercises.solutions.lora_linear import lora_linear
from lecture_code.exercises.solutions.multi_lora_expand import multi_lora_expand
from lecture_code.exercises.solutions.nf4_dequantize import dequantize_nf4
from lecture_code.exercises.solutions.sgd_rows import sgd_rows

__all__ = [
    "bias_gelu",
    "dequantize_nf4",
    "linear_relu",
    "lora_da",
    "lora_linear",
    "multi_lora_expand",
    "sgd_rows",
]
