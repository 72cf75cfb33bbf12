"""Where the learner writes: one module per exercise, holding the code to complete, marked ``TODO``.

- :mod:`.linear_relu`: ``linear_relu(x, weight, bias, out)``, a tiled GEMM whose epilogue is left to write
  (the GEMM notebook; checker :func:`lecture_code.exercises.check_linear_relu`, an answer in
  :mod:`lecture_code.exercises.solutions.linear_relu`).
- :mod:`.lora_linear`: ``lora_linear(x, weight, lora_a, lora_b, scale, bias=None)``, an ``autograd.Function``
  whose forward is written and whose backward's dX, dA, dB are left to write (notebook 07; checker
  :func:`lecture_code.exercises.check_lora_linear`).
- :mod:`.lora_da`: ``lora_da(dy, x, lora_b, scale)``, LoRA's dA in torch ops, the leading dimensions
  flattened and the product left to write (notebook 07; checker :func:`lecture_code.exercises.check_lora_da`).
- :mod:`.multi_lora_expand`: ``multi_lora_expand(y, t, lora_b, adapter_ids)``, the launcher written and the
  kernel's body left to write (notebook 08; checker :func:`lecture_code.exercises.check_multi_lora_expand`).
- :mod:`.bias_gelu`: ``bias_gelu(x, bias, out)``, a masked Triton kernel that stores ``x + bias``, its GELU
  left to write (notebook 04; checker :func:`lecture_code.exercises.check_bias_gelu`).
- :mod:`.sgd_rows`: ``sgd_rows(weight, ids, grad, lr)``, exact SGD on the touched rows, its body left to
  write (notebook 05; checker :func:`lecture_code.exercises.check_sgd_rows`).
- :mod:`.nf4_dequantize`: ``dequantize_nf4(packed, absmax, code, shape, blocksize, dtype)``, NF4 codes to 16
  bits in a Triton kernel, its body left to write (the QLoRA notebook; checker
  :func:`lecture_code.exercises.check_nf4_dequantize`).

Import the module, not the function (``from lecture_code.exercises.skeletons import linear_relu``), so the
notebook can print its source and, after an edit, ``importlib.reload`` it.
"""
