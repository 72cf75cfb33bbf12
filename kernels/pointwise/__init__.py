"""Pointwise kernels: one pass over memory where eager PyTorch makes several (notebook 04).

- :mod:`.vector_add` — ``vector_add(x, y)``: the smallest Triton kernel, the anatomy every other file repeats.
- :mod:`.bias_relu` — ``bias_relu(x, bias)``: ``relu(x + bias)`` forward and backward (notebook 04's v1).
- :mod:`.add_mul_act` — ``add_mul_act(x, bias, y, alpha, activation)``: ``act(x + bias + alpha·y)``, and
  its backward.

Import a function from its module (``from kernels.pointwise.bias_relu import bias_relu``): the package
does not re-export them, so ``kernels.pointwise.bias_relu`` stays the module (its source is what notebooks
print), never the function of the same name.
"""
