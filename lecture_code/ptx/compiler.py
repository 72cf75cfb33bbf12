"""Compile a ``@triton.jit`` kernel for a GPU target on a machine without a GPU: ttir → … → ptx → cubin.

Compiling needs no GPU, only a *target*: ``triton.compile(ASTSource(fn, signature, constexprs, attrs),
target=GPUTarget("cuda", 90, 32))`` runs every stage for sm_90 (the H100) in about a second, and ``ptxas``
ships inside the triton wheel, so the cubin comes too. :func:`compile_for_gpu` does that for a kernel of
yours; :func:`compile_generated_kernel` for one inductor wrote, with the signature and launch facts read
from its ``triton_meta``. Kernels defined under ``TRITON_INTERPRET=1`` are turned compilable first
(:func:`lecture_code.triton_cpu.interpreter_patches.jit_function`).

The ``tt.divisibility = 16`` attribute tells the compiler an argument is a multiple of 16 (a pointer:
16-byte aligned); without it on the pointers *and* the size, loads stay scalar (see :mod:`lecture_code.ptx`).

Triton's compile API changed over versions; this module speaks the 3.2+ form (triton 3.6–3.9 tested:
signature ``{arg name: type}`` with constexprs typed ``"constexpr"``, attributes keyed by ``(arg index,)``).
"""

from __future__ import annotations

import ast
import linecache
import re
from collections.abc import Iterable, Mapping
from typing import Any

import torch

from kernels.launch import next_pow2
from lecture_code.internals import INDUCTOR_KERNEL_HEADER, triton_compile_api
from lecture_code.triton_cpu.interpreter_patches import (
    compilable_helpers,
    jit_function,
    set_env,
    unpatched_language,
)

__all__ = ["compile_for_gpu", "compile_generated_kernel"]

_TORCH_TO_TRITON = {
    torch.float32: "fp32",
    torch.float16: "fp16",
    torch.bfloat16: "bf16",
    torch.float64: "fp64",
    torch.int8: "i8",
    torch.int16: "i16",
    torch.int32: "i32",
    torch.int64: "i64",
    torch.uint8: "u8",
    torch.bool: "i1",
}


def _type_string(value: Any) -> str:
    """``"*fp32"``/``"i32"``/… from a Triton type string, a torch dtype (a pointer to it), int or float."""
    if isinstance(value, str):
        return value
    if isinstance(value, torch.dtype):
        return "*" + _TORCH_TO_TRITON[value]
    if value is int:
        return "i32"
    if value is float:
        return "fp32"
    raise TypeError(f"cannot turn {value!r} into a Triton type (use e.g. '*fp32', 'i32', torch.float16)")


def _signature(fn: Any, signature: Mapping[str, Any] | Iterable[Any], constexprs: Mapping[str, Any]) -> dict:
    names = list(fn.arg_names)
    if not isinstance(signature, Mapping):  # a list of types for the non-constexpr args, in order
        runtime = [n for n in names if n not in constexprs]
        types_ = list(signature)
        if len(types_) != len(runtime):
            raise ValueError(f"{fn.__name__}: {len(types_)} types for the runtime arguments {runtime}")
        signature = dict(zip(runtime, types_, strict=True))
    unknown = sorted(set(signature) - set(names)) + sorted(set(constexprs) - set(names))
    if unknown:
        raise ValueError(f"{fn.__name__} has no argument(s) {unknown}; its arguments are {names}")
    full: dict[str, str] = {}
    for name in names:
        if name in constexprs:
            full[name] = "constexpr"
        elif name in signature:
            full[name] = _type_string(signature[name])
        else:
            raise ValueError(
                f"{fn.__name__}: give a type for argument {name!r} (or a value if it is a constexpr)"
            )
    return full


def compile_for_gpu(
    kernel: Any,
    signature: Mapping[str, Any] | Iterable[Any],
    constexprs: Mapping[str, Any] | None = None,
    arch: int = 90,
    *,
    divisible_by_16: Iterable[str] | None = None,
    num_warps: int = 4,
    num_stages: int = 3,
    **options: Any,
) -> dict[str, str | bytes]:
    """Compile ``kernel`` for ``GPUTarget("cuda", arch, 32)`` without a GPU; return every stage.

    Args:
        kernel: a ``@triton.jit`` function (interpreted or not, possibly autotuned).
        signature: ``{arg: type}`` for the runtime arguments, e.g. ``{"x_ptr": "*fp32", "n": "i32"}``
            (torch dtypes mean "pointer to": ``torch.float16`` → ``"*fp16"``), or a list in argument order.
        constexprs: values of the ``tl.constexpr`` arguments, e.g. ``{"BLOCK": 1024}``.
        arch: compute capability times ten: 90 = H100 (sm_90), 80 = A100.
        divisible_by_16: arguments the compiler may assume divisible by 16 (pointers: 16-byte aligned).
            Default: every pointer and integer, as the launcher marks them for torch tensors and sizes that
            are multiples of 16. ``()`` for none.
        num_warps, num_stages, options: Triton compile options.

    Returns ``{"ttir", "ttgir", "llir", "ptx": str, "cubin": bytes, …}`` (the keys Triton produced).
    """
    import triton

    ASTSource, GPUTarget = triton_compile_api()
    fn = jit_function(kernel)
    constexprs = dict(constexprs or {})
    full = _signature(fn, signature, constexprs)
    if divisible_by_16 is None:
        divisible_by_16 = [n for n, t in full.items() if t.startswith("*") or (t[:1] in "iu" and t != "i1")]
    attrs = {(fn.arg_names.index(n),): [["tt.divisibility", 16]] for n in divisible_by_16}
    options = {"num_warps": num_warps, "num_stages": num_stages, "enable_fp_fusion": True, **options}
    try:
        with compilable_helpers(), unpatched_language():
            source = ASTSource(fn, full, constexprs, attrs)
            compiled = triton.compile(source, target=GPUTarget("cuda", arch, 32), options=options)
    except Exception as exc:
        raise RuntimeError(
            f"triton {triton.__version__} could not compile {fn.__name__} for sm_{arch} with signature "
            f"{full} and constexprs {constexprs}: {type(exc).__name__}: {exc}"
        ) from exc
    return dict(compiled.asm)


