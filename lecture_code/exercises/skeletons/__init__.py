"""Where the learner writes: one module per exercise, holding the code to complete, marked ``TODO``.

- :mod:`.linear_relu`: ``linear_relu(x, weight, bias, out)``, a tiled GEMM whose epilogue is left to write
  (the GEMM notebook; checker :func:`lecture_code.exercises.check_linear_relu`, an answer in
  :mod:`lecture_code.exercises.solutions.linear_relu`).

Import the module, not the function (``from lecture_code.exercises.skeletons import linear_relu``), so the
notebook can print its source and, after an edit, ``importlib.reload`` it.
"""
