"""capture_compiled_code: the generated code of an MLP, a DLRM forward and a training step, parsed."""

from __future__ import annotations

import io
import logging

import pytest
import torch
from compile_test_models import bce_loss, eager_grads

from lecture_code.compile import (
    CompiledCode,
    capture_compiled_code,
    explain_graph_breaks,
    find_kernels,
    fused_ops,
    parse_kernel_name,
    parse_output_code,
    show_kernel,
)

# A wrapper module trimmed to the parts the parser reads: one Triton and one C++ kernel, their launches.
WRAPPER = '''# AOT ID: ['0_forward']
from torch._inductor.select_algorithm import extern_kernels

# kernel path: /tmp/torchinductor_someone/ab/cabc.py
# Topologically Sorted Source Nodes: [input_2], Original ATen: [aten.addmm, aten.relu]
triton_poi_fused_addmm_relu_0 = async_compile.triton('triton_poi_fused_addmm_relu_0', """
import triton

@triton_heuristics.pointwise(
    size_hints={'x': 512},
    triton_meta={'signature': {'in_out_ptr0': '*fp32', 'xnumel': 'i32', 'XBLOCK': 'constexpr'}},
)
@triton.jit
def triton_poi_fused_addmm_relu_0(in_out_ptr0, xnumel, XBLOCK : tl.constexpr):
    xoffset = tl.program_id(0) * XBLOCK
""", device_str='cuda')

cpp_fused_relu_threshold_backward_1 = async_compile.cpp_pybinding(['float*'], r"""
#include "/tmp/torchinductor_someone/xy/cpp_prefix.h"
extern "C" void kernel(float* in_out_ptr0) {}
""")

def call(args):
    extern_kernels.mm(buf0, arg1_1, out=buf1)
    # Topologically Sorted Source Nodes: [input_2], Original ATen: [aten.addmm, aten.relu]
    triton_poi_fused_addmm_relu_0.run(buf1, 512, stream=stream0)
    buf2 = torch.ops.aten.searchsorted.Tensor(arg2_1, buf1, out_int32=False)
    # Topologically Sorted Source Nodes: [le], Original ATen: [aten.relu, aten.threshold_backward]
    cpp_fused_relu_threshold_backward_1(buf1)
'''.replace('"""', "'''")


def test_parse_kernel_name_regroups_aten_ops():
    assert parse_kernel_name("triton_poi_fused_addmm_relu_0") == ("addmm", "relu")
    assert parse_kernel_name("cpp_fused_relu_threshold_backward_1") == ("relu", "threshold_backward")
    assert parse_kernel_name("triton_per_fused_native_layer_norm_12") == ("native_layer_norm",)
    assert parse_kernel_name("not_a_fused_kernel") == ()


def test_parse_output_code_finds_both_languages():
    kernels, extern = parse_output_code([WRAPPER])
    assert [k.name for k in kernels] == [
        "triton_poi_fused_addmm_relu_0",
        "cpp_fused_relu_threshold_backward_1",
    ]
    triton_k, cpp_k = kernels
    assert (
        triton_k.language == "triton" and triton_k.heuristic == "pointwise" and triton_k.kind == "pointwise"
    )
    assert triton_k.graph == "forward" and triton_k.aten_ops == ("addmm", "relu")
    assert triton_k.body.startswith("@triton.jit\ndef triton_poi_fused_addmm_relu_0(")
    assert cpp_k.language == "cpp" and cpp_k.fused_ops == ("relu", "threshold_backward")
    assert extern == ["mm", "searchsorted"]  # an ATen fallback is a library call too


def test_show_kernel_hides_machine_paths():
    kernels, _ = parse_output_code([WRAPPER])
    out = io.StringIO()
    text = show_kernel(kernels[1], file=out)
    assert "torchinductor_someone" not in text and "<inductor-cache>/xy/cpp_prefix.h" in text
    assert out.getvalue().startswith("# cpp_fused_relu_threshold_backward_1")
    head = show_kernel(kernels[0], file=io.StringIO())
    assert "launched by triton_heuristics.pointwise, size_hints={'x': 512}" in head
    assert "triton_meta" not in head  # the long decorator is summarised


@pytest.fixture(scope="module")
def mlp_code(mlp) -> CompiledCode:
    model, x = mlp
    return capture_compiled_code(model, x)


def test_mlp_forward_has_a_fused_relu_kernel(mlp, mlp_code, device):
    model, x = mlp
    relu = find_kernels(mlp_code, contains=("relu",))
    assert relu, mlp_code.summary()
    assert mlp_code.backend == ("triton" if device.type == "cuda" else "cpp")
    assert all(k.language == mlp_code.backend for k in mlp_code.kernels)
    assert mlp_code.graphs == ["inference"] and mlp_code.fullgraph and not mlp_code.notes
    assert any("relu" in ops for ops in fused_ops(mlp_code).values())
    with torch.no_grad():
        torch.testing.assert_close(mlp_code.result, model(x))


