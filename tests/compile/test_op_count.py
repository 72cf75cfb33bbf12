"""eager_op_count / compiled_op_count: ATen ops eagerly against kernels + library calls compiled."""

from __future__ import annotations

import torch

from lecture_code.compile import capture_compiled_code
from lecture_code.compile.op_count import compiled_op_count, eager_op_count


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
    # the wrapper allocates at least the output [16, 8] and at most every intermediate eager allocates
    eager = eager_op_count(model, x)
    assert 16 * 8 * x.element_size() <= count.bytes_allocated <= eager.bytes_allocated
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
