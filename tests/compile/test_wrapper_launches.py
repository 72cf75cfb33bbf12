"""parse_wrapper: buffer views, launches matched to kernel parameters, library calls, memory lines."""

from __future__ import annotations

from wrapper_fixtures import CPU_WRAPPER, GPU_WRAPPER

from lecture_code.compile import memory_lines, parse_output_code, parse_wrapper


def _parse(text):
    kernels, _ = parse_output_code([text])
    return parse_wrapper(text, kernels)


def test_views_follow_aliases_and_reuse_to_their_allocation():
    w = _parse(CPU_WRAPPER)
    assert w.view("buf36").shape == (8, 27, 16) and w.view("buf36").row_width == 432
    assert w.base_of("buf35") == "buf36" and w.columns("buf35") == range(16, 432)
    assert w.base_of("buf34") == "buf36" and w.columns("buf34") == range(0, 16)
    assert w.base_of("buf38") == "buf40" and w.columns("buf39") == range(16, 367)
    assert w.base_of("buf6") == "buf5"  # "buf6 = reinterpret_tensor(buf5, …); del buf5  # reuse"
    assert w.view("arg37_1").shape == (351,)  # graph inputs from assert_size_stride
    assert [w.columns(f"buf{100 + f}").start for f in range(26)] == [16 * f for f in range(26)]


def test_launch_arguments_are_matched_to_pointer_parameters():
    w = _parse(GPU_WRAPPER)
    [cat] = [launch for launch in w.launches if launch.kernel.name.endswith("_30")]
    assert cat.args == {"in_ptr0": "arg6_1", "in_ptr1": "buf4", "in_ptr2": "buf33", "out_ptr0": "buf36"}
    assert cat.reads == ["in_ptr0", "in_ptr1", "in_ptr2"] and cat.writes == ["out_ptr0"]
    assert len([launch for launch in w.launches if "embedding" in launch.kernel.fused_ops]) == 26


def test_library_calls_name_inputs_and_output():
    w = _parse(GPU_WRAPPER)
    mm, bmm = w.library_calls
    assert (mm.name, mm.inputs[0], mm.out) == ("mm", "buf3", "buf4")
    assert bmm.name == "bmm" and bmm.inputs[0] == "buf36" and bmm.out == "buf37"
    transposed = w.view(bmm.inputs[1])  # an inline reinterpret_tensor: a view of its own
    assert transposed.base == "buf36" and transposed.stride == (432, 1, 16)


def test_memory_lines_point_at_one_parameter():
    w = _parse(GPU_WRAPPER)
    cat = next(launch.kernel for launch in w.launches if launch.kernel.name.endswith("_30"))
    assert memory_lines(cat, "in_ptr2") == [
        "tmp15 = tl.load(in_ptr2 + (x0 + 16*((-1) + x1) + 416*x2), tmp12, other=0.0)"
    ]
    assert memory_lines(cat, "out_ptr0") == ["tl.store(out_ptr0 + (x3), tmp16, None)"]
    assert memory_lines(cat, "in_ptr") == []  # a parameter name, not a prefix
