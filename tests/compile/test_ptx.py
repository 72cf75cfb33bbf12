"""PTX and SASS for sm_90 without a GPU: vectorized loads, wgmma, and inductor's own kernels."""

from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl

from kernels.pointwise.vector_add import _vector_add_kernel
from lecture_code.compile import capture_compiled_code
from lecture_code.internals import triton_on_cpu_expected
from lecture_code.ptx import (
    compile_for_gpu,
    compile_generated_kernel,
    explain_vector_loads,
    find_cuobjdump,
    global_memory_accesses,
    jit_function,
    sass,
    tensor_core_instructions,
    uses_wgmma,
)

VECTOR_ADD_SIGNATURE = {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32"}


@triton.jit
def _tile_dot_kernel(a_ptr, b_ptr, c_ptr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """One [BM, BK] @ [BK, BN] tile, fp16 in, fp32 out: the smallest kernel with a tl.dot."""
    rm = tl.arange(0, BM)
    rn = tl.arange(0, BN)
    rk = tl.arange(0, BK)
    a = tl.load(a_ptr + rm[:, None] * BK + rk[None, :])
    b = tl.load(b_ptr + rk[:, None] * BN + rn[None, :])
    tl.store(c_ptr + rm[:, None] * BN + rn[None, :], tl.dot(a, b))


@pytest.fixture(scope="module")
def vector_add_asm():
    return compile_for_gpu(_vector_add_kernel, VECTOR_ADD_SIGNATURE, {"BLOCK": 1024})


def test_vector_add_ptx_has_entry_and_16_byte_loads(vector_add_asm):
    assert {"ttir", "ttgir", "llir", "ptx", "cubin"} <= set(vector_add_asm)
    ptx = vector_add_asm["ptx"]
    assert ".entry _vector_add_kernel(" in ptx and ".target sm_90" in ptx
    assert "ld.global.v4.b32" in ptx
    loads = [a for a in global_memory_accesses(ptx) if a["op"] == "load"]
    assert loads and all(a["bytes"] == 16 for a in loads)
    assert "vectorized, 16 bytes per thread" in explain_vector_loads(ptx)


def test_odd_size_keeps_loads_scalar():
    # n not known to be a multiple of 16 (n = 4099): the mask may cut a group of four, so one float per load
    asm = compile_for_gpu(
        _vector_add_kernel,
        VECTOR_ADD_SIGNATURE,
        {"BLOCK": 1024},
        divisible_by_16=("x_ptr", "y_ptr", "out_ptr"),
    )
    assert "ld.global.v4" not in asm["ptx"] and "ld.global.b32" in asm["ptx"]
    assert "0 of" in explain_vector_loads(asm["ptx"]).splitlines()[-1]


def test_signature_forms_agree(vector_add_asm):
    as_list = compile_for_gpu(_vector_add_kernel, ["*fp32", "*fp32", "*fp32", "i32"], {"BLOCK": 1024})
    as_dtypes = compile_for_gpu(
        _vector_add_kernel,
        {"x_ptr": torch.float32, "y_ptr": torch.float32, "out_ptr": torch.float32, "n": int},
        {"BLOCK": 1024},
    )
    assert as_list["ptx"] == vector_add_asm["ptx"] == as_dtypes["ptx"]
    with pytest.raises(ValueError, match="give a type for argument 'n'"):
        compile_for_gpu(
            _vector_add_kernel, {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32"}, {"BLOCK": 64}
        )


def test_jit_function_unwraps_the_interpreter():
    from triton.runtime.jit import JITFunction

    fn = jit_function(_vector_add_kernel)
    assert isinstance(fn, JITFunction) and fn.arg_names == ["x_ptr", "y_ptr", "out_ptr", "n", "BLOCK"]


def test_sass_from_the_wheels_cuobjdump(vector_add_asm):
    if find_cuobjdump() is None:
        pytest.skip("no cuobjdump in the triton wheel or on PATH")
    text = sass(vector_add_asm["cubin"])
    assert "_vector_add_kernel" in text and "sm_90" in text
    assert "LDG.E.128" in text  # the 16-byte PTX loads became 128-bit SASS loads
    assert "/* 0x" not in text and "/* 0x" in sass(vector_add_asm["cubin"], encodings=True)


def test_tl_dot_uses_wgmma_on_sm90_and_mma_on_sm80():
    signature = {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp32"}
    tiles = {"BM": 64, "BN": 64, "BK": 32}
    hopper = compile_for_gpu(_tile_dot_kernel, signature, tiles, arch=90)["ptx"]
    if uses_wgmma(hopper):
        assert any("wgmma.mma_async" in line for line in tensor_core_instructions(hopper))
    else:  # this triton chose the Ampere path for such a small tile
        assert any("mma.sync" in line for line in tensor_core_instructions(hopper))
    ampere = compile_for_gpu(_tile_dot_kernel, signature, tiles, arch=80)["ptx"]
    assert not uses_wgmma(ampere) and any("mma.sync" in line for line in tensor_core_instructions(ampere))


def test_generated_kernel_compiles_to_ptx(device):
    code = capture_compiled_code(
        lambda x: torch.relu(x * 2.0 + 1.0), torch.randn(1024, device=device), triton_on_cpu=True
    )
    if code.backend != "triton":  # only where C++ is allowed: a torch/triton pair not in KNOWN_TO_WORK
        assert not triton_on_cpu_expected(), code.fallback_reason
        pytest.skip(f"inductor wrote no Triton here: {code.fallback_reason}")
    kernel = code.kernels[0]
    ptx = compile_generated_kernel(kernel)["ptx"]  # alignment facts as inductor's triton_meta states them
    assert f".entry {kernel.name}(" in ptx
    assert [a for a in global_memory_accesses(ptx) if a["op"] == "load"]
    # on a CPU inductor does not promise aligned graph inputs; as on a GPU, aligned inputs and 1024 elements:
    aligned = compile_generated_kernel(kernel, divisible_by_16=("in_ptr0", "out_ptr0", "xnumel"))["ptx"]
    assert "ld.global.v4.b32" in aligned and "st.global.v4.b32" in aligned


def test_compile_survives_interpreter_leftovers(vector_add_asm, monkeypatch, tmp_path):
    """An interpreted kernel that calls a helper (``tl.sigmoid``, ``triton_helpers.maximum``) leaves the
    interpreter's numpy builtins patched into ``triton.language.core``; compiling must still work."""
    from triton.runtime import interpreter

    from lecture_code.triton_cpu.interpreter_patches import restore_triton_language

    if not hasattr(interpreter, "_patch_lang"):
        pytest.skip("this triton's interpreter patches the language differently")
    monkeypatch.setenv(
        "TRITON_CACHE_DIR", str(tmp_path)
    )  # really compile: a cached kernel skips the frontend
    with restore_triton_language():  # clean up after this test
        interpreter._patch_lang(tl.standard.sigmoid.fn)  # what a helper call does, and never undoes
        asm = compile_for_gpu(_vector_add_kernel, VECTOR_ADD_SIGNATURE, {"BLOCK": 1024})
    # Same code as a clean compile. (Not the same text: debug sections name the source file's path, which
    # differs when the fixture's kernel came from a Triton cache filled by another checkout.)
    assert ".entry _vector_add_kernel(" in asm["ptx"]
    assert global_memory_accesses(asm["ptx"]) == global_memory_accesses(vector_add_asm["ptx"])


def test_restore_keeps_what_the_interpreter_rewriter_injected():
    """The interpreter copies its globals (``interpreter_semantic``, …) into a helper's module when it first
    rewrites the helper, and caches the rewrite for the process: the restore must keep those names (deleting
    them broke every later kernel calling ``tl.sum``), and still remove anything else added in the block."""
    import triton.language as tl
    import triton.runtime.interpreter as interp

    from lecture_code.triton_cpu.interpreter_patches import restore_triton_language

    module, name = tl.standard, "interpreter_semantic"
    saved = vars(module).pop(name, None)
    try:
        with restore_triton_language():
            setattr(module, name, interp.interpreter_semantic)  # what the rewriter does on a first rewrite
            module._added_in_the_block = 1
        assert getattr(module, name) is interp.interpreter_semantic
        assert not hasattr(module, "_added_in_the_block")
    finally:
        if saved is not None:
            setattr(module, name, saved)
