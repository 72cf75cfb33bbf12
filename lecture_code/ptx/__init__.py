"""From a ``@triton.jit`` kernel to PTX and SASS for an H100, on a machine without a GPU.

Triton compiles in stages, each a text you can read::

    Python AST ─► ttir (Triton IR) ─► ttgir (with GPU layouts) ─► llir (LLVM IR) ─► ptx ─► cubin ─► SASS

Compiling needs no GPU, only a *target*: ``triton.compile(ASTSource(fn, signature, constexprs, attrs),
target=GPUTarget("cuda", 90, 32))`` runs every stage for sm_90 (the H100) in about a second; ``ptxas`` and
``cuobjdump`` ship inside the triton wheel, so the cubin and its SASS come too.

Two things worth finding in the output:

- **Vectorized memory access.** ``ld.global.v4.b32`` loads four 32-bit values (16 bytes) per thread in one
  instruction; ``ld.global.b32`` loads one. Triton emits the wide form only when it can prove that four
  neighbours are 16-byte aligned and masked alike. The launcher gives it the facts with the
  ``tt.divisibility = 16`` attribute: on every pointer whose address is a multiple of 16 (fresh torch
  tensors always are) and every integer argument whose value is (``n = 4096`` yes, ``n = 4099`` no: then
  ``offsets < n`` may cut a group of four, and the loads stay scalar). :func:`compile_for_gpu` assumes
  both by default; ``divisible_by_16=("x_ptr", "y_ptr", "out_ptr")`` shows what an odd ``n`` gets.
- **Tensor cores.** On sm_90 a ``tl.dot`` becomes ``wgmma.mma_async`` (Hopper's warpgroup MMA); on sm_80 it is
  ``mma.sync``. :func:`tensor_core_instructions` greps for both.

The folder: compiling in :mod:`.compiler`, reading PTX and SASS in :mod:`.reader`; turning interpreted
kernels compilable lives with the rest of the interpreter's machinery in
:mod:`lecture_code.triton_cpu.interpreter_patches`. Import from here.
"""

from lecture_code.ptx.compiler import compile_for_gpu, compile_generated_kernel
from lecture_code.ptx.reader import (
    explain_vector_loads,
    find_cuobjdump,
    find_instructions,
    global_memory_accesses,
    sass,
    sass_global_accesses,
    tensor_core_instructions,
    uses_wgmma,
)
from lecture_code.triton_cpu.interpreter_patches import jit_function

__all__ = [
    "compile_for_gpu",
    "compile_generated_kernel",
    "explain_vector_loads",
    "find_cuobjdump",
    "find_instructions",
    "global_memory_accesses",
    "jit_function",
    "sass",
    "sass_global_accesses",
    "tensor_core_instructions",
    "uses_wgmma",
]
