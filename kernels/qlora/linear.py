"""The fused QLoRA linear, ``y = x Wᵀ + s·(x Aᵀ) Bᵀ`` with the frozen W in NF4, forward and backward.

Math (x ``[M, K]``, W ``[N, K]`` in NF4, A ``[r, K]``, B ``[N, r]``, s the scale; W never gets a gradient):

    forward:  s·t = s·(x Aᵀ)              [M, r]   cuBLAS (saved for the backward)
              y   = x Wᵀ + (s·t) Bᵀ       [M, N]   one launch (:mod:`kernels.qlora.nf4_gemm`)
    backward: s·u = s·(dY B)              [M, r]   cuBLAS
              dX  = dY W + (s·u) A        [M, K]   one launch, W dequantized on chip again
              dA  = (s·u)ᵀ x,  dB = dYᵀ (s·t)      cuBLAS

What the fusion removes: the order PEFT with bitsandbytes runs (dequantize W to 16 bits in a kernel of its
own, then the GEMM; the LoRA branch in torch ops) writes and reads a 16-bit copy of W in the forward and
again in the backward (2 × 2·N·K bytes each way); here W crosses memory as 4-bit codes and fp32 absmaxes
only, 0.5625 bytes a value (0.516 as stored, with 8-bit absmax codes). The double-quantized absmaxes are
undone once per call (a small pass over N·K/64 values, :meth:`kernels.qlora.nf4.NF4Weight.absmax`).

Versions (:data:`VERSIONS`): ``"pairs"`` and ``"elements"`` run the NF4 GEMM above, W decoded on chip
(:data:`kernels.qlora.nf4_gemm.VERSIONS`); ``"via_16_bits"`` runs the dequantize pass and then the fused LoRA
kernels on a 16-bit copy of W, forward and again backward (:mod:`kernels.qlora.via_16_bits`). The default
(``version=None``) is ``"via_16_bits"``, chosen by measurement: on the H200 it took less device time than both
decodings at every shape and pass of ``benchmarks/results/qlora/qlora_linear_nvidia-h200_2026-11-29.csv``
(8192×4096×4096 r16, forward + backward: 0.812 ms against ``"pairs"``' 2.81 ms; the dequantize order 1.07 ms,
the 16-bit base 0.690 ms). The NF4 GEMM saves the pass (about 18 µs at 4096 × 4096, notebook 09) but took 3.45
to 4.88 times the base's device time in that CSV; where its time goes is not measured apart yet.

Paths: the NF4 GEMM needs what any Triton kernel here needs (sm_80 or newer, :data:`nf4_gemm.NEEDS`); on an
older GPU the op dequantizes W and runs torch's matmuls (the same formulas). Each public entry point is a
``fused_kernels::`` op (:mod:`kernels.library`): ``qlora_linear`` and ``qlora_linear_backward`` here,
``qlora_via_16_bits`` and its backward in :mod:`kernels.qlora.via_16_bits`.
"""

from __future__ import annotations

import numbers

import torch

from kernels.gpu_features import unmet
from kernels.launch import check_device, check_dtype
from kernels.library import custom_op
from kernels.qlora.nf4 import NF4Weight, dequantize_blocks
from kernels.qlora.nf4_gemm import NEEDS, check_version, nf4_matmul_lowrank
from kernels.qlora.nf4_gemm import VERSIONS as GEMM_VERSIONS
from kernels.qlora.via_16_bits import qlora_via_16_bits

__all__ = ["DEFAULT_VERSION", "VERSIONS", "qlora_linear"]

VIA_16_BITS = "via_16_bits"
VERSIONS = (VIA_16_BITS, *GEMM_VERSIONS)
DEFAULT_VERSION = VIA_16_BITS  # by measurement (module docstring)


def _product(a, packed, absmax, n, k, blocksize, transposed, t, r, version):
    """``a · op(W) + t · r`` (op(W) = Wᵀ if ``transposed`` else W): the NF4 GEMM (``version`` as
    :data:`kernels.qlora.nf4_gemm.VERSIONS`, "" for its choice), or torch where it cannot run."""
    if unmet(NEEDS, a.device) is None:
        return nf4_matmul_lowrank(
            a, packed, absmax, (n, k), blocksize, transposed, t, r, version=version or None
        )
    w = dequantize_blocks(packed, absmax, (n, k), blocksize, a.dtype)
    return torch.addmm(t @ r, a, w.t() if transposed else w)


def _fake_forward(x2, packed, absmax, n, k, blocksize, lora_a, lora_b, scale, version):
    return x2.new_empty((x2.shape[0], n)), x2.new_empty((x2.shape[0], lora_a.shape[0]))


@custom_op(
    "qlora_linear",
    "(Tensor x, Tensor packed, Tensor absmax, int n, int k, int blocksize, Tensor lora_a, Tensor lora_b, "
    "float scale, str version) -> (Tensor, Tensor)",
    fake=_fake_forward,
)
def _forward_op(x2, packed, absmax, n, k, blocksize, lora_a, lora_b, scale, version):
    """``(y [M, N], s·t [M, r])`` for 2-D x."""
    ts = (x2 @ lora_a.t()).mul_(scale)
    return _product(x2, packed, absmax, n, k, blocksize, True, ts, lora_b.t(), version), ts


