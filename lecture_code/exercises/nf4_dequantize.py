"""Notebook 09's exercise: NF4 → 16 bits in a Triton kernel: the nibble, the block's absmax, the tail masked.

The learner writes ``fn(packed, absmax, code, shape, blocksize, dtype)`` that returns the weight W
``shape`` = (N, K) in ``dtype`` from its NF4 form (:mod:`kernels.qlora.nf4`): packed uint8 ``[blocks ·
blocksize / 2]``, two 4-bit code indices a byte, the even flat element f = n·K + k in the HIGH nibble
(``byte >> 4``), the odd one in the low (``byte & 0xF``); absmax fp32 ``[blocks]``, one per ``blocksize``
consecutive elements of the flattened weight (the double quantization already undone), so a block runs on
into the next row where K is not a multiple of it; code fp32 ``[16]``, the NF4 values. The last block is
padded: elements f ≥ N·K exist in ``packed`` but not in W.

:func:`check_nf4_dequantize` runs it on odd shapes (N·K odd, K not a multiple of 64, one row, a block of
128, many programs, fp16 and bf16) on the default device (a CPU runs Triton's interpreter), the inputs
inside guarded buffers (:mod:`.guards`), and reports per case, in the order to fix things:

- an exception, with its type and message;
- elements written past the end of W (an unmasked store: the padding of the last block), counted from its
  guard;
- a changed input (packed, absmax, code);
- what it returned: None, not a tensor, a wrong shape (a transposed W is called out), a wrong dtype;
- a NaN where W has a number (never written: W starts as NaN), with its index;
- the nibbles in the wrong order: the first wrong element holds the value of the other nibble of its byte
  (and when every element does, that high and low are swapped);
- the absmax of the wrong block: the first wrong element is its code times another block's absmax, named,
  with the slip it matches (the block taken from the row, from the byte index, counted row by row) or
  the guard past the end of absmax;
- else the first wrong element (:func:`.checker.compare`: index, expected and got values).

The output: the checker answers the launcher's first ``torch.empty`` of N·K floating-point elements (on the
expected device) with a view at the start of a buffer poisoned with NaN and followed by a guard (a
``TorchFunctionMode``, active only during the call). A function that allocates W another way is still
checked for its values, but unwritten elements and writes past its end are not seen.

The codes come from :func:`kernels.qlora.nf4.quantize_nf4` of a random weight; the absmaxes are chosen by
the checker, distinct (a shuffled geometric ladder in [0.25, 1)), so a value scaled by another block's absmax
shows which block it came from. The reference is :func:`kernels.qlora.nf4.dequantize_blocks`: the fp32
product, rounded once to ``dtype``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch.overrides import TorchFunctionMode

from kernels.qlora.nf4 import NF4_CODE, dequantize_blocks, quantize_nf4
from lecture_code.exercises.checker import Report, compare, first_index, memory_problems, run_cases
from lecture_code.exercises.guards import GUARD, SENTINEL, Guarded, guarded_copy, guarded_output

__all__ = ["CASES", "TOLERANCES", "check_nf4_dequantize", "make_inputs", "swap_nibbles"]

# dtype → (atol, rtol), with why
TOLERANCES = {
    torch.float32: (1e-6, 1e-6),  # the same fp32 product as the reference: exact, an ulp of slack
    torch.float16: (1e-3, 1e-3),  # one fp16 ulp (2^-10 relative), for a product rounded twice
    torch.bfloat16: (8e-3, 8e-3),  # one bf16 ulp (2^-7 relative), for a product rounded twice
}


@dataclass(frozen=True)
class Case:
    name: str
    shape: tuple[int, int]
    blocksize: int = 64
    dtype: torch.dtype = torch.float32


CASES = (
    Case("5 × 37: N·K = 185 odd, blocks across rows", (5, 37)),
    Case("1 × 201: one row, last block 9 long", (1, 201)),
    Case("7 × 64: a block is a row", (7, 64)),
    Case("40 × 130, fp16: many programs", (40, 130), dtype=torch.float16),
    Case("9 × 45, blocksize 128, bf16", (9, 45), 128, torch.bfloat16),
)


def swap_nibbles(packed: torch.Tensor) -> torch.Tensor:
    """``packed`` with each byte's two nibbles exchanged."""
    return ((packed & 0xF) << 4) | (packed >> 4)


