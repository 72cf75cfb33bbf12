"""NF4 with double-quantized scales (kernels.qlora.nf4): code values, layout, round trips, bad input."""

from __future__ import annotations

import pytest
import torch

from kernels.qlora.nf4 import NF4_CODE, NF4Weight, dequantize_nf4, dynamic_code, quantize_nf4

# The NF4 table as the QLoRA paper's appendix E and bitsandbytes print it (float32 values).
PUBLISHED_NF4 = [
    -1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635,
    -0.18477343022823334, -0.09105003625154495, 0.0, 0.07958029955625534, 0.16093020141124725,
    0.24611230194568634, 0.33791524171829224, 0.44070982933044434, 0.5626170039176941,
    0.7229568362236023, 1.0,
]  # fmt: skip


def test_code_from_its_definition_is_the_published_table():
    assert torch.allclose(NF4_CODE, torch.tensor(PUBLISHED_NF4), rtol=0, atol=1e-6)
    dyn = dynamic_code()
    assert dyn.numel() == 256 and bool((dyn[1:] > dyn[:-1]).all())
    assert dyn[0] == -dyn[-2] and dyn[-1] == 1.0 and 0.0 in dyn.tolist()


def _nearest_by_search(x: torch.Tensor, code: torch.Tensor) -> torch.Tensor:
    """An independent nearest-code search: the distance to every code value."""
    return (x[:, None] - code[None, :]).abs().argmin(dim=1)


@pytest.mark.parametrize("shape", [(3, 64), (7, 100), (5, 33), (129, 300)])  # rows straddled, odd numel
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_round_trip_matches_a_direct_reading_of_the_format(shape, dtype, seed):
    w = (torch.randn(shape) * torch.rand(shape[0], 1) * 3).to(dtype)
    q = quantize_nf4(w)
    flat = torch.nn.functional.pad(w.float().reshape(-1), (0, -w.numel() % 64)).view(-1, 64)
    absmax = flat.abs().amax(dim=1)
    index = _nearest_by_search((flat / absmax[:, None]).reshape(-1), NF4_CODE)
    unpacked = torch.stack([q.packed >> 4, q.packed & 0xF], dim=1).reshape(-1).long()
    assert (unpacked == index).float().mean() > 0.999  # ties at a midpoint may round either way
    assert torch.allclose(q.absmax(), absmax, rtol=0, atol=float(absmax.max()) / 100)  # 8-bit scales
    want = (NF4_CODE[index].view(-1, 64) * q.absmax()[:, None]).reshape(-1)[: w.numel()].view(shape)
    got = dequantize_nf4(q)
    assert got.dtype == dtype and got.shape == w.shape
    torch.testing.assert_close(got.float(), want.to(dtype).float(), rtol=0, atol=0)
    gap = float((NF4_CODE[1:] - NF4_CODE[:-1]).max())  # the worst a value can be off: half the widest gap
    assert float((got.float() - w.float()).abs().max()) <= (gap / 2 + 0.02) * float(absmax.max())


def test_exact_values_round_trip_exactly_and_pack_even_elements_high():
    w = NF4_CODE[torch.arange(128) % 16].view(2, 64) * 0.5  # every block's absmax 0.5: scales centre to 0
    q = quantize_nf4(w)
    assert torch.equal(dequantize_nf4(q), w)
    assert q.packed[0].item() == (0 << 4 | 1) and q.packed[1].item() == (2 << 4 | 3)


def test_bits_per_parameter_under_the_goal():
    q = quantize_nf4(torch.randn(4096, 512))
    assert q.bits_per_parameter() == pytest.approx(4 + 8 / 64 + 32 / (64 * 256) + 32 / (4096 * 512))
    assert q.bits_per_parameter() <= 4.5


def test_bad_input_says_which_argument():
    with pytest.raises(ValueError, match="blocksize: expected one of"):
        quantize_nf4(torch.randn(4, 64), blocksize=48)
    with pytest.raises(ValueError, match="weight: expected a non-empty 2-D"):
        quantize_nf4(torch.randn(64))
    with pytest.raises(ValueError, match="weight: expected float32, float16 or bfloat16, got torch.int32"):
        quantize_nf4(torch.ones(4, 64, dtype=torch.int32))
    q = quantize_nf4(torch.randn(4, 64))
    with pytest.raises(ValueError, match=r"NF4Weight.packed: expected torch.uint8 .* got torch.int8"):
        NF4Weight(q.packed.to(torch.int8), q.absmax_codes, q.absmax_scales, q.absmax_offset, q.shape, q.dtype)
    with pytest.raises(ValueError, match="blocksize"):
        NF4Weight(q.packed, q.absmax_codes, q.absmax_scales, q.absmax_offset, q.shape, q.dtype, blocksize=32)


def test_matches_bitsandbytes_where_it_installs(seed):
    bnb = pytest.importorskip("bitsandbytes.functional")
    if not torch.cuda.is_available():
        pytest.skip("bitsandbytes' 4-bit quantization runs on a GPU here")
    w = torch.randn(256, 320, device="cuda", dtype=torch.bfloat16)
    packed, state = bnb.quantize_4bit(w, quant_type="nf4", compress_statistics=True, blocksize=64)
    q = quantize_nf4(w)
    assert (packed.reshape(-1) == q.packed).float().mean() > 0.999
    torch.testing.assert_close(dequantize_nf4(q), bnb.dequantize_4bit(packed, state), rtol=0.02, atol=0.02)
