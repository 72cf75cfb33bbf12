"""Read what torch.compile generates: capture inductor's output code and list the fused kernels in it.

Inductor lowers a captured graph to one Python "wrapper" module per graph (forward, backward, or inference).
The wrapper defines the kernels and a ``call(args)`` function that allocates buffers and launches them:

- on a GPU (or on a CPU inside :func:`~lecture_code.triton_cpu.inductor_triton_on_cpu`) each kernel is a
  ``@triton.jit`` function in a string handed to ``async_compile.triton('triton_poi_fused_relu_0', '''…''')``;
- on a CPU it is C++ handed to ``async_compile.cpp_pybinding([...], r'''…''')`` (``cpp_fused_relu_0``);
- matrix multiplies usually stay library calls: ``extern_kernels.addmm(...)`` / ``extern_kernels.bmm(...)``.

Kernel names say what was fused: ``triton_<kind>_fused_<ops>_<n>`` where ``kind`` is ``poi`` (pointwise),
``red`` (reduction), ``per`` (persistent reduction) or ``tem`` (template, e.g. a matmul with an
epilogue), and ``<ops>`` are the sorted ATen ops the kernel covers (``relu_threshold_backward``). The
wrapper also writes ``# Original ATen: [aten.relu, aten.threshold_backward]`` above every launch;
:attr:`Kernel.aten_ops` reads it.

The folder, one concept per module (import from here):

- :mod:`.capture`: compile a function, run it once, keep inductor's wrapper modules;
- :mod:`.generated_code`: :class:`CompiledCode`, the kernels parsed out of it, find and show them;
- :mod:`.op_count`: eager ATen ops against compiled launches and library calls;
- :mod:`.wrapper_launches`: the buffers of ``call()``, what each launch and library call reads and writes;
- :mod:`.concatenation`: how DLRM's interaction input was built (the gathers' buffer, copies, the ReLU);
- :mod:`.bias_relu_v0`: inductor's bias+ReLU kernel captured at one shape, launched raw (notebook 04's v0);
- :mod:`.autotune_log`: the GEMM candidates ``mode="max-autotune"`` benchmarked, and which won;
- :mod:`.recompiles`: how often dynamo compiles a function over calls of new shapes, and why (guards).

Example::

    code = capture_compiled_code(model, dense, sparse)               # forward, inference graph
    code = capture_compiled_code(model, dense, sparse, backward=True,  # forward + backward graphs
                                 loss_fn=lambda logits: F.binary_cross_entropy_with_logits(logits, y))
    print(code.summary())
    show_kernel(find_kernels(code, contains=("relu",))[0])
"""

from lecture_code.compile.autotune_log import autotune_tables, capture_autotuned
from lecture_code.compile.capture import GraphBreaks, capture_compiled_code, explain_graph_breaks
from lecture_code.compile.concatenation import ConcatReport, concatenation_report
from lecture_code.compile.generated_code import KERNEL_KINDS as KERNEL_KINDS
from lecture_code.compile.generated_code import (
    CompiledCode,
    Kernel,
    find_kernels,
    fused_ops,
    parse_kernel_name,
    parse_output_code,
    show_kernel,
)
from lecture_code.compile.op_count import OpCount, compiled_op_count, eager_op_count
from lecture_code.compile.recompiles import Compile, Recompiles, count_compiles, guard_failures
from lecture_code.compile.wrapper_launches import BufferView, Launch, LibraryCall, memory_lines, parse_wrapper

__all__ = [
    "BufferView",
    "Compile",
    "CompiledCode",
    "ConcatReport",
    "GraphBreaks",
    "Kernel",
    "Launch",
    "LibraryCall",
    "OpCount",
    "Recompiles",
    "autotune_tables",
    "capture_autotuned",
    "capture_compiled_code",
    "compiled_op_count",
    "concatenation_report",
    "count_compiles",
    "eager_op_count",
    "explain_graph_breaks",
    "find_kernels",
    "fused_ops",
    "guard_failures",
    "memory_lines",
    "parse_kernel_name",
    "parse_output_code",
    "parse_wrapper",
    "show_kernel",
]