def make_inputs(case: Case, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(packed, absmax)`` for ``case``: a random weight's codes, distinct absmaxes (module docstring)."""
    g = torch.Generator().manual_seed(seed)
    packed = quantize_nf4(torch.randn(case.shape, generator=g), case.blocksize).packed
    blocks = 2 * packed.numel() // case.blocksize
    ladder = 0.25 * 4.0 ** ((torch.randperm(blocks, generator=g) + 0.5) / blocks)
    return packed, ladder.float()


def _guarded_bytes(t: torch.Tensor) -> Guarded:
    """A uint8 copy of ``t`` with a guard after it (the shared guards hold a float sentinel)."""
    g = Guarded(torch.full((t.numel() + GUARD,), 0xA5, dtype=torch.uint8, device=t.device), tuple(t.shape))
    g.tensor.copy_(t)
    return g


def _size(args: tuple, kwargs: dict) -> tuple[int, ...] | None:
    size = kwargs.get("size", args[0] if len(args) == 1 else args)
    if isinstance(size, int):
        size = (size,)
    if isinstance(size, (tuple, list, torch.Size)) and all(isinstance(n, int) for n in size):
        return tuple(size)
    return None


class _PoisonedEmpty(TorchFunctionMode):
    """Answers the first ``torch.empty`` of ``numel`` floating-point elements on ``device``'s type with a
    NaN-poisoned view at the start of a guarded buffer (:attr:`guard`); every other call runs as usual."""

    def __init__(self, numel: int, device: torch.device):
        super().__init__()
        self.numel, self.device, self.guard = numel, device, None

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.empty and self.guard is None:
            size = _size(args, kwargs)
            dtype = kwargs.get("dtype") or torch.get_default_dtype()
            device = torch.device(kwargs.get("device") or "cpu")
            plain = set(kwargs) <= {"size", "dtype", "device", "layout"}
            if size is not None and math.prod(size) == self.numel and dtype.is_floating_point and plain:
                if device.type == self.device.type and kwargs.get("layout", torch.strided) == torch.strided:
                    self.guard = guarded_output(size, dtype, device)
                    return self.guard.tensor
        return func(*args, **kwargs)


def _returned(ret: object, want: torch.Tensor) -> list[str]:
    if ret is None:
        return ["returned None: return W, the [N, K] tensor"]
    if isinstance(ret, torch.Tensor) and ret.shape == want.shape and ret.dtype != want.dtype:
        return [f"W has dtype {ret.dtype}, expected {want.dtype} (the dtype argument)"]
    if not isinstance(ret, torch.Tensor) or ret.shape != want.shape:
        return compare("W", ret, want, 0, 0)
    return []


_SLIPS = {  # the block index a common slip uses for flat element f = n·K + k; why it is wrong
    "row": (
        lambda n, k, K, bs: n,
        "absmax indexed by the row, absmax[n]: a block is {bs} consecutive elements of the flattened weight, "
        "block = (n·K + k) // {bs}, and runs on into the next row when K is not a multiple of {bs}",
    ),
    "byte": (
        lambda n, k, K, bs: (n * K + k) // 2 // bs,
        "absmax indexed by the byte, absmax[(f // 2) // {bs}]: the block is the element's, f // {bs} "
        "(a block spans {half} bytes)",
    ),
    "per-row": (
        lambda n, k, K, bs: n * -(-K // bs) + k // bs,
        "blocks counted row by row, absmax[n·⌈K/{bs}⌉ + k // {bs}]: blocks run on across rows, "
        "block = (n·K + k) // {bs}",
    ),
}


def _slip_hint(got, packed, absmax, case) -> str:
    """The slip of :data:`_SLIPS` that gives ``got`` everywhere, as a hint ('' if none)."""
    N, K = case.shape
    n, k = torch.meshgrid(torch.arange(N), torch.arange(K), indexing="ij")
    beyond = torch.cat([absmax, torch.full((GUARD,), SENTINEL)])  # what an index past the end reads
    codes = dequantize_blocks(packed, torch.ones_like(absmax), (N, K), case.blocksize, torch.float32)
    atol, rtol = TOLERANCES[case.dtype]
    for slip, text in _SLIPS.values():
        block = slip(n, k, K, case.blocksize).clamp(0, beyond.numel() - 1)
        if torch.allclose(
            got.double(), (codes * beyond[block]).to(case.dtype).double(), atol=atol, rtol=rtol
        ):
            return "; W matches " + text.format(bs=case.blocksize, half=case.blocksize // 2)
    return ""


def _values(got: torch.Tensor, want: torch.Tensor, packed, absmax, case: Case) -> list[str]:
    atol, rtol = TOLERANCES[case.dtype]
    nan_hint = " (W starts as NaN: never written; is every flat index f < N·K stored?)"
    wrong = compare("W", got, want, atol, rtol, nan_hint)
    if not wrong or " is NaN, " in wrong[0]:
        return wrong
    N, K = case.shape
    bad = ~torch.isclose(got.double(), want.double(), atol=atol, rtol=rtol)
    i, j = first_index(bad)
    f = i * K + j
    head = f"W[{i}, {j}] = {got[i, j].item():.6g}, expected {want[i, j].item():.6g}"
    count = f"{int(bad.sum()):,} of {bad.numel():,} elements"
    swapped = dequantize_blocks(swap_nibbles(packed), absmax, (N, K), case.blocksize, case.dtype)
    if torch.allclose(got.double(), swapped.double(), atol=atol, rtol=rtol):
        order = "the even flat element f = n·K + k is in the HIGH nibble (byte >> 4), the odd one in the low"
        other = "every element holds the value of the other nibble of its byte, the high and low nibbles"
        return [f"{head}: {other} swapped ({count} differ): {order} (byte & 0xF)"]
    if torch.isclose(got[i, j].double(), swapped[i, j].double(), atol=atol, rtol=rtol):
        side = (
            "even: its code is the HIGH nibble, byte >> 4"
            if f % 2 == 0
            else "odd: its code is the low nibble"
        )
        side += "" if f % 2 == 0 else ", byte & 0xF"
        return [
            f"{head}: the value of the other nibble of its byte (flat index {f} is {side}); {count} wrong"
        ]
    value = NF4_CODE[int(packed[f // 2] >> 4) if f % 2 == 0 else int(packed[f // 2] & 0xF)].item()
    if value == 0.0:  # a zero code hides its scale
        return wrong
    implied, b = got[i, j].double().item() / value, f // case.blocksize
    where = f"flat index {i}·{K} + {j} = {f}, block {f} // {case.blocksize} = {b}"
    hint = _slip_hint(got, packed, absmax, case)
    if math.isclose(implied, SENTINEL, rel_tol=2 * rtol):
        last = f"the last block is {absmax.numel() - 1}"
        return [
            f"{head}: scaled by {SENTINEL:g}, the guard past the end of absmax ({where}, {last}): an absmax "
            f"index past the last block{hint}"
        ]
    near = torch.isclose(absmax.double(), torch.tensor(implied, dtype=torch.float64), atol=0, rtol=2 * rtol)
    others = [int(c) for c in near.nonzero().flatten() if int(c) != b]
    if others:
        return [
            f"{head}: scaled by absmax[{others[0]}] instead of absmax[{b}] ({where}); {count} wrong{hint}"
        ]
    return wrong


def _problems(fn: Callable, case: Case, seed: int, device: torch.device) -> list[str]:
    packed, absmax = make_inputs(case, seed)
    want = dequantize_blocks(packed, absmax, case.shape, case.blocksize, case.dtype)
    gp, ga, gc = (
        _guarded_bytes(packed.to(device)),
        guarded_copy(absmax.to(device)),
        guarded_copy(NF4_CODE.to(device)),
    )
    mode = _PoisonedEmpty(want.numel(), device)
    try:
        with mode:
            ret = fn(gp.tensor, ga.tensor, gc.tensor, case.shape, case.blocksize, case.dtype)
    except Exception as err:  # noqa: BLE001 — the learner's code: report, do not stop the notebook
        return [f"raised {type(err).__name__}: {err}"]
    inputs = [(gp, packed), (ga, absmax), (gc, NF4_CODE)]
    if mode.guard is not None:
        past = "is the store masked (f < N·K)? the last block's padding is not part of W"
        problems = memory_problems(
            mode.guard, "W", past, inputs, "packed, absmax or code", "store into W only"
        )
    else:  # W was not allocated by torch.empty: only the inputs can be checked
        same = all(torch.equal(g.tensor.cpu(), original) for g, original in inputs)
        problems = [] if same else ["changed an input (packed, absmax or code): store into W only"]
    returned = _returned(ret, want)
    if returned:
        return problems + returned
    return problems + _values(ret.detach().cpu(), want, packed, absmax, case)


def check_nf4_dequantize(fn: Callable, device: torch.device | None = None, verbose: bool = True) -> Report:
    """Check ``fn(packed, absmax, code, shape, blocksize, dtype) -> W`` against the reference on
    :data:`CASES`; print the report if verbose."""
    return run_cases("NF4 dequantize", CASES, _problems, fn, 900, device, verbose)
