"""Notebook 09's exercise: the solution passes; planted mistakes are each named precisely.

Triton runs in the interpreter on a CPU (the checker's shapes are small), compiled on a GPU.
"""

from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl

from kernels.qlora.nf4 import NF4_CODE, dequantize_blocks, dequantize_nf4, quantize_nf4
from lecture_code.exercises.nf4_dequantize import (
    CASES,
    TOLERANCES,
    check_nf4_dequantize,
    make_inputs,
    swap_nibbles,
)
from lecture_code.exercises.solutions.nf4_dequantize import dequantize_nf4 as solution

ODD = "5 × 37: N·K = 185 odd, blocks across rows"
ROW_BLOCKS = "7 × 64: a block is a row"
MANY = "40 × 130, fp16: many programs"


@triton.jit
def _planted_kernel(
    packed_ptr, absmax_ptr, code_ptr, out_ptr, numel, K, BLOCKSIZE: tl.constexpr, BLOCK: tl.constexpr,
    HIGH_IS_EVEN: tl.constexpr, BLOCK_OF: tl.constexpr, MASK_STORE: tl.constexpr,
):  # fmt: skip
    """The solution with a switch per mistake: the nibble order, the block's index, the store's mask."""
    f = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    in_w = f < numel
    byte = tl.load(packed_ptr + f // 2, mask=in_w, other=0).to(tl.int32)
    if HIGH_IS_EVEN:
        nibble = tl.where(f % 2 == 0, byte >> 4, byte & 0xF)
    else:
        nibble = tl.where(f % 2 == 0, byte & 0xF, byte >> 4)
    if BLOCK_OF == 0:  # right: the flat element's block
        block = f // BLOCKSIZE
    elif BLOCK_OF == 1:  # the row
        block = f // K
    elif BLOCK_OF == 2:  # the byte's index
        block = (f // 2) // BLOCKSIZE
    else:  # blocks counted row by row
        block = (f // K) * tl.cdiv(K, BLOCKSIZE) + (f % K) // BLOCKSIZE
    scale = tl.load(absmax_ptr + block, mask=in_w, other=0.0)
    value = (tl.load(code_ptr + nibble) * scale).to(out_ptr.dtype.element_ty)
    if MASK_STORE:
        tl.store(out_ptr + f, value, mask=in_w)
    else:
        tl.store(out_ptr + f, value)


def _planted(high_is_even=True, block_of=0, mask_store=True):
    def fn(packed, absmax, code, shape, blocksize, dtype):
        n, k = shape
        out = torch.empty((n, k), device=packed.device, dtype=dtype)
        _planted_kernel[(triton.cdiv(n * k, 128),)](
            packed, absmax, code, out, n * k, k, BLOCKSIZE=blocksize, BLOCK=128,
            HIGH_IS_EVEN=high_is_even, BLOCK_OF=block_of, MASK_STORE=mask_store,
        )  # fmt: skip
        return out

    return fn


def _by_case(fn):
    return dict(check_nf4_dequantize(fn, verbose=False).cases)


def test_the_reference_is_the_format(seed):
    """The checker's reference is the format's: quantize_nf4 → dequantize_nf4 goes through it."""
    q = quantize_nf4(torch.randn(5, 37))
    assert torch.equal(dequantize_blocks(q.packed, q.absmax(), q.shape, 64, torch.float32), dequantize_nf4(q))
    byte = int(q.packed[0])
    assert dequantize_nf4(q)[0, 0] == NF4_CODE[byte >> 4] * q.absmax()[0]  # element 0: the high nibble
    assert dequantize_nf4(q)[0, 1] == NF4_CODE[byte & 0xF] * q.absmax()[0]
    assert torch.equal(swap_nibbles(swap_nibbles(q.packed)), q.packed)


def test_the_solution_passes_every_case(capsys):
    report = check_nf4_dequantize(solution)
    assert report.ok and len(report.cases) == len(CASES)
    assert capsys.readouterr().out.strip().endswith(f"NF4 dequantize: all {len(CASES)} cases pass")


def test_the_planted_kernel_with_every_switch_on_is_right():
    assert check_nf4_dequantize(_planted(), verbose=False).ok  # so each failure below is its mistake


def test_the_skeleton_is_diagnosed_as_never_writing():
    from lecture_code.exercises.skeletons import nf4_dequantize as skeleton

    report = check_nf4_dequantize(skeleton.dequantize_nf4, verbose=False)
    assert not report.ok
    for case in CASES:
        (problem,) = dict(report.cases)[case.name]
        numel = case.shape[0] * case.shape[1]
        assert problem.startswith("W[0, 0] is NaN, expected "), problem
        assert problem.endswith(f"never written; is every flat index f < N·K stored?) ({numel} NaN in all)")


def test_a_missing_store_mask_is_caught_by_the_guard():
    problems = _by_case(_planted(mask_store=False))
    # 185 elements in programs of 128: the second program stores 256 - 185 = 71 past the end of W
    assert problems[ODD] == [
        "wrote 71 element(s) past the end of W: is the store masked (f < N·K)? the last block's padding is "
        "not part of W"
    ]
    assert problems[MANY] == [problems[MANY][0]] and problems[MANY][0].startswith("wrote 48 element(s) past")


def test_swapped_nibbles_are_named_high_and_low():
    problems = _by_case(_planted(high_is_even=False))
    for case in CASES:
        (problem,) = problems[case.name]
        assert (
            "every element holds the value of the other nibble of its byte, the high and low nibbles "
            in problem
        )
        assert problem.endswith(
            "the even flat element f = n·K + k is in the HIGH nibble (byte >> 4), the odd one in the low "
            "(byte & 0xF)"
        )

    def one_swapped(packed, absmax, code, shape, blocksize, dtype):  # one odd element from the high nibble
        w = solution(packed, absmax, code, shape, blocksize, dtype)
        wrong = dequantize_blocks(swap_nibbles(packed.cpu()), absmax.cpu(), shape, blocksize, dtype)
        f = next(f for f in range(1, w.numel(), 2) if wrong.view(-1)[f] != w.view(-1)[f].cpu())
        w.view(-1)[f] = wrong.view(-1)[f]
        return w

    (problem,) = _by_case(one_swapped)[ODD]
    assert ": the value of the other nibble of its byte (flat index " in problem
    assert problem.endswith("is odd: its code is the low nibble, byte & 0xF); 1 of 185 elements wrong")


@pytest.mark.parametrize(
    ("block_of", "slip"),
    [(1, "absmax indexed by the row, absmax[n]"), (2, "absmax indexed by the byte, absmax[(f // 2) // 64]"),
     (3, "blocks counted row by row, absmax[n·⌈K/64⌉ + k // 64]")],
    ids=["row", "byte", "per-row"],
)  # fmt: skip
def test_the_absmax_of_the_wrong_block_is_named_with_its_slip(block_of, slip):
    problems = _by_case(_planted(block_of=block_of))
    (problem,) = problems[MANY]  # K = 130: blocks cross rows, three per row counted row by row
    first = {1: "W[0, 64]", 2: "W[0, 64]", 3: "W[1, 0]"}[block_of]
    block = {1: "scaled by absmax[0] instead of absmax[1]", 2: "scaled by absmax[0] instead of absmax[1]",
             3: "scaled by absmax[3] instead of absmax[2]"}[block_of]  # fmt: skip
    assert problem.startswith(f"{first} = ") and f": {block} (flat index " in problem
    assert f"; W matches {slip}:" in problem
    if block_of == 1:  # where a block is a row, the row is the right block
        assert problems[ROW_BLOCKS] == []
        where = "scaled by absmax[1] instead of absmax[0] (flat index 1·37 + 0 = 37, block 37 // 64 = 0)"
        assert problems[ODD][0].startswith("W[1, 0] = ") and where in problems[ODD][0]


def test_an_absmax_read_past_the_end_is_named():
    def past_end(packed, absmax, code, shape, blocksize, dtype):  # what an index past the last block reads
        return dequantize_blocks(
            packed.cpu(), torch.full_like(absmax.cpu(), -2048.0), shape, blocksize, dtype
        )

    (problem,) = _by_case(past_end)[ODD]
    assert (
        problem.startswith("W[0, 0] = ")
        and ": scaled by -2048, the guard past the end of absmax (" in problem
    )
    assert problem.endswith("the last block is 2): an absmax index past the last block")


def test_a_wrong_element_is_named_with_its_index_and_values():
    def one_wrong(packed, absmax, code, shape, blocksize, dtype):
        w = solution(packed, absmax, code, shape, blocksize, dtype)
        w[-1, -1] += 1.0
        return w

    (problem,) = _by_case(one_wrong)[ODD]
    assert problem.startswith("W[4, 36] = ") and ", expected " in problem
    assert problem.endswith("1 of 185 elements wrong")


def test_the_return_a_changed_input_and_an_exception_are_named():
    problems = _by_case(lambda *args: solution(*args).t())
    assert problems[ODD] == [
        "W has shape (37, 5), expected (5, 37) — that is the expected shape transposed: a swapped transpose?"
    ]
    assert _by_case(lambda *args: None)[ODD] == ["returned None: return W, the [N, K] tensor"]
    assert _by_case(lambda *args: solution(*args).float())[MANY] == [
        "W has dtype torch.float32, expected torch.float16 (the dtype argument)"
    ]
    assert _by_case(lambda *args: solution(*args).reshape(-1))[ODD] == [
        "W has shape (185,), expected (5, 37)"
    ]

    def changes_absmax(packed, absmax, code, shape, blocksize, dtype):
        w = solution(packed, absmax, code, shape, blocksize, dtype)
        absmax.mul_(2)
        return w

    assert all(p == ["changed an input (packed, absmax or code): store into W only"]
               for p in _by_case(changes_absmax).values())  # fmt: skip

    def raises(packed, absmax, code, shape, blocksize, dtype):
        return packed.view(shape)

    assert _by_case(raises)[ODD][0].startswith("raised RuntimeError: ")


def test_a_torch_answer_allocated_otherwise_is_still_checked_for_values():
    def in_torch(packed, absmax, code, shape, blocksize, dtype):
        return dequantize_blocks(packed, absmax, shape, blocksize, dtype)

    assert check_nf4_dequantize(in_torch, verbose=False).ok


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_each_case_has_what_it_says(case):
    packed, absmax = make_inputs(case, 0)
    n, k = case.shape
    blocks = -(-n * k // case.blocksize)
    assert packed.dtype == torch.uint8 and packed.numel() == blocks * case.blocksize // 2
    assert absmax.numel() == blocks and len(set(absmax.tolist())) == blocks  # distinct: a wrong block shows
    ratios = absmax.sort().values[1:] / absmax.sort().values[:-1]
    assert float(ratios.min()) > 1 + 4 * TOLERANCES[case.dtype][1]
