"""Read the tables inductor's GEMM autotuning writes: what it benchmarked for each GEMM, and what won.

With ``torch.compile(mode="max-autotune")`` (or ``"max-autotune-no-cudagraphs"``) inductor does not take the
library's GEMM on trust: for every matrix multiply it builds candidates — the library call (``mm``,
``addmm``, cuBLAS on a GPU) and Triton GEMM templates with different tiles — times each on the real shapes,
and keeps the fastest. A Triton template can carry the ops after the GEMM (bias, ReLU) as its epilogue: it
then shows up as a ``triton_tem_fused_…`` kernel; when the library wins, the ops after it stay a pointwise
kernel of their own. Inductor writes one table per GEMM to stderr::

    AUTOTUNE addmm(2048x512, 2048x13, 13x512)
    strides: …
    dtypes: …
      triton_mm_4 0.0061 ms 100.0% ACC_TYPE='tl.float32', ALLOW_TF32=False, BLOCK_K=16, BLOCK_M=64, …
      addmm 0.0070 ms 87.1%
    SingleProcess AUTOTUNE benchmarking takes …

:func:`autotune_tables` turns that text into short lines: the GEMM and its sizes, then the fastest candidates
with their time and tile. :func:`capture_autotuned` captures a compile in such a mode and collects the text
(``contextlib.redirect_stderr``), so it is returned instead of printed.

Inductor writes a table only when it benchmarks. It keeps the timings (and whole compiled graphs) in its
on-disk cache, so a second compile of the same GEMM shapes, in this process or on a later run on the same
machine, takes the winner from the cache and prints nothing: on an H200 a second run gave no table at all.
:func:`capture_autotuned` therefore compiles in a fresh, private cache folder (deleted after), so every call
benchmarks, and prints its tables, as the first did.
"""

from __future__ import annotations

import contextlib
import io
import re
from collections.abc import Callable
from typing import Any

from lecture_code.compile.capture import capture_compiled_code
from lecture_code.compile.generated_code import CompiledCode
from lecture_code.internals import autotune_errors_collected, fresh_inductor_cache

__all__ = ["autotune_tables", "capture_autotuned", "dropped_candidates"]

_CHOICE = re.compile(r"^\s+(\S+) (\d+(?:\.\d+)?) ms (\d+(?:\.\d+)?%)\s*(.*)$")
_TILE = re.compile(r"BLOCK_([MNK])=(\d+)")
_LAUNCH = re.compile(r"num_(stages|warps)=(\d+)")
_SHARED = re.compile(r"out of resource: \w+ Required: (\d+) Hardware limit: ?(\d+)")


def _tile(description: str) -> str:
    blocks = dict(_TILE.findall(description))
    if not {"M", "N", "K"} <= blocks.keys():
        return ""
    launch = dict(_LAUNCH.findall(description))
    extra = "".join(f", {launch[k]} {k}" for k in ("warps", "stages") if k in launch)
    return f"tile {blocks['M']}x{blocks['N']}x{blocks['K']} (BLOCK_M x BLOCK_N x BLOCK_K){extra}"


def autotune_tables(text: str, top: int = 3) -> list[str]:
    """One line per GEMM inductor autotuned (``mm(2048x13, 13x512)``: the op and its inputs' shapes),
    followed by its ``top`` fastest candidates: name, time, speed relative to the fastest, Triton tile."""
    lines: list[str] = []
    shown = top
    for row in text.splitlines():
        if row.startswith("AUTOTUNE ") and "(" in row:
            lines.append(row.removeprefix("AUTOTUNE "))
            shown = 0
        elif shown < top and (m := _CHOICE.match(row)):
            name, ms, share, description = m.groups()
            tile = _tile(description)
            lines.append(f"  {name:<16} {ms} ms {share:>7}" + (f"  {tile}" if tile else ""))
            shown += 1
    return lines


def dropped_candidates(errors: list[str]) -> list[str]:
    """One line for the candidates inductor dropped while autotuning (``errors``: its log messages, one per
    candidate): how many, and for those a Triton tile's shared memory ruled out, the range needed against the
    GPU's limit; any other error is quoted by its first line. Empty when none was dropped."""
    if not errors:
        return []
    shared = [tuple(int(v) for v in m.groups()) for e in errors if (m := _SHARED.search(e))]
    others = [e for e in errors if not _SHARED.search(e)]
    lines = []
    if shared:
        need = sorted(n for n, _ in shared)
        lines.append(
            f"{len(shared)} candidate(s) dropped: their tiles need {need[0] // 1024}–{need[-1] // 1024} "
            f"KiB of shared memory, the GPU allows {shared[0][1] // 1024} KiB per program"
        )
    if others:
        first = next((line.strip() for line in others[0].splitlines() if line.strip()), "")
        lines.append(f"{len(others)} candidate(s) dropped for other errors, the first: {first}")
    return lines


def capture_autotuned(
    fn_or_module: Callable[..., Any],
    *example_inputs: Any,
    mode: str = "max-autotune-no-cudagraphs",
    top: int = 3,
) -> tuple[CompiledCode, list[str]]:
    """:func:`~lecture_code.compile.capture.capture_compiled_code` with ``torch.compile(mode=mode)``, and the
    autotuning tables inductor wrote to stderr meanwhile, read by :func:`autotune_tables` (empty where no GEMM
    was autotuned, e.g. on a CPU), followed by :func:`dropped_candidates`' line for the candidates it dropped
    (logged as errors; collected here, not printed).

    The compile runs in a fresh inductor cache (:func:`~lecture_code.internals.fresh_inductor_cache`): in the
    machine's cache, timings or a graph from an earlier run would be reused, not benchmarked and printed."""
    stderr = io.StringIO()
    with fresh_inductor_cache(), contextlib.redirect_stderr(stderr), autotune_errors_collected() as errors:
        code = capture_compiled_code(fn_or_module, *example_inputs, mode=mode)
    return code, autotune_tables(stderr.getvalue(), top) + dropped_candidates(errors)
