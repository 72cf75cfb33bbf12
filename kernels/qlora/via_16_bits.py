"""The QLoRA linear through a 16-bit copy of W: the usual order's dequantize pass, then our fused LoRA
kernels.

Math as :mod:`kernels.qlora.linear` (x ``[M, K]``, W ``[N, K]`` in NF4, A ``[r, K]``, B ``[N, r]``, scale s)::

    forward:  W16 = dequantize(W)                    one pass (:mod:`kernels.qlora.dequantize`)
              (y, s·t) = lora_linear(x, W16, A, B, s)  the fused LoRA op (:mod:`kernels.lora.linear`)
    backward: W16 = dequantize(W)                    the pass again: the 16-bit copy is not kept
              (dX, dA, dB) = its backward op on W16

Against the usual order (PEFT with bitsandbytes) it keeps the passes and changes the rest: the LoRA term in
the GEMM's epilogue by our kernels instead of torch ops around cuBLAS. Against the NF4 GEMM's versions
(:mod:`kernels.qlora.nf4_gemm`: W decoded inside the GEMM's loop) it pays the passes' bytes and keeps a GEMM
whose tiles the compiler copies straight from memory. The 16-bit copy lives for one op call at
a time, as the usual order's: nothing of 16 bits per parameter is saved for the backward (the layer keeps
QLoRA's memory).

Paths: the pass needs what :mod:`kernels.qlora.nf4_gemm` needs (:data:`~kernels.qlora.nf4_gemm.NEEDS`);
where the GPU lacks it W is dequantized in torch (:func:`kernels.qlora.nf4.dequantize_blocks`); the LoRA op
takes its own paths (:func:`kernels.lora.linear.choose_version`). The public entry point is
:func:`kernels.qlora.linear.qlora_linear` (``version="via_16_bits"``, its default), which checks the
arguments and calls the op here, ``fused_kernels::qlora_via_16_bits`` (with its backward).
"""

from __future__ import annotations

import torch

import kernels.lora.linear  # noqa: F401  (registers fused_kernels::lora_linear and its backward)
from kernels.gpu_features import unmet
from kernels.library import custom_op, ops
from kernels.qlora.dequantize import dequantize_nf4_kernel
from kernels.qlora.nf4 import dequantize_blocks, tables_on
from kernels.qlora.nf4_gemm import NEEDS

__all__ = ["qlora_via_16_bits"]


def _to_16_bits(packed, absmax, n, k, blocksize, dtype) -> torch.Tensor:
    """W ``[n, k]`` in ``dtype``: the dequantize kernel, or torch where the GPU lacks what it needs."""
    if unmet(NEEDS, packed.device) is None:
        return dequantize_nf4_kernel(packed, absmax, tables_on(packed.device)[0], (n, k), blocksize, dtype)
    return dequantize_blocks(packed, absmax, (n, k), blocksize, dtype)


def _fake_forward(x2, packed, absmax, n, k, blocksize, lora_a, lora_b, scale):
    return x2.new_empty((x2.shape[0], n)), x2.new_empty((x2.shape[0], lora_a.shape[0]))


@custom_op(
    "qlora_via_16_bits",
    "(Tensor x, Tensor packed, Tensor absmax, int n, int k, int blocksize, Tensor lora_a, Tensor lora_b, "
    "float scale) -> (Tensor, Tensor)",
    fake=_fake_forward,
)
def qlora_via_16_bits(x2, packed, absmax, n, k, blocksize, lora_a, lora_b, scale):
    """``(y [M, N], s·t [M, r])`` for 2-D x (the arguments as :func:`kernels.qlora.linear.qlora_linear`
    checked them)."""
    w16 = _to_16_bits(packed, absmax, n, k, blocksize, x2.dtype)
    return ops().lora_linear(x2, w16, lora_a, lora_b, None, scale, "", "", "")


def _fake_backward(dy2, x2, packed, absmax, n, k, blocksize, lora_a, lora_b, ts, scale, need_dx):
    dx = x2.new_empty(x2.shape if need_dx else (0,))
    return dx, lora_a.new_empty(lora_a.shape), lora_b.new_empty(lora_b.shape)


@custom_op(
    "qlora_via_16_bits_backward",
    "(Tensor dy, Tensor x, Tensor packed, Tensor absmax, int n, int k, int blocksize, Tensor lora_a, "
    "Tensor lora_b, Tensor ts, float scale, bool need_dx) -> (Tensor, Tensor, Tensor)",
    fake=_fake_backward,
)
def _backward_op(dy2, x2, packed, absmax, n, k, blocksize, lora_a, lora_b, ts, scale, need_dx):
    """``(dX or an empty [0] tensor when not need_dx, dA, dB)``."""
    w16 = _to_16_bits(packed, absmax, n, k, blocksize, dy2.dtype)
    return ops().lora_linear_backward(dy2, x2, w16, lora_a, lora_b, ts, scale, "", "", need_dx)


def _setup_context(ctx, inputs, output):
    x2, packed, absmax, n, k, blocksize, lora_a, lora_b, scale = inputs
    ctx.save_for_backward(x2, packed, absmax, lora_a, lora_b, output[1])  # no 16-bit W among them
    ctx.shape, ctx.scale = (n, k, blocksize), scale


def _autograd_backward(ctx, dy2, _dts):
    x2, packed, absmax, lora_a, lora_b, ts = ctx.saved_tensors
    need_dx = ctx.needs_input_grad[0]
    dx, da, db = _backward_op(dy2, x2, packed, absmax, *ctx.shape, lora_a, lora_b, ts, ctx.scale, need_dx)
    return (dx if need_dx else None), None, None, None, None, None, da, db, None


qlora_via_16_bits.register_autograd(_autograd_backward, setup_context=_setup_context)
