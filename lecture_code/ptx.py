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

Triton's compile API changed over versions; this module speaks the 3.2+ form (triton 3.6–3.9 tested:
signature ``{arg name: type}`` with constexprs typed ``"constexpr"``, attributes keyed by ``(arg index,)``).
"""

from __future__ import annotations

import ast
import linecache
import os
import re
import shutil
import subprocess
import sys
import tempfile
import types
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import torch

__all__ = [
    "compile_for_gpu",
    "compile_generated_kernel",
    "explain_vector_loads",
    "find_cuobjdump",
    "find_instructions",
    "global_memory_accesses",
    "jit_function",
    "sass",
    "tensor_core_instructions",
    "uses_wgmma",
]

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


# ---------------------------------------------------------------------------------------------------------
# From whatever the decorator produced to a compilable JITFunction
# ---------------------------------------------------------------------------------------------------------
def _interpreted_function_type() -> type | None:
    try:
        from triton.runtime.interpreter import InterpretedFunction
    except ImportError:
        return None
    return InterpretedFunction


def jit_function(kernel: Any, _memo: dict[int, Any] | None = None) -> Any:
    """The compilable ``triton.runtime.JITFunction`` behind ``kernel``.

    Under ``TRITON_INTERPRET=1`` (every CPU machine here) ``@triton.jit`` returns an ``InterpretedFunction``
    that cannot be compiled; ``@triton.autotune`` / ``@triton.heuristics`` / inductor's heuristics wrap the
    function once more. This unwraps all of those and rebuilds a ``JITFunction`` from the Python function,
    converting the ``@triton.jit`` helpers it names as globals the same way (helpers reached through a module,
    ``tl.sigmoid`` or ``triton_helpers.maximum``, are swapped while compiling: see ``_compilable_helpers``).
    """
    from triton.runtime.jit import JITFunction

    memo = {} if _memo is None else _memo
    if id(kernel) in memo:
        return memo[id(kernel)]
    interpreted = _interpreted_function_type()
    if isinstance(kernel, JITFunction):
        if not _has_interpreted_globals(kernel.fn):
            memo[id(kernel)] = kernel
            return kernel
        noinline = getattr(kernel, "noinline", None)
        return _rebuild(kernel, {"noinline": noinline} if noinline else {}, memo)
    if interpreted is not None and isinstance(kernel, interpreted):
        return _rebuild(kernel, dict(getattr(kernel, "kwargs", {})), memo)
    inner = getattr(kernel, "fn", None)
    if inner is not None and inner is not kernel:  # Autotuner, Heuristics, inductor's CachingAutotuner
        return jit_function(inner, memo)
    raise TypeError(f"expected a @triton.jit kernel, got {type(kernel).__name__}")


def _has_interpreted_globals(fn: Any) -> bool:
    interpreted = _interpreted_function_type()
    if interpreted is None:
        return False
    for value in fn.__globals__.values():
        if isinstance(value, interpreted):
            return True
        if isinstance(value, types.ModuleType) and any(
            isinstance(v, interpreted) for v in vars(value).values()
        ):
            return True
    return False


def _rebuild(kernel: Any, jit_kwargs: dict[str, Any], memo: dict[int, Any]) -> Any:
    """A ``JITFunction`` of ``kernel.fn`` whose globals have every interpreted helper converted."""
    from triton.runtime.jit import JITFunction

    fn = kernel.fn
    new_globals: dict[str, Any] = {}
    clone = types.FunctionType(fn.__code__, new_globals, fn.__name__, fn.__defaults__, fn.__closure__)
    clone.__kwdefaults__ = fn.__kwdefaults__
    clone.__module__ = fn.__module__
    clone.__qualname__ = fn.__qualname__
    clone.__doc__ = fn.__doc__
    result = JITFunction(clone, **jit_kwargs)
    memo[id(kernel)] = result  # before converting the globals: recursive helpers find it
    new_globals.update({name: _convert_global(value, memo) for name, value in fn.__globals__.items()})
    return result


def _convert_global(value: Any, memo: dict[int, Any]) -> Any:
    interpreted = _interpreted_function_type()
    if interpreted is not None and isinstance(value, interpreted):
        return jit_function(value, memo)
    return value  # modules keep their identity: _compilable_helpers swaps their helpers in place


# Modules whose ``@triton.jit`` helpers kernels call (``tl.sigmoid``, ``tl.max``, ``triton_helpers.maximum``).
_HELPER_MODULE_PREFIXES = ("triton.language", "torch._inductor.runtime.triton_helpers")


@contextmanager
def _compilable_helpers() -> Iterator[None]:
    """While compiling, swap the interpreted ``@triton.jit`` helpers of triton's language modules (and
    inductor's ``triton_helpers``) for compilable ``JITFunction`` twins; put the originals back after.

    Under ``TRITON_INTERPRET=1`` even ``tl.sigmoid`` and ``tl.max`` are interpreted functions, which the
    compiler refuses ("Unsupported function referenced").
    """
    interpreted = _interpreted_function_type()
    if interpreted is None:
        yield
        return
    from triton.runtime.jit import JITFunction

    twins: dict[int, Any] = {}
    swapped: list[tuple[Any, str, Any]] = []
    try:
        for name, module in list(sys.modules.items()):
            if module is None or not name.startswith(_HELPER_MODULE_PREFIXES):
                continue
            for attr, value in list(vars(module).items()):
                if isinstance(value, interpreted):
                    if id(value) not in twins:
                        twins[id(value)] = JITFunction(value.fn, **getattr(value, "kwargs", {}))
                    swapped.append((module, attr, value))
                    setattr(module, attr, twins[id(value)])
        yield
    finally:
        for module, attr, value in reversed(swapped):
            setattr(module, attr, value)


def _interpreter_original(value: Any) -> Any:
    """The builtin behind an interpreter patch (``lambda *a, member=<builtin>, **k: …``), else ``None``."""
    found = None
    while "_patch_attr" in getattr(value, "__qualname__", "") and "member" in (value.__kwdefaults__ or {}):
        value = found = value.__kwdefaults__["member"]
    return found


@contextmanager
def _unpatched_language() -> Iterator[int]:
    """Undo, while compiling, the interpreter patches left behind in ``triton.language``.

    The interpreter patches ``tl``'s builtins while a kernel runs; a helper called from an interpreted
    kernel leaves its patches behind (``lecture_code.triton_on_cpu`` cleans up after itself, other code
    may not), and the compiler then fails with "'value' object has no attribute 'dtype'". Each patch keeps
    the original builtin as a default argument, so put that back for the compile and the patch after.
    """
    from lecture_code.triton_on_cpu import _language_objects

    repaired: list[tuple[Any, str, Any]] = []
    try:
        for obj in _language_objects():
            for name, value in list(vars(obj).items()):
                original = _interpreter_original(value)
                if original is not None:
                    repaired.append((obj, name, value))
                    setattr(obj, name, original)
        yield len(repaired)
    finally:
        for obj, name, value in reversed(repaired):
            setattr(obj, name, value)


# ---------------------------------------------------------------------------------------------------------
# Compiling
# ---------------------------------------------------------------------------------------------------------
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
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    fn = jit_function(kernel)
    constexprs = dict(constexprs or {})
    full = _signature(fn, signature, constexprs)
    if divisible_by_16 is None:
        divisible_by_16 = [n for n, t in full.items() if t.startswith("*") or (t[:1] in "iu" and t != "i1")]
    attrs = {(fn.arg_names.index(n),): [["tt.divisibility", 16]] for n in divisible_by_16}
    options = {"num_warps": num_warps, "num_stages": num_stages, "enable_fp_fusion": True, **options}
    try:
        with _compilable_helpers(), _unpatched_language():
            source = ASTSource(fn, full, constexprs, attrs)
            compiled = triton.compile(source, target=GPUTarget("cuda", arch, 32), options=options)
    except Exception as exc:
        raise RuntimeError(
            f"triton {triton.__version__} could not compile {fn.__name__} for sm_{arch} with signature "
            f"{full} and constexprs {constexprs}: {type(exc).__name__}: {exc}"
        ) from exc
    return dict(compiled.asm)


@contextmanager
def _no_interpreter():
    old = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "0"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("TRITON_INTERPRET", None)
        else:
            os.environ["TRITON_INTERPRET"] = old


_GENERATED_HEADER = """\
import triton
import triton.language as tl
from torch._inductor.runtime import triton_helpers
from torch._inductor.runtime.triton_helpers import libdevice, math as tl_math
"""


def _next_pow2(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


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
    """Compile a kernel inductor generated (a :class:`lecture_code.inspect_compile.Kernel` or its source).

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
            values[name] = _next_pow2(hint) if persistent else min(64, _next_pow2(hint))
        else:
            values[name] = min(1024, _next_pow2(hint))
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

    text = _GENERATED_HEADER + "\n" + source[source.find("@triton.jit") :]
    filename = f"<inductor kernel {jit.group(1)}>"
    # JITFunction reads its source with inspect.getsource: serve it from linecache, no file needed
    linecache.cache[filename] = (len(text), None, text.splitlines(keepends=True), filename)
    namespace: dict[str, Any] = {}
    with _no_interpreter():  # so the decorator gives a compilable JITFunction, not an interpreted one
        exec(compile(text, filename, "exec"), namespace)
    runtime = {n: t for n, t in signature.items() if t != "constexpr"}
    constants = {n: values[n] for n, t in signature.items() if t == "constexpr"}
    return compile_for_gpu(namespace[jit.group(1)], runtime, constants, arch, **kwargs)