def test_mlp_capture_reports_library_matmuls_and_prints(mlp_code):
    if mlp_code.backend == "cpp":  # on a CPU inductor keeps the GEMMs in a library (mkldnn/BLAS)
        assert set(mlp_code.extern_calls) & {"addmm", "mm"}, mlp_code.summary()
    kernel = find_kernels(mlp_code, contains="relu")[0]
    text = show_kernel(mlp_code, kernel.name, max_lines=5, file=io.StringIO())
    assert text.startswith(f"# {kernel.name}") and "more lines" in text
    assert kernel.name in mlp_code.summary()
    with pytest.raises(KeyError, match="no kernel"):
        mlp_code.kernel("triton_poi_fused_nothing_0")


def test_mlp_training_step_captures_forward_and_backward(mlp):
    model, x = mlp
    code = capture_compiled_code(model, x, backward=True)
    assert code.graphs == ["forward", "backward"], code.summary()
    assert find_kernels(code, graph="forward") and find_kernels(code, graph="backward")
    # the backward of ReLU is threshold_backward: fused somewhere in the backward graph
    assert any("threshold_backward" in k.fused_ops for k in find_kernels(code, graph="backward")), (
        code.summary()
    )
    expected_loss = model(x).sum()
    torch.testing.assert_close(code.result, expected_loss.detach())
    expected = eager_grads(model, expected_loss)
    assert set(code.grads) == set(expected)
    for name, grad in expected.items():
        torch.testing.assert_close(code.grads[name], grad, rtol=1e-5, atol=1e-5, msg=name)
    assert all(p.grad is None for p in model.parameters())  # the capture left the module as it was


def test_tiny_dlrm_forward_compiles_as_one_graph(tiny_dlrm):
    model, dense, sparse, _ = tiny_dlrm
    code = capture_compiled_code(model, dense, sparse)
    assert code.fullgraph and not code.graph_break_reasons, code.notes
    assert code.kernels and find_kernels(code, contains="relu"), code.summary()
    with torch.no_grad():
        torch.testing.assert_close(code.result, model(dense, sparse))


def test_tiny_dlrm_train_step_matches_eager(tiny_dlrm):
    model, dense, sparse, labels = tiny_dlrm
    loss_fn = bce_loss(labels)
    code = capture_compiled_code(model, dense, sparse, backward=True, loss_fn=loss_fn)
    assert code.graphs == ["forward", "backward"] and code.fullgraph, code.summary()
    expected_loss = loss_fn(model(dense, sparse))
    torch.testing.assert_close(code.result, expected_loss.detach())
    for name, grad in eager_grads(model, expected_loss).items():
        # fp32 sums in another order (and atomics on a GPU): a few ulps of values up to order 1
        torch.testing.assert_close(code.grads[name], grad, rtol=1e-4, atol=1e-5, msg=name)


def test_graph_break_is_explained_and_captured_anyway(device):
    def with_break(x):
        y = torch.relu(x + 1.0)
        torch._dynamo.graph_break()  # what a .item() or a print would do
        return torch.sigmoid(y * 2.0)

    x = torch.randn(8, 16, device=device)
    code = capture_compiled_code(with_break, x)
    assert not code.fullgraph and code.graph_break_reasons
    assert "graph_break" in code.graph_break_reasons[0]
    assert code.notes and "fullgraph=True failed" in code.notes[0]
    assert len(code.files) == 2  # one graph on each side of the break
    torch.testing.assert_close(code.result, with_break(x))


def test_explain_graph_breaks_counts_graphs_and_breaks():
    def with_breaks(x):
        x = torch.relu(x + 1.0)
        torch._dynamo.graph_break()
        x = x * 2.0
        torch._dynamo.graph_break()
        return torch.sigmoid(x)

    found = explain_graph_breaks(with_breaks, torch.randn(4, 8))
    assert (found.graphs, found.breaks, len(found.reasons)) == (3, 2, 2)
    assert str(found).splitlines()[0] == "dynamo traced 3 graph(s) with 2 graph break(s)"
    assert found.graph_ops == [{"add": 1, "relu": 1}, {"mul": 1}, {"sigmoid": 1}]
    whole = explain_graph_breaks(lambda x: torch.relu(x) * 2.0, torch.randn(4, 8))
    assert (whole.graphs, whole.breaks, whole.reasons) == (1, 0, [])


def test_explain_keeps_dynamo_warnings_out_of_the_output():
    """``Profiler record function … will be ignored`` (an optimizer step under dynamo) is not printed."""
    from lecture_code.compile.capture import _dynamo_errors_only

    parent, child = (
        logging.getLogger("torch._dynamo"),
        logging.getLogger("torch._dynamo.variables.ctx_manager"),
    )
    level = parent.level
    with _dynamo_errors_only():
        assert not child.isEnabledFor(logging.WARNING) and child.isEnabledFor(logging.ERROR)
    assert parent.level == level
