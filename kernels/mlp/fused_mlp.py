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

Both ReLUs are ``where(z < 0, 0, z)``, torch.relu's results for NaN, ±inf and -0.0; why not
``tl.maximum(z, 0)``: it turns NaN into 0, so a row of x with a NaN would come out finite instead of NaN.

The limit: the accumulator is ``BLOCK_M × BLOCK_H`` fp32 in registers (``BLOCK_H`` = H rounded up to a power
of two, at least 16, because ``tl.dot`` tiles are powers of two). We allow ``BLOCK_M · BLOCK_H ≤ 16384``
values (64 KB) for fp32 inputs and 32768 for 16-bit ones (whose K-loop tiles take half the shared memory),
and want room for ``BLOCK_M ≥ 64`` (a full Hopper wgmma row block) at H = 256, so **H ≤ 256**. Compiled
for sm_90 (triton 3.9, ``triton.compile`` needs no GPU) at H = 256, BLOCK_M = 64: bf16 takes 113–128
registers per thread at 8 warps (240 at 4) and 106–139 KB of shared memory for the pipelined K loop
(wgmma); fp32 (FMA dots, no tensor cores) already takes 255 registers and 147–213 KB of the 227 KB per
block. Doubling H would double both: over budget. Above H = 256 :func:`fused_mlp` raises; use two GEMMs
(``reference.fused_mlp``) or a split-hidden kernel with a cross-program reduction.

Launch parameters come from a rule (:func:`launch_params`), read off a sweep of BLOCK_M × split × BLOCK_K ×
warps × stages on an H100 (triton 3.6, 2026-11-22), not from the autotuner: the autotuner's dispatch is
Python on every call, and this kernel is often so short that the host, not the GPU, sets its pace.

What the measurements show (``benchmarks/bench_fused_mlp.py``, median *device* time, every provider under
the same fp32 matmul precision). The numbers are in the committed CSV under ``benchmarks/results/fused_mlp/``
(stamped with device, versions and date) and notebook 04 prints the ratios from it; this docstring states
none, so it cannot drift from them. On the H100 run:

- DLRM top tail (K = 512, H = 256, N = 1), the case fusion is for (h, M × 256, is the largest tensor eager
  moves): fused is the fastest provider at every M, in bf16 and in TF32.
- LoRA rank 16 (K = N = 4096, H = 16): no consistent win. Slower than eager at small M, within a few percent
  either way at large M (ahead at some sizes, behind at others): there is little to save, h is only M × 16,
  and both sides are bound by reading x and writing y. At small M each
  program's 4096-long K loop is latency, which is why :func:`launch_params` splits the output tiles over
  more programs there.
