"""Reading PTX and SASS: every global load/store form, with cache hints, vector widths and types.

Snippets are lines as Triton 3.6–3.9 and ptxas print them (predicates, inline-asm braces, cache-policy
operands); the last test compiles a kernel with an evict-last load and checks PTX against SASS.
"""

from __future__ import annotations

import pytest
import triton
import triton.language as tl

from lecture_code.ptx import (
    compile_for_gpu,
    explain_vector_loads,
    find_cuobjdump,
    global_memory_accesses,
    sass,
    sass_global_accesses,
)

# (PTX line, op, vector lanes, bits, bytes per thread, cache hints)
PTX_FORMS = [
    ("ld.global.b32 { %r1 }, [ %rd1 + 0 ];", "load", 1, 32, 4, ()),
    ("@%p1 ld.global.v4.b32 { %r1, %r2, %r3, %r4 }, [ %rd1 + 0 ];", "load", 4, 32, 16, ()),
    (
        "@%p1 ld.global.L1::evict_last.L2::cache_hint.v4.b32 { %r1, %r2, %r3, %r4 }, [ %rd1 + 0 ], %rd2;",
        "load",
        4,
        32,
        16,
        ("L1::evict_last", "L2::cache_hint"),
    ),
    (
        "@%p3 ld.global.L1::evict_first.L2::cache_hint.b32 { %r9 }, [ %rd4 + 8 ], %rd7;",
        "load",
        1,
        32,
        4,
        ("L1::evict_first", "L2::cache_hint"),
    ),
    ("ld.global.nc.v4.f32 {%f1, %f2, %f3, %f4}, [%rd5];", "load", 4, 32, 16, ("nc",)),
    (
        "ld.global.nc.L1::no_allocate.v2.b64 {%rd1, %rd2}, [%rd3];",
        "load",
        2,
        64,
        16,
        ("nc", "L1::no_allocate"),
    ),
    ("@%p2 ld.global.cg.v4.b32 { %r1, %r2, %r3, %r4 }, [ %rd1 + 0 ];", "load", 4, 32, 16, ("cg",)),
    ("@%p1 ld.global.ca.b16 { %rs1 }, [ %rd9 + 0 ];", "load", 1, 16, 2, ("ca",)),
    (
        "ld.global.L2::256B.v8.b32 {%r1, %r2, %r3, %r4, %r5, %r6, %r7, %r8}, [%rd1];",
        "load",
        8,
        32,
        32,
        ("L2::256B",),
    ),
    ("ld.global.v2.u16 {%rs1, %rs2}, [%rd1];", "load", 2, 16, 4, ()),
    ("ld.global.u8 %rs1, [%rd1];", "load", 1, 8, 1, ()),
    ("ld.global.s64 %rd4, [%rd1+8];", "load", 1, 64, 8, ()),
    ("ld.global.b128 %rq1, [%rd1];", "load", 1, 128, 16, ()),
    ("ld.global.relaxed.gpu.b32 %r1, [%rd1];", "load", 1, 32, 4, ("relaxed", "gpu")),
    ("@%p1 st.global.v4.b32 [ %rd5 + 0 ], { %r17, %r18, %r19, %r20 };", "store", 4, 32, 16, ()),
    ("@%p2 st.global.cs.v4.b32 [ %rd6 + 0 ], { %r1, %r2, %r3, %r4 };", "store", 4, 32, 16, ("cs",)),
    (
        "@%p1 st.global.L1::evict_first.L2::cache_hint.v4.b32 [ %rd1 + 0 ], { %r1, %r2, %r3, %r4 }, %rd9;",
        "store",
        4,
        32,
        16,
        ("L1::evict_first", "L2::cache_hint"),
    ),
    ("st.global.v2.f64 [%rd1], {%fd1, %fd2};", "store", 2, 64, 16, ()),
    ("@%p4 st.global.b16 [ %rd2 + 0 ], { %rs3 };", "store", 1, 16, 2, ()),
]

NOT_GLOBAL_DATA_ACCESSES = [
    "ld.param.u64 %rd1, [_kernel_param_0];",
    "ld.shared.v4.b32 {%r1, %r2, %r3, %r4}, [%r5];",
    "st.shared.b32 [%r1], %r2;",
    "cp.async.cg.shared.global [ %r1 + 0 ], [ %rd1 + 0 ], 0x10, %r2;",
    "atom.global.add.f32 %f1, [%rd1], %f2;",
    "red.global.add.f32 [%rd1], %f2;",
    "// ld.global.v4.b32 in a comment",
    ".loc 1 7 9  // kernel.py:7:9",
    "ld.global.L1::evict_last %r1, [%rd1];",  # no type: not a form ptxas accepts
]


