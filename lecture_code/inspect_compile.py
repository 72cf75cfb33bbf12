"""Read what torch.compile generates: capture inductor's output code and list the fused kernels in it.

Inductor lowers a captured graph to one Python "wrapper" module per graph (forward, backward, or inference).
The wrapper defines the kernels and a ``call(args)`` function that allocates buffers and launches them:

- on a GPU (or on a CPU inside :func:`lecture_code.triton_on_cpu.inductor_triton_on_cpu`) each kernel is a
  ``@triton.jit`` function in a string handed to ``async_compile.triton('triton_poi_fused_relu_0', '''…''')``;
- on a CPU it is C++ handed to ``async_compile.cpp_pybinding([...], r'''…''')`` (``cpp_fused_relu_0``);
- matrix multiplies usually stay library calls: ``extern_kernels.addmm(...)`` / ``extern_kernels.bmm(...)``.

Kernel names say what was fused: ``triton_<kind>_fused_<ops>_<n>`` where ``kind`` is ``poi`` (pointwise),
``red`` (reduction), ``per`` (persistent reduction) or ``tem`` (template, e.g. a matmul with an
epilogue), and ``<ops>`` are the sorted ATen ops the kernel covers (``relu_threshold_backward``). The
wrapper also writes ``# Original ATen: [aten.relu, aten.threshold_backward]`` above every launch;
:attr:`Kernel.aten_ops` reads it.

Capturing lives in :mod:`lecture_code.compile_capture`, parsing and showing kernels in
:mod:`lecture_code.compile_kernels`. Import from here.

Example::

    code = capture_compiled_code(model, dense, sparse)               # forward, inference graph
    code = capture_compiled_code(model, dense, sparse, backward=True,  # forward + backward graphs
                                 loss_fn=lambda logits: F.binary_cross_entropy_with_logits(logits, y))
    print(code.summary())
    show_kernel(find_kernels(code, contains=("relu",))[0])
"""

from lecture_code.compile_capture import CompiledCode, capture_compiled_code, explain_graph_breaks
from lecture_code.compile_kernels import KERNEL_KINDS as KERNEL_KINDS
from lecture_code.compile_kernels import (
    Kernel,
    find_kernels,
    fused_ops,
    parse_kernel_name,
    parse_output_code,
    show_kernel,
)

__all__ = [
    "CompiledCode",
    "Kernel",
    "capture_compiled_code",
    "explain_graph_breaks",
    "find_kernels",
    "fused_ops",
    "parse_kernel_name",
    "parse_output_code",
    "show_kernel",
]