- fp32 without TF32 (PyTorch's default precision, ``"highest"``): fused is *slower* than eager at every M.
  Its dots are fp32 FMA on the CUDA cores, where at the DLRM shape it reaches about half the TFLOP/s of
  eager's cuBLAS GEMMs: compute-bound, so the bytes fusion saves do not help. Use bf16, or allow TF32
  (``torch.set_float32_matmul_precision("high")``), which the kernel obeys.
- The CSV's ``host us`` column is the CPU time per call (:func:`lecture_code.bench.host_us`). Where it
  exceeds the device time, a small-M MLP called from a Python loop is launch-bound whichever provider is
  used: CUDA graphs or ``torch.compile(mode="reduce-overhead")`` fix that, a faster kernel does not. (A first
  benchmark run timed with plain ``do_bench`` counted part of this kernel's host time, then with autotuner
  dispatch, as device time: ``lecture_code/bench.py`` explains.)
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.configs import MlpConfig
from kernels.fast_launch import CachedLauncher
from kernels.launch import (
    MAX_TILE_ELEMENTS,
    as_rows,
    cdiv,
    check_device,
    check_dtype,
    check_tensor,
    dot_block,
    input_precision,
    int32_offsets,
    sm_count,
)
from kernels.library import custom_op, decode_config, encode_config
from kernels.runtime import dot_upcast

MAX_HIDDEN = 256  # largest BLOCK_H: see the module docstring
SMEM_BUDGET = 192 * 1024  # bytes for the K loop's pipelined tiles (227 KB per block; the rest: W2 tiles, h)
FINAL_ACTIVATIONS = ("sigmoid", "relu", "none")


@triton.jit
def _fused_mlp_fwd_kernel(
    x_ptr, w1_ptr, b1_ptr, w2_ptr, b2_ptr, out_ptr, M, K, H, N, SPLIT,
    stride_xm, stride_xk, stride_w1h, stride_w1k, stride_b1, stride_w2n, stride_w2h, stride_b2,
    stride_om, stride_on,
    FINAL: tl.constexpr, DOT_UPCAST: tl.constexpr, INPUT_PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):  # fmt: skip
    # 1-D grid of SPLIT × row blocks. Program (m, s) computes h for row block m, then writes the output tiles
    # s, s + SPLIT, … The split index varies fastest, so the SPLIT programs that share rows run together and
    # all but the first find those rows of x in L2. (1-D: a grid's y axis stops at 65535 blocks.)
    pid = tl.program_id(0)
    pid_m = pid // SPLIT
    pid_s = pid % SPLIT
    rows = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
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

    # 2. h = relu(acc + b1), as torch.relu (NaN stays NaN, not tl.maximum). Padded hidden columns are set to 0
    # explicitly: their acc is x · 0, which is NaN where x holds an inf or a NaN, and would poison the row.
    b1 = tl.load(b1_ptr + hid * stride_b1, mask=hid_mask, other=0.0).to(tl.float32)
    z1 = acc + b1[None, :]
    h = tl.where(hid_mask[None, :], tl.where(z1 < 0, 0.0, z1), 0.0).to(out_ptr.dtype.element_ty)
    if DOT_UPCAST:
        h = h.to(tl.float32)

    # 3. y = act(h · W2ᵀ + b2), one output tile at a time (every SPLIT-th); h stays on chip for all of them.
    for n0 in range(pid_s * BLOCK_N, N, SPLIT * BLOCK_N):
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
            z = tl.where(z < 0, 0.0, z)
        tl.store(
            out_ptr + rows[:, None] * stride_om + ns[None, :] * stride_on,
            z.to(out_ptr.dtype.element_ty),
            mask=row_mask[:, None] & n_mask[None, :],
        )


_launch_fwd = CachedLauncher(_fused_mlp_fwd_kernel)  # the launch cached per shape (kernels.fast_launch)


def launch_params(
    M: int, K: int, H: int, N: int, dtype: torch.dtype, tensor_cores: bool, num_sms: int
) -> MlpConfig:
    """Tiles, output split, warps and pipeline depth for ``[M, K] → H → N``: a rule, not autotuning.

    ``tensor_cores``: the dots run on tensor cores (fp16/bf16, or fp32 as TF32); otherwise they are fp32 FMA
    dots on the CUDA cores, where recomputing h costs real time. ``num_sms``: programs that fill the GPU.

    - ``BLOCK_M``: as many rows as the fp32 accumulator budget allows (``BLOCK_M · BLOCK_H`` ≤ 32768 values
      for 16-bit inputs, 16384 for fp32, whose tiles take twice the shared memory), at most 128. Tall blocks
      re-read W1 (from L2) fewer times: at M = 65536, H = 256 in bf16, 128 rows ran in 51 µs, 64 in 62–66.
    - Too few row blocks to fill the GPU (small M)? With tensor cores, split each row block's output tiles
      over ``split`` programs, each recomputing h: the recompute re-reads x, mostly from L2, and is cheap
      next to an idle GPU (LoRA shape, M = 256, bf16: 92 µs unsplit, 21 µs over 64 programs). With FMA
      dots the recompute is not cheap (split made fp32 slower in every measured case): shrink BLOCK_M instead.
    - Warps: the accumulator takes ``BLOCK_M · BLOCK_H / (32 · warps)`` registers per thread. Above 128 at
      4 warps (tensor cores), or 64 (FMA dots, which also hold operand fragments in registers), use 8 warps.
    - ``BLOCK_K`` and stages: tensor-core dots stage ``stages · (BLOCK_M + BLOCK_H) · BLOCK_K`` operand
      elements in shared memory; take the longest K step that fits :data:`SMEM_BUDGET`. FMA dots: 64 and 3.
    """
    s = 2 if dtype in (torch.float16, torch.bfloat16) else 4
    block_h = dot_block(H)
    block_n = min(64, dot_block(N))
    block_m = min((32_768 if s == 2 else 16_384) // block_h, 128, dot_block(M))
    split = 1
    if tensor_cores:
        row_blocks = cdiv(M, block_m)
        split = min(cdiv(N, block_n), max(1, cdiv(num_sms, row_blocks)))
        num_warps = 8 if block_m * block_h > 128 * 128 else 4
        for block_k, num_stages in ((128, 3), (64, 3), (32, 4), (32, 3), (16, 3)):
            if num_stages * (block_m + block_h) * block_k * s <= SMEM_BUDGET:
                break
    else:
        while block_m > 16 and cdiv(M, block_m) < num_sms:
            block_m //= 2
        num_warps = 8 if block_m * block_h > 64 * 128 else 4
        block_k, num_stages = 64, 3
    block_k = min(block_k, dot_block(K))  # no K step longer than K itself
    return MlpConfig(block_m, block_h, block_n, block_k, split, num_warps, num_stages)


def _check_activation(final_activation: str) -> None:
    """Also inside the op: the kernel's constexpr branches would take any other name for one of these."""
    if final_activation not in FINAL_ACTIVATIONS:
        raise ValueError(
            f"fused_mlp: final_activation {final_activation!r} is not one of {FINAL_ACTIVATIONS}"
        )


def _check(x, w1, b1, w2, b2, final_activation: str) -> None:
    _check_activation(final_activation)
    for name, t in (("x", x), ("w1", w1), ("b1", b1), ("w2", w2), ("b2", b2)):
        check_tensor("fused_mlp", name, t)
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
    if H == 0 or dot_block(H) > MAX_HIDDEN:
        raise ValueError(
            f"fused_mlp: hidden width H={H} is outside 1..{MAX_HIDDEN}: each program keeps a "
            "BLOCK_M x H fp32 accumulator on chip (BLOCK_M x H <= 16384 values for fp32, BLOCK_M >= 64), "
            f"so H must be at most {MAX_HIDDEN}. Use two GEMMs (kernels.reference.fused_mlp) for wider "
            "layers."
        )
    if torch.is_grad_enabled() and any(t.requires_grad for t in (x, w1, b1, w2, b2)):
        raise RuntimeError(
            "fused_mlp is forward-only (inference): call it under torch.no_grad() or torch.inference_mode()"
        )


def _filled_config(x2, w1, w2, config: MlpConfig | None) -> MlpConfig:
    """The rule's launch parameters (:func:`launch_params`), ``config``'s set fields on top, checked."""
    M, K = x2.shape
    H, N = w1.shape[0], w2.shape[0]
    tensor_cores = x2.dtype != torch.float32 or input_precision(x2.dtype) == "tf32"
    p = launch_params(M, K, H, N, x2.dtype, tensor_cores, sm_count(x2.device))
    if config is not None:
        p = config.filled(p)
        if p.block_h < H:
            raise ValueError(f"fused_mlp: config.block_h={p.block_h} does not cover the hidden width H={H}")
        small = {f: getattr(p, f) for f in ("block_m", "block_h", "block_n", "block_k") if getattr(p, f) < 16}
        if small:
            raise ValueError(f"fused_mlp: config {small} below 16: every side of a tl.dot tile must be >= 16")
        if p.block_m * p.block_h > MAX_TILE_ELEMENTS:
            raise ValueError(f"fused_mlp: config block_m * block_h = {p.block_m * p.block_h} is above "
                             f"Triton's {MAX_TILE_ELEMENTS} elements per block")  # fmt: skip
    return p


def _fake_forward(x2, w1, b1, w2, b2, final_activation, config):
    return x2.new_empty((x2.shape[0], w2.shape[0]))


@custom_op(
    "fused_mlp",
    "(Tensor x, Tensor w1, Tensor b1, Tensor w2, Tensor b2, str final_activation, str config) -> Tensor",
    fake=_fake_forward,
)
def _fused_mlp_op(x2, w1, b1, w2, b2, final_activation, config):
    """The op, on 2-D x: forward only (no autograd formula: :func:`fused_mlp` refuses inputs that require
    grad). ``config``: :func:`kernels.library.encode_config` of an :class:`MlpConfig`, or ``""``."""
    _check_activation(final_activation)
    M, K = x2.shape
    H, N = w1.shape[0], w2.shape[0]
    out = torch.empty((M, N), device=x2.device, dtype=x2.dtype)
    if M == 0 or N == 0:
        return out
    precision = input_precision(x2.dtype)  # fp32: TF32 only where torch's own matmuls would use it
    p = _filled_config(x2, w1, w2, decode_config(config))
    args = (x2, w1, b1, w2, b2, out, M, K, H, N, p.split,
            x2.stride(0), x2.stride(1), w1.stride(0), w1.stride(1), b1.stride(0), w2.stride(0), w2.stride(1),
            b2.stride(0), out.stride(0), out.stride(1))  # fmt: skip
    constexprs = (("FINAL", final_activation), ("DOT_UPCAST", dot_upcast(x2.dtype)),
                  ("INPUT_PRECISION", precision), ("BLOCK_M", p.block_m),
                  ("BLOCK_H", p.block_h), ("BLOCK_N", p.block_n), ("BLOCK_K", p.block_k))  # fmt: skip
    _launch_fwd((p.split * cdiv(M, p.block_m),), args, constexprs, p.num_warps, p.num_stages)
    return out


def fused_mlp(
    x: torch.Tensor,
    w1: torch.Tensor,
    b1: torch.Tensor,
    w2: torch.Tensor,
    b2: torch.Tensor,
    final_activation: str = "sigmoid",
    config: MlpConfig | None = None,
) -> torch.Tensor:
    """``act(relu(x W1ᵀ + b1) W2ᵀ + b2)`` in one Triton kernel, the hidden activations never leaving the chip.

    Any strides; H ≤ :data:`MAX_HIDDEN`. Returns ``[..., N]`` in x's dtype. Forward only. ``config``: an
    :class:`~kernels.configs.MlpConfig` whose set fields override the rule's (:func:`launch_params`). The op
    ``fused_kernels::fused_mlp`` (on x as rows).
    """
    _check(x, w1, b1, w2, b2, final_activation)
    if config is not None and not isinstance(config, MlpConfig):
        raise TypeError(f"fused_mlp: config must be an MlpConfig (or None), got {type(config).__name__}")
    x2 = as_rows(x, "x")
    # The kernel indexes rows in int64, everything else in int32: an operand too large for that is copied.
    x2, b1, b2 = int32_offsets(x2), int32_offsets(b1), int32_offsets(b2)
    w1, w2 = int32_offsets(w1, (0, 1)), int32_offsets(w2, (0, 1))
    if config is not None and x2.shape[0] > 0 and w2.shape[0] > 0:
        _filled_config(x2, w1, w2, config)  # a config that cannot run raises here, before the op
    out = _fused_mlp_op(x2, w1, b1, w2, b2, final_activation, encode_config(config))
    return out.view(*x.shape[:-1], w2.shape[0])
