"""eager_op_count / compiled_op_count: ATen ops eagerly against kernels + library calls compiled."""

from __future__ import annotations

import ast
import math

import torch

from lecture_code.compile import CompiledCode, capture_compiled_code, parse_wrapper
from lecture_code.compile.op_count import compiled_op_count, eager_op_count

GEMMS = {"mm", "addmm", "bmm", "baddbmm"}


def _declared_bytes(wrapper: str) -> int:
    """Bytes of the ``bufN = empty_strided_*(shape, stride, dtype)`` lines of ``call()``, parsed with ast."""
    total = 0
    for line in wrapper[wrapper.find("def call(") :].splitlines():
        if " = empty_strided" not in line:
            continue
        alloc = ast.parse(line.strip()).body[0].value
        dtype = (
            alloc.args[2]
            if len(alloc.args) > 2
            else next(k.value for k in alloc.keywords if k.arg == "dtype")
        )
        total += math.prod(ast.literal_eval(alloc.args[0])) * getattr(torch, dtype.attr).itemsize
    return total


def _gemm_output_bytes(wrapper: str, code: CompiledCode, element_size: int) -> int:
    """Bytes of the ``out=`` buffers of the wrapper's library GEMMs (``extern_kernels.mm(…, out=buf0)``)."""
    parsed = parse_wrapper(wrapper, code.kernels)
    outs = [parsed.view(c.out) for c in parsed.library_calls if c.name in GEMMS and c.out]
    return sum(math.prod(v.shape) * element_size for v in outs if v is not None)


def test_eager_count_of_an_mlp(mlp):
    model, x = mlp  # Linear(13, 32) → ReLU → Linear(32, 8) → ReLU, x [16, 13]
    count = eager_op_count(model, x)
    assert count.ops == {"addmm": 2, "relu": 2}, count.ops
    assert count.views["t"] == 2  # the weight transposes: views, no kernel
    assert count.launches == 4
    s = x.element_size()
    assert count.bytes_allocated == 2 * 16 * 32 * s + 2 * 16 * 8 * s  # addmm and relu results, per layer
    with_grad = eager_op_count(model, x, no_grad=False)
    assert with_grad.launches >= count.launches


def test_eager_count_sees_every_op(device):
    x = torch.randn(5, 7, device=device)
    count = eager_op_count(lambda t: torch.sigmoid(t * 2.0 + 1.0).sum(), x)
    assert set(count.ops) == {"mul", "add", "sigmoid", "sum"} and count.launches == 4, count.ops


def test_compiled_count_matches_the_capture(mlp):
    model, x = mlp
    code = capture_compiled_code(model, x)
    count = compiled_op_count(code)
    assert count.launches >= len(code.kernels) + len(code.extern_calls)  # a kernel may be launched twice
    assert {n for n in count.ops if not n.startswith("extern:")} == {k.name for k in code.kernels}
    # the bytes are those of the buffers call() declares, read here another way (one line at a time, with ast)
    assert count.bytes_allocated == sum(_declared_bytes(text) for text in code.files)
    # The wrapper allocates at least the output [16, 8]. At most: eager's results (addmm's and relu's, per
    # layer) plus one buffer the size of each GEMM's output. Inductor lowers addmm either as a library addmm
    # (bias inside the GEMM) or as extern mm + a pointwise bias(+ReLU) kernel, which writes in place into the
    # mm's buffer or into a buffer of its own; which one it picks depends on its passes and autotuning. On an
    # H200 this capture allocated 2560 bytes alone (mm + bias-ReLU in place) and 5632 in one whole-suite run,
    # over eager's 5120: eager's bytes are no bound whatever inductor picks.
    eager = eager_op_count(model, x)
    gemm_outputs = sum(_gemm_output_bytes(text, code, x.element_size()) for text in code.files)
    assert 16 * 8 * x.element_size() <= count.bytes_allocated <= eager.bytes_allocated + gemm_outputs
    assert count.launches <= eager.launches
    assert compiled_op_count(code, graph="backward").launches == 0  # an inference capture has no backward


def test_compiled_count_reads_launches_and_allocations():
    from lecture_code.compile.capture import CompiledCode
    from lecture_code.compile.generated_code import parse_output_code

    # a C++ relu kernel inductor reuses for two layers, two addmm, an ATen fallback, two allocations
    wrapper = '''# AOT ID: ['0_inference']
cpp_fused_relu_0 = async_compile.cpp_pybinding(['float*'], r"""
extern "C" void kernel(float* in_out_ptr0) {}
""")

def call(args):
    buf0 = empty_strided_cuda((64, 16), (16, 1), torch.float32)
    buf1 = empty_strided_cpu((1664, ), (1, ), torch.int64)
    extern_kernels.addmm(a, b, c, out=buf0)
    cpp_fused_relu_0(buf0)
    buf2 = torch.ops.aten.searchsorted.Tensor(keys, buf1, out_int32=False)
    extern_kernels.addmm(a, buf0, c, out=buf3)
    cpp_fused_relu_0(buf3)
'''.replace('"""', "'''")
    kernels, extern = parse_output_code([wrapper])
    assert [k.name for k in kernels] == ["cpp_fused_relu_0"]
    count = compiled_op_count(CompiledCode(files=[wrapper], kernels=kernels, extern_calls=extern))
    assert count.bytes_allocated == 64 * 16 * 4 + 1664 * 8
    assert count.ops == {"extern:addmm": 2, "cpp_fused_relu_0": 2, "extern:searchsorted": 1}
    assert count.launches == 5