# ---------------------------------------------------------------------------------------------------------
# SASS
# ---------------------------------------------------------------------------------------------------------
def find_cuobjdump() -> str | None:
    """Path of a ``cuobjdump``: the triton wheel's first, then ``$PATH``; ``None`` if there is none."""
    try:
        import triton

        return triton.knobs.nvidia.cuobjdump.path
    except Exception:  # noqa: BLE001  (older triton: no knobs; or the binary is missing)
        pass
    try:
        import triton

        bundled = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
        if os.access(bundled, os.X_OK):
            return bundled
    except ImportError:
        pass
    return shutil.which("cuobjdump")


_ENCODING = re.compile(r"\s*/\* 0x[0-9a-f]{16} \*/")


def sass(cubin: bytes, *, encodings: bool = False, tool: str | None = None) -> str:
    """Disassemble a cubin (``compile_for_gpu(...)["cubin"]``) to SASS with ``cuobjdump -sass``.

    The hex encoding comments after every instruction are dropped unless ``encodings=True``.
    Raises ``FileNotFoundError`` when no ``cuobjdump`` is found (see :func:`find_cuobjdump`).
    """
    tool = tool or find_cuobjdump()
    if tool is None:
        raise FileNotFoundError(
            "no cuobjdump: neither in the triton wheel (triton/backends/nvidia/bin) nor on $PATH"
        )
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "kernel.cubin")
        with open(path, "wb") as f:
            f.write(cubin)
        proc = subprocess.run([tool, "-sass", path], capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        raise RuntimeError(f"{tool} -sass failed ({proc.returncode}): {proc.stderr.strip()}")
    text = proc.stdout
    if not encodings:
        text = "\n".join(line for line in (_ENCODING.sub("", ln) for ln in text.splitlines()) if line.strip())
    return text


# ---------------------------------------------------------------------------------------------------------
# Reading PTX
# ---------------------------------------------------------------------------------------------------------
def find_instructions(text: str, pattern: str) -> list[str]:
    """Lines of ``text`` (PTX or SASS) matching the regular expression ``pattern``, stripped."""
    rx = re.compile(pattern)
    return [line.strip() for line in text.splitlines() if rx.search(line)]


_GLOBAL_ACCESS = re.compile(r"\b(ld|st)\.global(?:\.[a-z]+)*?(?:\.(v2|v4|v8))?\.([bfsu])(8|16|32|64|128)\b")


def global_memory_accesses(ptx: str) -> list[dict[str, Any]]:
    """Every global load/store in ``ptx`` as ``{"line", "op", "vector", "bits", "bytes"}``.

    ``bytes`` is what one thread moves with that instruction: ``ld.global.v4.b32`` → 4 × 32 bits = 16 bytes.
    """
    accesses = []
    for line in ptx.splitlines():
        m = _GLOBAL_ACCESS.search(line)
        if not m:
            continue
        op, vec, _, bits = m.groups()
        lanes = int(vec[1:]) if vec else 1
        accesses.append(
            {
                "line": line.strip(),
                "op": "load" if op == "ld" else "store",
                "vector": lanes,
                "bits": int(bits),
                "bytes": lanes * int(bits) // 8,
            }
        )
    return accesses


def explain_vector_loads(ptx: str) -> str:
    """A few lines for the learner: each kind of global load/store, how many, and the bytes per thread.

    16-byte accesses (``.v4.b32``, ``.v2.b64``, ``.v8.b16``) are the widest a thread can issue: the
    memory-bound kernels of this lecture want them for every load and store.
    """
    accesses = global_memory_accesses(ptx)
    if not accesses:
        return "no global loads or stores found in this PTX"
    counts: dict[tuple[str, str, int], int] = {}
    for a in accesses:
        form = re.search(r"(ld|st)\.global[.\w]*", a["line"]).group(0)
        key = (a["op"], form, a["bytes"])
        counts[key] = counts.get(key, 0) + 1
    lines = []
    for (op, form, nbytes), count in counts.items():
        verdict = "vectorized, 16 bytes per thread" if nbytes >= 16 else f"{nbytes} bytes per thread"
        lines.append(f"{count:3d} × {form:<24} {op:<5}  {verdict}")
    wide = sum(1 for a in accesses if a["bytes"] >= 16)
    lines.append(
        f"{wide} of {len(accesses)} global accesses are 16-byte vector accesses"
        + ("" if wide else " (aligned pointers and sizes a multiple of 16? see divisible_by_16)")
    )
    return "\n".join(lines)


def tensor_core_instructions(ptx: str) -> list[str]:
    """Tensor-core instructions: ``wgmma.*`` (Hopper, sm_90) or ``mma.sync`` (Ampere-style)."""
    return find_instructions(ptx, r"\b(wgmma\.|mma\.sync)")


def uses_wgmma(ptx: str) -> bool:
    """True when the PTX issues Hopper warpgroup MMAs (``wgmma.mma_async``)."""
    return any("wgmma.mma_async" in line for line in tensor_core_instructions(ptx))