def _fake_backward(dy2, x2, packed, absmax, n, k, blocksize, lora_a, lora_b, ts, scale, version, need_dx):
    dx = x2.new_empty(x2.shape if need_dx else (0,))
    return dx, lora_a.new_empty(lora_a.shape), lora_b.new_empty(lora_b.shape)


@custom_op(
    "qlora_linear_backward",
    "(Tensor dy, Tensor x, Tensor packed, Tensor absmax, int n, int k, int blocksize, Tensor lora_a, "
    "Tensor lora_b, Tensor ts, float scale, str version, bool need_dx) -> (Tensor, Tensor, Tensor)",
    fake=_fake_backward,
)
def _backward_op(dy2, x2, packed, absmax, n, k, blocksize, lora_a, lora_b, ts, scale, version, need_dx):
    """``(dX or an empty [0] tensor when not need_dx, dA, dB)``."""
    us = (dy2 @ lora_b).mul_(scale)
    if need_dx:
        dx = _product(dy2, packed, absmax, n, k, blocksize, False, us, lora_a, version)
    else:
        dx = x2.new_empty(0)
    return dx, us.t() @ x2, dy2.t() @ ts


def _setup_context(ctx, inputs, output):
    x2, packed, absmax, n, k, blocksize, lora_a, lora_b, scale, version = inputs
    ctx.save_for_backward(x2, packed, absmax, lora_a, lora_b, output[1])
    ctx.shape, ctx.scale, ctx.version = (n, k, blocksize), scale, version


def _autograd_backward(ctx, dy2, _dts):
    x2, packed, absmax, lora_a, lora_b, ts = ctx.saved_tensors
    need_dx = ctx.needs_input_grad[0]
    dx, da, db = _backward_op(
        dy2, x2, packed, absmax, *ctx.shape, lora_a, lora_b, ts, ctx.scale, ctx.version, need_dx
    )
    return (dx if need_dx else None), None, None, None, None, None, da, db, None, None


_forward_op.register_autograd(_autograd_backward, setup_context=_setup_context)


def _check_arguments(x, weight, lora_a, lora_b, scale, version) -> None:
    fn = "qlora_linear"
    if not isinstance(weight, NF4Weight):
        raise TypeError(
            f"{fn}: weight must be an NF4Weight (kernels.qlora.nf4.quantize_nf4), got {type(weight)}"
        )
    for name, t in (("x", x), ("lora_a", lora_a), ("lora_b", lora_b)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{fn}: {name} must be a torch.Tensor, got {type(t).__name__}")
        check_dtype(fn, name, t, x)
        check_device(fn, name, t, x)
    check_device(fn, "weight.packed", weight.packed, x)
    N, K = weight.shape
    if x.dim() < 1 or x.shape[-1] != K:
        raise ValueError(f"{fn}: x must be [..., K] with K = weight.shape[1] = {K}, got {tuple(x.shape)}")
    if lora_a.dim() != 2 or lora_a.shape[1] != K or lora_a.shape[0] == 0:
        raise ValueError(f"{fn}: lora_a must be [r, K] with r ≥ 1 and K = {K}, got {tuple(lora_a.shape)}")
    if lora_b.dim() != 2 or lora_b.shape != (N, lora_a.shape[0]):
        raise ValueError(f"{fn}: lora_b must be [N, r] = {(N, lora_a.shape[0])}, got {tuple(lora_b.shape)}")
    if isinstance(scale, torch.Tensor) or not isinstance(scale, numbers.Real):
        raise TypeError(f"{fn}: scale must be a Python number (alpha / r), got {type(scale).__name__}")
    if version is not None and version not in VERSIONS:
        raise ValueError(f"{fn}: version={version!r} is not one of {VERSIONS} (or None)")
    if version != VIA_16_BITS:
        check_version(version, K, fn)


def qlora_linear(
    x: torch.Tensor,
    weight: NF4Weight,
    lora_a: torch.Tensor,
    lora_b: torch.Tensor,
    scale: float,
    *,
    version: str | None = None,
) -> torch.Tensor:
    """``x Wᵀ + s·(x Aᵀ) Bᵀ`` with W frozen in NF4: x ``[..., K]`` → ``[..., N]``, differentiable in x, lora_a
    and lora_b (fp32, fp16 or bf16, one dtype). The reference: :func:`kernels.reference.lora_linear` on
    :func:`kernels.qlora.nf4.dequantize_nf4` of the weight. ``version``: one of :data:`VERSIONS` (module
    docstring), None for :data:`DEFAULT_VERSION`."""
    _check_arguments(x, weight, lora_a, lora_b, scale, version)
    x2 = x.reshape(-1, x.shape[-1])
    n, k = weight.shape
    absmax = weight.absmax().contiguous()
    args = (x2, weight.packed, absmax, n, k, weight.blocksize, lora_a, lora_b, float(scale))
    version = version or DEFAULT_VERSION
    y2, _ = qlora_via_16_bits(*args) if version == VIA_16_BITS else _forward_op(*args, version)
    return y2.view(*x.shape[:-1], n)