def _literal_after(source: str, key: str) -> Any:
    """The Python literal (a balanced ``{…}`` or ``[…]``) that follows ``key`` in ``source``, or ``None``."""
    at = source.find(key)
    if at < 0:
        return None
    start = at + len(key)
    while start < len(source) and source[start] in " =:":
        start += 1
    if start >= len(source) or source[start] not in "{[":
        return None
    depth = 0
    for end in range(start, len(source)):
        depth += {"{": 1, "[": 1, "}": -1, "]": -1}.get(source[end], 0)
        if depth == 0:
            try:
                return ast.literal_eval(source[start : end + 1])
            except (ValueError, SyntaxError):
                return None
    return None


def compile_generated_kernel(
    kernel: Any, constexprs: Mapping[str, int] | None = None, arch: int = 90, **kwargs: Any
) -> dict[str, str | bytes]:
    """Compile a kernel inductor generated (a :class:`lecture_code.compile.Kernel` or its source).

    Signature, constants and 16-divisible arguments come from the kernel's ``triton_meta``, as inductor's
    launcher would pass them. Block sizes are the autotuner's choice at run time; unless given here they
    are set from ``size_hints`` (``XBLOCK`` = the x hint up to 1024; ``R0_BLOCK`` = the whole reduction for
    a persistent reduction, else 64), enough to read the PTX of the kernel a GPU would run.
    """
    source = getattr(kernel, "source", kernel)
    jit = re.search(r"@triton\.jit\s*\ndef (\w+)\(", source)
    signature = _literal_after(source, "'signature'")
    if not jit or not isinstance(signature, dict):
        raise ValueError("not an inductor Triton kernel: no triton_meta signature or no @triton.jit def")
    size_hints = _literal_after(source, "size_hints") or {}
    configs = _literal_after(source, "'configs'") or []
    persistent = jit.group(1).startswith("triton_per_")
    values: dict[str, Any] = dict(_literal_after(source, "'constants'") or {})
    for name, typ in signature.items():
        if typ != "constexpr" or not name.endswith("BLOCK") or name in values:
            continue
        axis = name[: -len("BLOCK")].lower()  # XBLOCK → x, R0_BLOCK → r0_
        hint = size_hints.get(axis, 1024)
        if axis.startswith("r"):
            values[name] = next_pow2(int(hint)) if persistent else min(64, next_pow2(int(hint)))
        else:
            values[name] = min(1024, next_pow2(int(hint)))
    values.update(constexprs or {})
    missing = [n for n, t in signature.items() if t == "constexpr" and n not in values]
    if missing:
        raise ValueError(f"give values for the constexprs {missing}")
    names = list(signature)
    if "divisible_by_16" not in kwargs and configs and isinstance(configs[0], dict):
        kwargs["divisible_by_16"] = [
            names[key[0]]
            for key, attrs in configs[0].items()
            if len(key) == 1 and key[0] < len(names) and ["tt.divisibility", 16] in attrs
        ]

    text = INDUCTOR_KERNEL_HEADER + "\n" + source[source.find("@triton.jit") :]
    filename = f"<inductor kernel {jit.group(1)}>"
    # JITFunction reads its source with inspect.getsource: serve it from linecache, no file needed
    linecache.cache[filename] = (len(text), None, text.splitlines(keepends=True), filename)
    namespace: dict[str, Any] = {}
    with set_env(
        "TRITON_INTERPRET", "0"
    ):  # so the decorator gives a compilable JITFunction, not an interpreted one
        exec(compile(text, filename, "exec"), namespace)
    runtime = {n: t for n, t in signature.items() if t != "constexpr"}
    constants = {n: values[n] for n, t in signature.items() if t == "constexpr"}
    return compile_for_gpu(namespace[jit.group(1)], runtime, constants, arch, **kwargs)
