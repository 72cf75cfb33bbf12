"""A two-layer MLP in one kernel: ``y = act(relu(x W1ᵀ + b1) W2ᵀ + b2)``, forward only (inference).

Shapes: ``x`` ``[M, K]`` (N-D inputs flattened to ``[prod(leading dims), K]``), ``W1`` ``[H, K]``,
``b1`` ``[H]``, ``W2`` ``[N, H]``, ``b2`` ``[N]`` → ``y`` ``[M, N]``; ``act`` is ``sigmoid`` (DLRM's top-MLP
tail), ``relu`` or ``none``. This is the shape of DLRM's last over-arch layers and of LoRA's rank-r path:
H small.

FLOPs 2·M·H·(K + N). Bytes (element size s): eager runs four kernels (addmm, relu, addmm, sigmoid) and moves
(M·K + H·K + 4·M·H + N·H + 3·M·N)·s (h written, read and rewritten by relu, read again; z written, read and
rewritten by sigmoid); fused, h and z never leave the chip: (M·K + H·K + N·H + M·N)·s in one launch.
For large M the weights are noise and the fused intensity is 2·M·H·(K + N) / (M·(K + N)·s) = 2H/s FLOP/byte;
the H100 balance is ≈ 740 TFLOP/s / 2.96 TB/s ≈ 250 FLOP/byte, so in bf16 (s = 2) the MLP is memory-bound up
to H ≈ 250: saving the round trips of h is what fusion buys, in the same range of H where it fits on chip.

"Can we write the whole thing as one kernel?" The tempting block plan is wrong. Give each program a block of
*hidden units* ``h[:, j0:j1]`` and have it apply the second Linear to its partial hidden vector: but
``y[m, n] = Σ_j h[m, j] · W2[n, j]`` reduces over the *whole* hidden dimension, so a program holding only
``j0:j1`` has a partial sum, not ``y``. Adding ``b2`` and applying the sigmoid to a partial sum is wrong
(sigmoid(a) + sigmoid(b) ≠ sigmoid(a + b)); fixing it needs a cross-program reduction (atomics or a second
pass over a ``[programs, M, N]`` buffer) before the epilogue, which gives back what fusion saved.

The fix: each program owns a block of *rows* and the *full* hidden width on chip.

1. ``acc[BLOCK_M, BLOCK_H] = Σ_k x[rows, k-tile] · W1[:, k-tile]ᵀ`` tile by tile over K (fp32 accumulator);
2. ``h = relu(acc + b1)`` in registers, rounded to the input dtype (as ``nn.Linear`` would store it);
3. for each output tile: ``y[rows, n-tile] = act(h · W2[n-tile, :]ᵀ + b2)``; the whole reduction over H is
   inside this program, so the epilogue is exact. N itself is looped over, so only H must fit.

The limit: the accumulator is ``BLOCK_M × BLOCK_H`` fp32 in registers (``BLOCK_H`` = H rounded up to a power
of two, at least 16, because ``tl.dot`` tiles are powers of two). We allow ``BLOCK_M · BLOCK_H ≤ 16384``
values = 64 KB per program, a quarter of an H100 SM's 256 KB register file (64 registers per thread at 8
warps, leaving room for the tiles in flight), and keep ``BLOCK_M ≥ 64`` (a full Hopper wgmma row block) at
H = 256, so **H ≤ 256**. Compiled for sm_90 (triton 3.9, ``triton.compile`` needs no GPU) at H = 256,
BLOCK_M = 64: bf16 takes 113–128 registers per thread at 8 warps (240 at 4) and 106–139 KB of shared memory
for the pipelined K loop (wgmma); fp32 (FMA dots, no tensor cores) already takes 255 registers and
147–213 KB of the 227 KB per block. Doubling H would double both: over budget. Above H = 256
:func:`fused_mlp` raises; use two GEMMs (``reference.fused_mlp``) or a split-hidden kernel with a
cross-program reduction.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.bias_relu import check_device, check_dtype
from kernels.runtime import autotune_configs, dot_upcast, interpreting

MAX_HIDDEN = 256  # largest BLOCK_H: see the module docstring
ACC_BUDGET = 16_384  # fp32 accumulator values per program: BLOCK_M · BLOCK_H
FINAL_ACTIVATIONS = ("sigmoid", "relu", "none")

# BLOCK_M, BLOCK_H, BLOCK_N come from the shape (host side); these tune the K loop. The first is the only
# one used under the CPU interpreter. All fit in 227 KB of shared memory at H = 256 in fp32 (4 stages do not).
MLP_CONFIGS = [
    triton.Config({"BLOCK_K": 32}, num_warps=4, num_stages=3),
    triton.Config({"BLOCK_K": 32}, num_warps=8, num_stages=3),
    triton.Config({"BLOCK_K": 64}, num_warps=4, num_stages=2),
    triton.Config({"BLOCK_K": 64}, num_warps=8, num_stages=2),
]


@triton.jit
def _fused_mlp_fwd_kernel(
    x_ptr, w1_ptr, b1_ptr, w2_ptr, b2_ptr, out_ptr, M, K, H, N,
    stride_xm, stride_xk, stride_w1h, stride_w1k, stride_b1, stride_w2n, stride_w2h, stride_b2,
    stride_om, stride_on,
    FINAL: tl.constexpr, DOT_UPCAST: tl.constexpr, INPUT_PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):  # fmt: skip
    pid = tl.program_id(0)
    rows = (pid * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
    row_mask = rows < M
    hid = tl.arange(0, BLOCK_H)
    hid_mask = hid < H

    # 1. acc = x[rows, :] · W1ᵀ, K tile by K tile; W1ᵀ tile [BLOCK_K, BLOCK_H] read through strides.
    acc = tl.zeros([BLOCK_M, BLOCK_H], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        k_mask = ks < K
        x = tl.load(
            x_ptr + rows[:, None] * stride_xm + ks[None, :] * stride_xk,
            mask=row_mask[:, None] & k_mask[None, :],
            other=0.0,
        )
        w1t = tl.load(
            w1_ptr + ks[:, None] * stride_w1k + hid[None, :] * stride_w1h,
            mask=k_mask[:, None] & hid_mask[None, :],
            other=0.0,
        )
        if DOT_UPCAST:  # interpreter + bf16: tl.dot is wrong there (see kernels.runtime)
            x = x.to(tl.float32)
            w1t = w1t.to(tl.float32)
        acc = tl.dot(x, w1t, acc, input_precision=INPUT_PRECISION)

    # 2. h = relu(acc + b1); padded hidden columns are relu(0 + 0) = 0 and add nothing below.
    b1 = tl.load(b1_ptr + hid * stride_b1, mask=hid_mask, other=0.0).to(tl.float32)
    h = tl.maximum(acc + b1[None, :], 0.0).to(out_ptr.dtype.element_ty)
    if DOT_UPCAST:
        h = h.to(tl.float32)

    # 3. y = act(h · W2ᵀ + b2), one output tile at a time; h stays on chip for all of them.
    for n0 in range(0, N, BLOCK_N):
        ns = n0 + tl.arange(0, BLOCK_N)
        n_mask = ns < N
        w2t = tl.load(
            w2_ptr + hid[:, None] * stride_w2h + ns[None, :] * stride_w2n,
            mask=hid_mask[:, None] & n_mask[None, :],
            other=0.0,
        )
        if DOT_UPCAST:
            w2t = w2t.to(tl.float32)
        b2 = tl.load(b2_ptr + ns * stride_b2, mask=n_mask, other=0.0).to(tl.float32)
        z = tl.dot(h, w2t, input_precision=INPUT_PRECISION) + b2[None, :]
        if FINAL == "sigmoid":
            z = 1.0 / (1.0 + tl.exp(-z))
        elif FINAL == "relu":
            z = tl.maximum(z, 0.0)
        tl.store(
            out_ptr + rows[:, None] * stride_om + ns[None, :] * stride_on,
            z.to(out_ptr.dtype.element_ty),
            mask=row_mask[:, None] & n_mask[None, :],
        )


_fwd_tuned = triton.autotune(autotune_configs(MLP_CONFIGS), key=["M", "K", "H", "N"])(_fused_mlp_fwd_kernel)


def _pow2_at_least_16(n: int) -> int:
    return max(16, triton.next_power_of_2(n))


def _check(x, w1, b1, w2, b2, final_activation: str) -> None:
    if final_activation not in FINAL_ACTIVATIONS:
        raise ValueError(
            f"fused_mlp: final_activation {final_activation!r} is not one of {FINAL_ACTIVATIONS}"
        )
    for name, t in (("x", x), ("w1", w1), ("b1", b1), ("w2", w2), ("b2", b2)):
        check_dtype("fused_mlp", name, t, x)
        check_device("fused_mlp", name, t, x)
    if x.dim() < 1:
        raise ValueError("fused_mlp: x must have at least 1 dimension, got a 0-d tensor")
    if w1.dim() != 2 or w1.shape[1] != x.shape[-1]:
        raise ValueError(
            f"fused_mlp: w1 must be [H, K] with K = x.shape[-1] = {x.shape[-1]}, got {tuple(w1.shape)}"
        )
    H = w1.shape[0]
    if b1.shape != (H,):
        raise ValueError(f"fused_mlp: b1 must have shape ({H},) to match w1, got {tuple(b1.shape)}")
    if w2.dim() != 2 or w2.shape[1] != H:
        raise ValueError(f"fused_mlp: w2 must be [N, H] with H = {H}, got {tuple(w2.shape)}")
    if b2.shape != (w2.shape[0],):
        raise ValueError(f"fused_mlp: b2 must have shape ({w2.shape[0]},) to match w2, got {tuple(b2.shape)}")
    if H == 0 or _pow2_at_least_16(H) > MAX_HIDDEN:
        raise ValueError(
            f"fused_mlp: hidden width H={H} is outside 1..{MAX_HIDDEN}: each program keeps a "
            f"BLOCK_M x H fp32 accumulator on chip (BLOCK_M x H <= {ACC_BUDGET} values, BLOCK_M >= 64), "
            f"so H must be at most {MAX_HIDDEN}. Use two GEMMs (kernels.reference.fused_mlp) for wider "
            "layers."
        )
    if torch.is_grad_enabled() and any(t.requires_grad for t in (x, w1, b1, w2, b2)):
        raise RuntimeError(
            "fused_mlp is forward-only (inference): call it under torch.no_grad() or torch.inference_mode()"
        )


def fused_mlp(
    x: torch.Tensor,
    w1: torch.Tensor,
    b1: torch.Tensor,
    w2: torch.Tensor,
    b2: torch.Tensor,
    final_activation: str = "sigmoid",
) -> torch.Tensor:
    """``act(relu(x W1ᵀ + b1) W2ᵀ + b2)`` in one Triton kernel, the hidden activations never leaving the chip.

    Any strides; H ≤ :data:`MAX_HIDDEN`. Returns ``[..., N]`` in x's dtype. Forward only.
    """
    _check(x, w1, b1, w2, b2, final_activation)
    x2 = x.reshape(-1, x.shape[-1]) if x.dim() != 2 else x
    M, K = x2.shape
    H, N = w1.shape[0], w2.shape[0]
    out = torch.empty((M, N), device=x.device, dtype=x.dtype)
    if M == 0 or N == 0:
        return out.view(*x.shape[:-1], N)

    block_h = _pow2_at_least_16(H)
    block_m = min(ACC_BUDGET // block_h, 128, _pow2_at_least_16(M))  # no wasted rows when M is small
    block_n = min(64, _pow2_at_least_16(N))
    # fp32 dots: TF32 only where torch's own matmuls would use it ("high"/"medium"; default "highest").
    use_tf32 = (
        x.dtype == torch.float32 and not interpreting() and torch.get_float32_matmul_precision() != "highest"
    )
    _fwd_tuned[(triton.cdiv(M, block_m),)](
        x2, w1, b1, w2, b2, out, M, K, H, N,
        x2.stride(0), x2.stride(1), w1.stride(0), w1.stride(1), b1.stride(0), w2.stride(0), w2.stride(1),
        b2.stride(0), out.stride(0), out.stride(1),
        FINAL=final_activation, DOT_UPCAST=dot_upcast(x.dtype),
        INPUT_PRECISION="tf32" if use_tf32 else "ieee", BLOCK_M=block_m, BLOCK_H=block_h, BLOCK_N=block_n,
    )  # fmt: skip
    return out.view(*x.shape[:-1], N)
