"""Read what the compiler made: PTX lines, SASS from a cubin, global loads by width, tensor-core MMAs.

- :func:`sass` disassembles a cubin with ``cuobjdump -sass`` (the triton wheel ships one:
  :func:`find_cuobjdump`).
- :func:`global_memory_accesses` / :func:`explain_vector_loads`: ``ld.global.v4.b32`` loads four 32-bit
  values (16 bytes) per thread in one instruction, ``ld.global.b32`` one; cache hints in between
  (``ld.global.L1::evict_last.L2::cache_hint.v4.b32``) are read too. :func:`sass_global_accesses` counts
  the ``LDG``/``STG`` they become.
- :func:`tensor_core_instructions` / :func:`uses_wgmma`: on sm_90 a ``tl.dot`` becomes
  ``wgmma.mma_async`` (Hopper's warpgroup MMA); on sm_80 it is ``mma.sync``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections import Counter
from typing import Any

__all__ = [
    "explain_vector_loads",
    "find_cuobjdump",
    "find_instructions",
    "global_memory_accesses",
    "sass",
    "sass_global_accesses",
    "tensor_core_instructions",
    "uses_wgmma",
]


def find_cuobjdump() -> str | None:
    """Path of a ``cuobjdump``: the triton wheel's first, then ``$PATH``; ``None`` if there is none."""
    try:
        import triton
    except ImportError:
        return shutil.which("cuobjdump")
    try:
        return triton.knobs.nvidia.cuobjdump.path
    except Exception:  # noqa: BLE001  (older triton: no knobs; or the binary is missing)
        pass
    bundled = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    return bundled if os.access(bundled, os.X_OK) else shutil.which("cuobjdump")


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


def find_instructions(text: str, pattern: str) -> list[str]:
    """Lines of ``text`` (PTX or SASS) matching the regular expression ``pattern``, stripped."""
    rx = re.compile(pattern)
    return [line.strip() for line in text.splitlines() if rx.search(line)]


# ``ld.global`` / ``st.global``, then any qualifiers: state space variants and cache hints (``.nc``, ``.ca``,
# ``.cg``, ``.cs``, ``.L1::evict_last``, ``.L2::cache_hint``, ``.L2::256B`` …), a vector width (``.v2``,
# ``.v4``, ``.v8``) and last the type (``.b32``, ``.f16``, ``.u64``, ``.b128`` …). The predicate (``@%p1``)
# in front and the operands after do not matter.
_GLOBAL_ACCESS = re.compile(r"(?<![\w.])(ld|st)\.global((?:\.[A-Za-z0-9_]+(?:::[A-Za-z0-9_]+)*)+)")
_TYPE = re.compile(r"[bfsu](8|16|32|64|128)")
_VECTOR = re.compile(r"v(2|4|8)")


def global_memory_accesses(ptx: str) -> list[dict[str, Any]]:
    """Every global load/store in ``ptx`` as ``{"line", "op", "form", "hints", "vector", "bits", "bytes"}``.

    ``bytes`` is what one thread moves with that instruction: ``ld.global.v4.b32`` → 4 × 32 bits = 16 bytes.
    ``form`` is the instruction without its operands (``ld.global.L1::evict_last.L2::cache_hint.v4.b32``);
    ``hints`` are the cache qualifiers in it (``("L1::evict_last", "L2::cache_hint")``), which say how long
    the data should stay in a cache and change nothing about the width. Comment lines are skipped.
    """
    accesses = []
    for line in ptx.splitlines():
        code = line.split("//", 1)[0]
        m = _GLOBAL_ACCESS.search(code)
        if not m:
            continue
        qualifiers = m.group(2).lstrip(".").split(".")
        if not _TYPE.fullmatch(qualifiers[-1]):
            continue  # not a load or store of data (no type: a malformed or unknown form)
        bits = int(_TYPE.fullmatch(qualifiers[-1]).group(1))
        vec = next((int(v.group(1)) for q in qualifiers if (v := _VECTOR.fullmatch(q))), 1)
        hints = tuple(q for q in qualifiers[:-1] if not _VECTOR.fullmatch(q))
        accesses.append(
            {
                "line": line.strip(),
                "op": "load" if m.group(1) == "ld" else "store",
                "form": m.group(0),
                "hints": hints,
                "vector": vec,
                "bits": bits,
                "bytes": vec * bits // 8,
            }
        )
    return accesses


def explain_vector_loads(ptx: str) -> str:
    """A few lines for the learner: each kind of global load/store, how many, and the bytes per thread.

    16-byte accesses (``.v4.b32``, ``.v2.b64``, ``.v8.b16``) are the widest a thread can issue on sm_90: the
    memory-bound kernels of this lecture want them for every load and store. Cache hints
    (``.L1::evict_last`` …) are shown as part of the form and do not change the width.
    """
    accesses = global_memory_accesses(ptx)
    if not accesses:
        return "no global loads or stores found in this PTX"
    counts = Counter((a["op"], a["form"], a["bytes"]) for a in accesses)
    width = max(len(form) for _, form, _ in counts)
    lines = []
    for (op, form, nbytes), count in counts.items():
        verdict = "vectorized, 16 bytes per thread" if nbytes >= 16 else f"{nbytes} bytes per thread"
        lines.append(f"{count:3d} × {form:<{width}}  {op:<5}  {verdict}")
    wide = sum(1 for a in accesses if a["bytes"] >= 16)
    lines.append(
        f"{wide} of {len(accesses)} global accesses are 16-byte vector accesses"
        + ("" if wide else " (aligned pointers and sizes a multiple of 16? see divisible_by_16)")
    )
    return "\n".join(lines)


_SASS_MEMORY = re.compile(r"(?<![\w.])((?:LDG|STG)(?![A-Z0-9_])(?:\.[A-Z0-9_]+)*)")


def sass_global_accesses(sass_text: str) -> Counter[str]:
    """``LDG``/``STG`` instructions of a SASS listing, counted by form: ``{"LDG.E.128": 2, "STG.E.128": 1}``.

    ``.128`` is a 16-byte access (no suffix: 4 bytes), ``.EL`` the evict-last cache hint (PTX
    ``.L1::evict_last``), ``.E`` a 64-bit address; the predicate in front (``@!P0``) is not part of the form.
    """
    counts: Counter[str] = Counter()
    for line in sass_text.splitlines():
        m = _SASS_MEMORY.search(line.split(";", 1)[0])
        if m:
            counts[m.group(1)] += 1
    return counts


def tensor_core_instructions(ptx: str) -> list[str]:
    """Tensor-core instructions: ``wgmma.*`` (Hopper, sm_90) or ``mma.sync`` (Ampere-style)."""
    return find_instructions(ptx, r"\b(wgmma\.|mma\.sync)")


def uses_wgmma(ptx: str) -> bool:
    """True when the PTX issues Hopper warpgroup MMAs (``wgmma.mma_async``)."""
    return any("wgmma.mma_async" in line for line in tensor_core_instructions(ptx))