@pytest.mark.parametrize(("line", "op", "lanes", "bits", "nbytes", "hints"), PTX_FORMS)
def test_every_global_access_form_is_read(line, op, lanes, bits, nbytes, hints):
    [access] = global_memory_accesses(f"\t// begin inline asm\n\t{line}\n\t// end inline asm\n")
    assert (access["op"], access["vector"], access["bits"], access["bytes"]) == (op, lanes, bits, nbytes)
    assert access["hints"] == hints
    assert access["line"] == line and line.split()[0 if line[0] != "@" else 1] == access["form"]


@pytest.mark.parametrize("line", NOT_GLOBAL_DATA_ACCESSES)
def test_other_instructions_are_not_counted(line):
    assert global_memory_accesses(line) == []


def test_explain_counts_cache_hinted_vector_loads():
    """The bias + ReLU kernel on an H100: two plain 16-byte loads, one evict-last one, two stores."""
    ptx = "\n".join(
        [
            "@%p1 ld.global.v4.b32 { %r1, %r2, %r3, %r4 }, [ %rd1 + 0 ];",
            "@%p1 ld.global.L1::evict_last.L2::cache_hint.v4.b32 { %r5, %r6, %r7, %r8 }, [ %rd2 + 0 ], %rd9;",
            "@%p2 ld.global.v4.b32 { %r9, %r10, %r11, %r12 }, [ %rd3 + 0 ];",
            "@%p1 st.global.v4.b32 [ %rd4 + 0 ], { %r1, %r2, %r3, %r4 };",
            "@%p2 st.global.v4.b32 [ %rd5 + 0 ], { %r9, %r10, %r11, %r12 };",
        ]
    )
    text = explain_vector_loads(ptx).splitlines()
    assert text[-1] == "5 of 5 global accesses are 16-byte vector accesses"
    assert any(
        line.split()[:3] == ["1", "×", "ld.global.L1::evict_last.L2::cache_hint.v4.b32"] for line in text
    )
    assert any(line.split()[:3] == ["2", "×", "ld.global.v4.b32"] for line in text)
    scalar = explain_vector_loads("ld.global.L1::evict_last.L2::cache_hint.b32 { %r1 }, [ %rd1 + 0 ], %rd2;")
    assert scalar.splitlines()[-1].startswith("0 of 1 global accesses")


def test_sass_accesses_by_form():
    listing = """
        /*0230*/              @!P0 LDG.E.EL.128 R8, desc[UR4][R20.64] ;
        /*0240*/                   LDG.E.128 R12, desc[UR4][R2.64] ;
        /*0250*/              @!P1 LDG.E R16, desc[UR4][R20.64+0x800] ;
        /*0260*/                   LDGSTS.E.BYPASS.128 [R1], desc[UR4][R2.64] ;
        /*0270*/                   LDGDEPBAR ;
        /*0280*/                   LDS.128 R4, [R1] ;
        /*02f0*/              @!P1 STG.E.128 desc[UR4][R16.64], R12 ;
        /*0330*/                   STG.E.128 desc[UR4][R16.64+0x800], R4 ;
    """
    assert sass_global_accesses(listing) == {"LDG.E.EL.128": 1, "LDG.E.128": 1, "LDG.E": 1, "STG.E.128": 2}


@triton.jit
def _bias_add_kernel(x_ptr, b_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """``out = x + b[i % 512]``, the bias read with evict_last as inductor's bias + ReLU does."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask)
    b = tl.load(b_ptr + offs % 512, mask, eviction_policy="evict_last")
    tl.store(out_ptr + offs, x + b, mask)


def test_ptx_count_matches_the_sass():
    """Every evict-last load the SASS shows (``LDG.E.EL.128``) is counted in the PTX too."""
    signature = {"x_ptr": "*fp32", "b_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32"}
    asm = compile_for_gpu(_bias_add_kernel, signature, {"BLOCK": 1024})
    accesses = global_memory_accesses(asm["ptx"])
    hinted = [a for a in accesses if "L1::evict_last" in a["hints"]]
    assert hinted and all(a["op"] == "load" and a["bytes"] == 16 for a in hinted)
    assert [a for a in accesses if a["op"] == "load" and not a["hints"]]
    if find_cuobjdump() is None:
        pytest.skip("no cuobjdump in the triton wheel or on PATH")
    ops = sass_global_accesses(sass(asm["cubin"]))
    assert ops["LDG.E.EL.128"] == len(hinted)
    assert sum(n for form, n in ops.items() if form.startswith("LDG")) == sum(
        a["op"] == "load" for a in accesses
    )
    assert sum(n for form, n in ops.items() if form.startswith("STG")) == sum(
        a["op"] == "store" for a in accesses
    )
