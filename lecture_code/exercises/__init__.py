"""The exercises at the end of notebooks 04–09: a checker per exercise, the shared checking, the solutions.

- :mod:`.checker`: compare an answer with the reference and name what is wrong (shape, dtype, NaN, the first
  wrong element); :class:`~.checker.Report`, one line per case.
- :mod:`.guards`: buffers with a guard region, to catch reads and writes past a tensor's end (a missing mask).
- Notebook 04: :mod:`.bias_gelu` (``check_bias_gelu``: bias + GELU in Triton, the tail masked).
- Notebook 05: :mod:`.sgd_rows` (``check_sgd_rows``: exact SGD on the touched rows, repeated ids summed).
- Notebook 06 (the GEMM notebook): :mod:`.linear_relu` (``check_linear_relu``: bias + ReLU in a GEMM's
  epilogue; the learner's skeleton in :mod:`.skeletons`).
- Notebook 07: :mod:`.lora_linear` (``check_lora_linear``: the whole hand-written backward) and
  :mod:`.lora_da` (``check_lora_da``: dA alone).
- Notebook 08: :mod:`.multi_lora_expand` (``check_multi_lora_expand``: the multi-LoRA expand, rows with
  adapter id −1 untouched, the column tail masked).
- Notebook 09: :mod:`.nf4_dequantize` (``check_nf4_dequantize``: NF4 → 16 bits in a Triton kernel, the
  even element in the high nibble, each element scaled by its block's absmax, the tail masked).
- :mod:`.solutions`: one answer per exercise, tested in CI like any kernel.

A new exercise follows the same pattern: a module with its cases and a ``check_*`` function built on
:mod:`.checker` (and :mod:`.guards` where a kernel writes into a given output), a solution in
:mod:`.solutions`, a test in ``tests/exercises/`` that plants the usual mistakes.
"""

from lecture_code.exercises.bias_gelu import check_bias_gelu
from lecture_code.exercises.checker import Report
from lecture_code.exercises.linear_relu import check_linear_relu
from lecture_code.exercises.lora_da import check_lora_da
from lecture_code.exercises.lora_linear import check_lora_linear
from lecture_code.exercises.multi_lora_expand import check_multi_lora_expand
from lecture_code.exercises.nf4_dequantize import check_nf4_dequantize
from lecture_code.exercises.sgd_rows import check_sgd_rows

__all__ = [
    "Report",
    "check_bias_gelu",
    "check_linear_relu",
    "check_lora_da",
    "check_lora_linear",
    "check_multi_lora_expand",
    "check_nf4_dequantize",
    "check_sgd_rows",
]
