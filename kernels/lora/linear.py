"""LoRA linear, forward and backward, fused: ``y = x Wᵀ + b + s·(x Aᵀ) Bᵀ``.

Notation: x [M, K] tokens (N-D inputs are flattened to rows), frozen base weight W [N, K] and bias b [N],
adapter A [r, K], B [N, r], scale s = alpha / r. t = x Aᵀ [M, r] is the adapter's bottleneck.

**Forward** ``y = x Wᵀ + b + s·t Bᵀ``. FLOPs: 2·M·K·N (base) + 2·M·r·(K + N) (LoRA: +0.8% at M = 8192,
K = N = 4096, r = 16). Bytes (element size e): x, W, y once, (M·K + N·K + M·N)·e = 168 MB (160 MiB) there in
bf16. The base GEMM is compute-bound (on an H100 ≈ 370 µs at ≈ 740 TFLOP/s, ≈ 55 µs for its bytes at
≈ 3 TB/s), so the floor of a LoRA forward is the base GEMM plus ≈ 1%: LoRA's bytes and FLOPs are noise *if*
they ride along in the base GEMM. Eager PyTorch instead runs x Aᵀ (a pass over x), (·) Bᵀ (writes an M×N
tensor), the scale (reads and writes it), the add (reads two, writes one): 7 extra M×N-sized passes (x is
M×N-sized there, K = N), ≈ 470 MB, ≈ 155 µs at ≈ 3 TB/s: ≈ +40%.

**Backward** (W and b frozen), with u = dY B [M, r]::

    dX = dY W + s·u A          (the base dX GEMM plus a rank-r epilogue)
    dA = s·uᵀ x = (s·u)ᵀ x     ([r, K]: a reduction over M)
    dB = s·dYᵀ t = dYᵀ (s·t)   ([N, r]: a reduction over M)

Saved: x (the frozen base linear saves it too) and s·t [M, r] (M·r·e bytes: 256 KB at M = 8192, r = 16); A, B,
W are parameters. Nothing is recomputed: t comes from the forward. Passes over dY: the dX GEMM reads dY. v3
(``"fused"``): producer programs of the same launch, on SMs of their own, stream dY's row blocks for
s·u = s·dY B while the tiles run the GEMM, then (r ≤ 16) stream it once more, in column strips, for dB; their
passes ride beside the GEMM (the launch: 369 µs against 359 with s·u given and no dB, cuBLAS's dY W 342, at
M = 8192, K = N = 4096, r = 16: the H200 probe CSV of 2026-11-29, under "Where the rest goes" below). v2
(``"epilogue"``): s·u is its own pass, which for a large dY also computes dB (:mod:`kernels.lora.skinny`: one
read of dY for both); else dB reads dY once more (cuBLAS). dA reads x once (the base backward never reads x,
so that pass is new work no fusion of the base GEMMs removes; cuBLAS, ≈ 38 µs at that shape). The v3 producers
have no time left for it, measured (H100, 2026-11-24): dA in column strips of x after their s·u pass took the
launch from 366 to 433 µs, and dB summed during the s·u pass (one fp32 share per producer, read, added to and
written back at every K step) to 539; a producer's SM streams ≈ 100 GB/s, as many bytes as its shared memory
keeps in flight. So outside the dX launch v3 reads x once (dA), and dY once more above r = 16 (dB); v2 reads x
once and dY once or twice. Each such pass over a 64 MB operand takes cuBLAS ≈ 38 µs on that H100 under the
benchmark's timer (≈ 1.8 TB/s; a Triton pass measured no faster), 31 µs once L2 holds no dirty lines: the
timer's L2 flush (a 256 MB write) leaves lines that the pass must write back first, and right after the dX
launch (which leaves dX's) it takes 34. Every reduction has a fixed order (no atomics): the same bits every
run.

**The ladder** (``version=``: named versions, as llm.c's kernel1…N), each tested and timed side by side:

- ``v0`` torch: ``F.linear`` + ``x @ Aᵀ`` + ``@ Bᵀ`` + scale + add; torch backward.
- ``v1`` cuBLAS's base output, then one Triton kernel for the branch (:mod:`kernels.lora.branch`: t on chip,
  ``y += s·t Bᵀ`` read-modify-write): floor ≈ +17% (y read and written again). Torch backward.
- ``v2`` the expand ``s·t Bᵀ`` in the epilogue of a Hopper-grade base GEMM (:mod:`kernels.lora.gemm`), s·t
  from a pass of its own over x (cuBLAS, or :mod:`kernels.lora.skinny` for a large x). Backward: s·u = s·dY B
  by cuBLAS (with dB, by :mod:`kernels.lora.skinny`, for a large dY), the dX GEMM adds s·u A in its epilogue
  (``"epilogue"`` mode), dA (and dB otherwise) by cuBLAS.
- ``v3`` the shrink fused too: producer programs of the same launch compute s·t on SMs of their own (the
  forward's arithmetic in one kernel, after its flags are zeroed; the dX GEMM's make s·u, dB at r ≤ 16).
  **The default**, except at the smallest M:

Beside the ladder, ``version="small"`` (:mod:`kernels.lora.small_m`, M ≤ 64 rows): the whole layer, base
included, in one kernel each way; the default on a GPU at M ≤ 16, r ≤ 16, 16-bit (where it was measured:
16×4096×4096 r16 on the H200, 2026-11-29, ``small`` +2.1% / +33% against v3's +94% / +120%).

Measured (``benchmarks/bench_lora.py``, H100, bf16, torch 2.11, triton 3.6, the committed CSV of 2026-11-28
(device date); overhead over the frozen base linear, fwd / fwd+bwd): 8192×4096×4096 r16: v3 +5.8% / +11.3%,
v2 +14% / +23%, unsloth-style +27% / +39%, eager +51% / +59%; r64: v3 +9.7% / +20.0%; 16384×4096×14336 r16:
v2 +0.2% / +2.5%, v3 +3.1% / +0.6%; 512×4096×4096 r16: v3 +34% / +75%. (The run of 2026-11-24 gave 8192 r16
fwd+bwd +10.8%, r64 +18.7%, 16384 −0.4%: about a point of run-to-run spread.) The same CSV's ``wall us``: at
8192×4096×4096 r16 fwd+bwd v3's host issues a call in 963 µs against 770 µs on the device, so its wall time
per call (994 µs) is the host's; captured in a CUDA graph (512 rows) it replays in 2–5 µs of host time.
Where the rest goes: ``benchmarks/probe_lora_kernels.py`` times each launch alone (device µs, median, L2
flushed; its CSV under ``benchmarks/results/lora_kernels/``: H200, 2026-11-29, bf16, 8192×4096×4096):

- the GEMM itself: with s·t given (v2's forward launch) 360 µs against cuBLAS's x Wᵀ 344 (+4.6%); the dX GEMM
  with s·u given 359 against dY W 342 (+4.8%). That is most of the forward's overhead, and the expand's dot
  is not it: an H100 probe of 2026-11-24 (not kept) timed the launch 357 µs without the dot, 361 with.
  Swept that day (H100), none faster than :func:`kernels.lora.gemm.gemm_rule`: grouped order, warp
  specialization, GROUP_M 4 or 16, BLOCK_K 32, 256 × 128 tiles; clusters (``num_ctas=2``) do not compile
  with these descriptors in triton 3.6, BLOCK_K 128 at 2 stages needs 236 KB of shared memory.
- the producers (v3): s·t computed in the forward launch 366 µs (+6.4%, 1.8 points over v2's launch, whose
  shrink is a 27.5 µs cuBLAS pass of its own); s·u and dB in the dX launch 369 (+7.8%). At r = 64 their dots
  weigh more: 380 forward (+10.3%), 380 dX (+10.8%, dB then a cuBLAS pass, 29 µs).
- the passes no fusion of the base GEMMs removes: dA = (s·u)ᵀ x, 30.0 µs by cuBLAS (a column-strip Triton
  pass ran no faster on the H100), and dB where the producers do not take it, 30.0.
- host time: ``kernel[grid](...)`` costs ≈ 45–65 µs of Python per launch of the persistent GEMM (Triton 3.6's
  binder and cache key) against F.linear's ≈ 15–20, so every Triton kernel here launches through
  :class:`kernels.fast_launch.CachedLauncher` (the compiled kernel's own launcher, kept per exact argument
  key: ≈ 28 µs), with grid and constexprs computed once per shape. The CSV's host µs column (2026-11-28):
  v3 forward 294 µs per call at 8192×4096×4096 r16 (F.linear 15), v3 fwd+bwd 963 against 770 µs of device
  time (base fwd+bwd 140), so that call is host-bound. The CSV of 2026-11-24 had 104 and 666 µs for the same
  two rows: the host's cost per call has risen since, and what raised it is not yet measured apart. At M = 512
  the device needs 0.04–0.1 ms, so fwd+bwd is host-bound (v3 host 1,093 µs against 99 µs of device time). CUDA
  graphs (``torch.cuda.graphs``) remove it for a fixed shape. Eager calls where nothing intercepts torch
  (:func:`kernels.internals.plain_eager`) run the two ops' bodies through :class:`LoraLinearFunction`, the
  version chosen once, without the dispatcher's cost per op call; under torch.compile, a dispatch or function
  mode, a functorch transform, the profiler or a tensor subclass, the call goes through the op.
  ``benchmarks/probe_lora_host.py`` measures the Python path with the launches stubbed, on a CPU (what it
  measured on the CPU of 2026-11-29 is in :class:`LoraLinearFunction`'s docstring).

**General path.** v2/v3 need tensor descriptors: x and W with unit last stride and 16-byte aligned rows
(K·e and N·e multiples of 16 bytes: K, N multiples of 8 in bf16/fp16, of 4 in fp32) and r ≤ 128.
Anything else (odd K or N, transposed or sliced x, r up to 128) runs v1, which takes any strides; r > 128
runs v0. ``version=None`` chooses, and warns once per reason when it falls back; an explicit version that
cannot run raises. fp32 on a GPU at torch's default ``"highest"`` matmul precision runs v0 (cuBLAS SGEMM
beats a Triton FMA GEMM: see :mod:`kernels.mlp.fused_mlp`); allow TF32 to use v3.

**Which GPU** (:mod:`kernels.gpu_features` has the table): v2 and v3 need tensor descriptors (sm_90) and the
H100's shared memory (``FAST_PATH_NEEDS``, ``FUSED_NEEDS`` in :mod:`kernels.lora.gemm`); v3's tiles spin-wait
on its producers, so its grid must be resident at once (one program per SM, checked before each launch). On
an A100, L4 or RTX 4090 (sm_80/86/89), or an sm_120 card with 99 KB of shared memory, ``version=None`` runs
v1; below sm_80, v0. Asking for a version the device cannot run raises, naming what it lacks.

**Frozen base**: if ``weight`` or ``bias`` requires grad (with grad mode on), :func:`lora_linear` raises:
their gradients are not computed here (dW would be a second full GEMM, a different kernel).
"""

from __future__ import annotations

import functools
import numbers
import warnings

import torch
import torch.nn.functional as F

from kernels.configs import BranchConfig, GemmConfig, resolve, tuning_key
from kernels.gpu_features import unmet
from kernels.internals import plain_eager
from kernels.launch import as_rows, cdiv, check_device, check_dtype, int32_offsets, sm_count
from kernels.library import custom_op, decode_config, encode_config
from kernels.lora.branch import BRANCH_NEEDS, branch_rule, lora_branch_
from kernels.lora.gemm import (
    FAST_PATH_NEEDS,
    FUSED_NEEDS,
    MAX_RANK,
    gemm_rule,
    lowrank_gemm,
    producers_take_d,
    tma_compatible,
)
from kernels.lora.skinny import skinny_pays, skinny_products
from kernels.lora.small_m import MAX_M, SMALL_M_NEEDS, small_m_backward, small_m_forward

__all__ = ["SMALL", "VERSIONS", "choose_version", "lora_linear"]

VERSIONS = ("v0", "v1", "v2", "v3")
SMALL = "small"  # kernels.lora.small_m: the default where benchmarks/results/lora/ measured it faster
SMALL_DEFAULT_UP_TO = 16  # rows and rank (bf16 H200 CSV of 2026-11-29 at 16×4096×4096 r16: 41 µs vs v3's 68)
_EPILOGUE_BACKWARD = {"v2": "epilogue", "v3": "fused"}  # the others: "torch"
_warned: set[str] = set()


def forward_key(version: str, x2, lora_b, has_bias: bool) -> tuple:
    """The autotuning key of the forward kernel of ``version`` (v1: the branch kernel; v2, v3: the GEMM)."""
    kernel = "lora_branch" if version == "v1" else f"lora_fwd_{version}"
    return tuning_key(kernel, x2.shape[0], (x2.shape[1], *lora_b.shape, has_bias), x2.dtype, x2.device)


def backward_key(dy2, weight, lora_b, mode: str = "epilogue") -> tuple:
    """The autotuning key of the dX kernel (dY [M, N] · W [N, K] + rank-r epilogue; ``mode``: _backward's)."""
    kernel = f"lora_bwd_dx_{mode}"
    return tuning_key(kernel, dy2.shape[0], (*weight.shape, lora_b.shape[1]), dy2.dtype, dy2.device)


def forward_config(version: str, x2, weight, lora_b, has_bias: bool, override=None):
    """The forward's launch config: ``override``'s fields where set, the tuned or rule config for the rest."""
    M, K = x2.shape
    N, R = lora_b.shape
    key = forward_key(version, x2, lora_b, has_bias)
    if version == "v1":
        base = resolve(key, lambda: branch_rule(M, K, N, R, x2.dtype, sm_count(x2.device)))
    else:
        base = resolve(key, lambda: gemm_rule(M, N, K, R, x2.dtype, sm_count(x2.device)))
    return base if override is None else override.filled(base)


def backward_config(dy2, weight, lora_b, override=None, mode: str = "epilogue") -> GemmConfig:
    """The dX kernel's config: tuned or rule, ``override``'s set fields on top."""
    M, N = dy2.shape
    K, R = weight.shape[1], lora_b.shape[1]
    key = backward_key(dy2, weight, lora_b, mode)
    base = resolve(key, lambda: gemm_rule(M, K, N, R, dy2.dtype, sm_count(dy2.device)))
    return base if override is None else override.filled(base)


def _forward(version, x2, weight, lora_a, lora_b, scale, bias, config):
    """``(y [M, N], s·t [M, r])`` by one version of the ladder (or :data:`SMALL`)."""
    if version == SMALL:
        return small_m_forward(x2, weight, lora_a, lora_b, scale, bias, config)
    if version == "v0":
        y = F.linear(x2, weight, bias)
        ts = (x2 @ lora_a.t()) * scale
        return y + ts @ lora_b.t(), ts
    if version == "v1":
        y = F.linear(x2, weight, bias)
        return y, lora_branch_(y, x2, lora_a, lora_b, scale, config)
    if version == "v2":
        if skinny_pays(*x2.shape):
            ts, _ = skinny_products(x2, lora_a.t(), None, scale)
        else:
            # as (x2 @ Aᵀ) * s: rounded, then scaled; in place, one allocation less
            ts = torch.mm(x2, lora_a.t()).mul_(scale)
        return lowrank_gemm(x2, weight, True, lora_a.t(), lora_b.t(), scale, config, t=ts, bias=bias)
    return lowrank_gemm(x2, weight, True, lora_a.t(), lora_b.t(), scale, config, bias=bias)


def fused_dx_pays(M: int, K: int, device: torch.device) -> bool:
    """Whether the fused dX GEMM is used: only when its 128 × 256 output tiles fill the GPU. Below that,
    cuBLAS wins (H100, M = 512, K = N = 4096: fused dX 58 µs, cuBLAS's dY W alone 32 µs)."""
    return cdiv(M, 128) * cdiv(K, 256) >= sm_count(device)


def _backward(mode, dy2, x2, weight, lora_a, lora_b, ts, scale, need_dx, config_override):
    """``(dX, dA, dB)``, dX None unless ``need_dx``. ``mode``: ``"torch"`` (cuBLAS, then ``addmm_``),
    ``"epilogue"`` (s·u by cuBLAS, the dX GEMM adds s·u A in its epilogue) or ``"fused"`` (the dX GEMM also
    computes s·u = s·dY B, and for r ≤ 16 dB, in producer programs of its launch)."""
    dx = None
    if need_dx and mode != "torch" and fused_dx_pays(x2.shape[0], x2.shape[1], x2.device):
        if not tma_compatible(dy2):
            dy2 = dy2.contiguous()  # e.g. the expanded gradient of a .sum(): one copy, then the fast kernel
        config = backward_config(dy2, weight, lora_b, config_override, mode)
        if mode == "fused" and producers_take_d(lora_b.shape[1]):  # dB by the same launch's producers
            dx, us, db = lowrank_gemm(dy2, weight, False, lora_b, lora_a, scale, config, g=ts)
        elif mode == "fused":
            dx, us = lowrank_gemm(dy2, weight, False, lora_b, lora_a, scale, config)
            db = dy2.t() @ ts
        elif skinny_pays(*dy2.shape):  # s·u and dB from one pass over dY (kernels.lora.skinny)
            us, db = skinny_products(dy2, lora_b, ts, scale)
            dx, _ = lowrank_gemm(dy2, weight, False, lora_b, lora_a, scale, config, t=us)
        else:
            us, db = torch.mm(dy2, lora_b).mul_(scale), dy2.t() @ ts
            dx, _ = lowrank_gemm(dy2, weight, False, lora_b, lora_a, scale, config, t=us)
        return dx, us.t() @ x2, db
    else:
        us = torch.mm(dy2, lora_b).mul_(scale)  # as (dY B) * s: rounded, then scaled; one allocation less
        if need_dx:
            dx = (dy2 @ weight).addmm_(us, lora_a)
    return dx, us.t() @ x2, dy2.t() @ ts


def _fast_path_problem(x2, weight, lora_b) -> str | None:
    """Why v2/v3 cannot run on these tensors, or None if they can."""
    e = x2.element_size()
    N, R = lora_b.shape
    K = x2.shape[1]
    if R <= MAX_RANK and not (K * e) % 16 and not (N * e) % 16 and tma_compatible(x2, weight):
        return None  # the common case, without building the messages below
    if R > MAX_RANK:
        return f"r = {R} > {MAX_RANK} (the fused kernels keep an [rows, r] fp32 tile in registers)"
    unaligned = [f"{name} = {size}" for name, size in (("K", K), ("N", N)) if (size * e) % 16]
    if unaligned:
        verb = "is" if len(unaligned) == 1 else "are"
        return (
            f"{' and '.join(unaligned)} {verb} not a multiple of {16 // e} "
            "(tensor descriptors need 16-byte rows)"
        )
    if not tma_compatible(x2):
        return f"x (as [M, K] with strides {x2.stride()}) is not row-contiguous with 16-byte aligned rows"
    if not tma_compatible(weight):
        return f"weight (strides {weight.stride()}) is not row-contiguous with 16-byte aligned rows"
    return None


NEEDS = {"v1": BRANCH_NEEDS, "v2": FAST_PATH_NEEDS, "v3": FUSED_NEEDS, SMALL: SMALL_M_NEEDS}  # v0: anywhere


@functools.lru_cache(maxsize=16)
def device_problems(device: torch.device) -> dict[str, str | None]:
    """Per Triton version, why ``device`` cannot run it (:mod:`kernels.gpu_features`: compute capability,
    shared memory, resident programs) or None; read once per device. Never a problem under the interpreter."""
    return {v: unmet(needs, device) for v, needs in NEEDS.items()}


def choose_version(x2, weight, lora_b, version: str | None = None) -> tuple[str, str | None]:
    """``(version to run, why it is not the requested/default one or None)`` for 2-D ``x2``.

    On a GPU, 16-bit, M and r ≤ ``SMALL_DEFAULT_UP_TO``, aligned: ``small``. Else the device decides first
    (:func:`device_problems`): v3 on sm_90+ with the H100's shared memory (v2 where
    v3's grid cannot be resident at once), v1 on sm_80/86/89 and on sm_90+ with less shared memory, v0 below
    sm_80. These are documented choices, not fallbacks, and warn nothing. Then the tensors: a layout or rank
    v2/v3 cannot take runs v1 (r > 128: v0), with the reason.
    """
    if version is not None and version not in (*VERSIONS, SMALL):
        raise ValueError(f"lora_linear: version={version!r} is not one of {(*VERSIONS, SMALL)} (or None)")
    if version == "v0":
        return "v0", None
    if version == SMALL:
        return _small_m_check(x2, lora_b), None
    problem = _fast_path_problem(x2, weight, lora_b)
    device = device_problems(x2.device)
    if version is None:
        if x2.is_cuda and x2.dtype == torch.float32 and torch.get_float32_matmul_precision() == "highest":
            return "v0", None  # documented choice, not a fallback: cuBLAS SGEMM is faster than FMA dots
        small = max(x2.shape[0], lora_b.shape[1]) <= SMALL_DEFAULT_UP_TO and x2.element_size() == 2
        if small and x2.is_cuda and problem is None and device[SMALL] is None:
            return SMALL, None
        if problem is None:
            for fast in ("v3", "v2"):
                if device[fast] is None:
                    return fast, None
        if lora_b.shape[1] > MAX_RANK:
            return "v0", problem
        return ("v1", problem) if device["v1"] is None else ("v0", None)
    if device[version] is not None:
        raise ValueError(f"lora_linear: version={version!r} cannot run on this GPU: {device[version]}")
    if version == "v1" and lora_b.shape[1] > MAX_RANK:
        raise ValueError(f"lora_linear: version='v1' cannot run: r = {lora_b.shape[1]} > {MAX_RANK}")
    if version in ("v2", "v3") and problem is not None:
        raise ValueError(f"lora_linear: version={version!r} cannot run: {problem}")
    return version, None


def _small_m_check(x2, lora_b) -> str:
    """``version="small"``'s conditions (:mod:`kernels.lora.small_m`), else a clear error."""
    problem = device_problems(x2.device)[SMALL]
    if problem is None and x2.shape[0] > MAX_M:
        problem = f"M = {x2.shape[0]} rows > {MAX_M} (all rows are one block)"
    if problem is None and lora_b.shape[1] > MAX_RANK:
        problem = f"r = {lora_b.shape[1]} > {MAX_RANK}"
    if problem is not None:
        raise ValueError(f"lora_linear: version='small' cannot run: {problem}")
    return SMALL


def _small_config(override) -> BranchConfig | None:
    """``version="small"`` takes a ``BranchConfig`` (or None: its rule), forward and backward alike."""
    if override is not None and not isinstance(override, BranchConfig):
        raise TypeError(f"lora_linear: version='small' takes a BranchConfig, got {type(override).__name__}")
    return override


def _check(x, weight, lora_a, lora_b, scale, bias) -> None:
    fn = "lora_linear"
    device = None
    for name, t in (("x", x), ("weight", weight), ("lora_a", lora_a), ("lora_b", lora_b), ("bias", bias)):
        if t is None and name == "bias":
            continue
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{fn}: {name} must be a torch.Tensor, got {type(t).__name__}")
        check_dtype(fn, name, t, x)
        if device is None:  # x: whether Triton can use its device, once; the others must be on it
            check_device(fn, name, t, x)
            device = x.device
        elif t.device != device:
            check_device(fn, name, t, x)  # raises, naming both devices
    if x.dim() < 1 or x.shape[-1] == 0:
        raise ValueError(f"{fn}: x must be [..., K] with K ≥ 1, got shape {tuple(x.shape)}")
    K = x.shape[-1]
    if weight.dim() != 2 or weight.shape[1] != K or weight.shape[0] == 0:
        raise ValueError(f"{fn}: weight must be [N, K] with K = x.shape[-1] = {K}, got {tuple(weight.shape)}")
    N = weight.shape[0]
    if lora_a.dim() != 2 or lora_a.shape[1] != K or lora_a.shape[0] == 0:
        raise ValueError(f"{fn}: lora_a must be [r, K] with r ≥ 1 and K = {K}, got {tuple(lora_a.shape)}")
    if lora_b.dim() != 2 or lora_b.shape[0] != N:
        raise ValueError(
            f"{fn}: lora_b must be [N, r] with N = weight.shape[0] = {N}, got {tuple(lora_b.shape)}"
        )
    if lora_b.shape[1] != lora_a.shape[0]:
        raise ValueError(
            f"{fn}: rank mismatch: lora_a is [r, K] with r = {lora_a.shape[0]} but lora_b is [N, r] with "
            f"r = {lora_b.shape[1]}"
        )
    if bias is not None and bias.shape != (N,):
        raise ValueError(f"{fn}: bias must have shape ({N},) to match weight, got {tuple(bias.shape)}")
    if isinstance(scale, torch.Tensor) or not isinstance(scale, numbers.Real):
        raise TypeError(f"{fn}: scale must be a Python number (alpha / r), got {type(scale).__name__}")
    if torch.is_grad_enabled():
        for name, t in (("weight", weight), ("bias", bias)):
            if t is not None and t.requires_grad:
                raise RuntimeError(
                    f"{fn}: {name} requires grad, but the base layer is frozen here (its gradient is not "
                    f"computed). Call {name}.requires_grad_(False), or use the eager reference "
                    "(kernels.reference.lora_linear) to train the base too."
                )


def _chosen(x2, weight, lora_b, version: str | None, stacklevel: int) -> str:
    """:func:`choose_version`, warning once per reason when it falls back to the general path."""
    chosen, why = choose_version(x2, weight, lora_b, version)
    if why is not None and why not in _warned:
        _warned.add(why)
        warnings.warn(
            f"lora_linear: general path ({chosen}) because {why}", RuntimeWarning, stacklevel=stacklevel
        )
    return chosen


# ---- the ops (kernels.library): fused_kernels::lora_linear and its backward ------------------------------
# ``version``: the version to run, or "" to choose inside the op (under torch.compile, where the tensors'
# addresses, which decide whether tensor descriptors can take them, exist only at run time). Configs as
# strings (kernels.library.encode_config). The forward returns s·t [M, r] too: the backward's saved tensor.
def _fake_forward(x2, weight, lora_a, lora_b, bias, scale, version, fwd_config, bwd_config):
    return x2.new_empty((x2.shape[0], weight.shape[0])), x2.new_empty((x2.shape[0], lora_a.shape[0]))


@custom_op(
    "lora_linear",
    "(Tensor x, Tensor weight, Tensor lora_a, Tensor lora_b, Tensor? bias, float scale, str version, "
    "str fwd_config, str bwd_config) -> (Tensor, Tensor)",
    fake=_fake_forward,
)
def _forward_op(x2, weight, lora_a, lora_b, bias, scale, version, fwd_config, bwd_config):
    """``(y [M, N], s·t [M, r])`` for 2-D x."""
    chosen = _chosen(x2, weight, lora_b, version or None, stacklevel=2)  # given: a check of the same choice
    return _forward_body(chosen, x2, weight, lora_a, lora_b, bias, scale, decode_config(fwd_config))


def _forward_body(chosen, x2, weight, lora_a, lora_b, bias, scale, override):
    """The op's work once the version is chosen and the config decoded (``override``: a carrier or None)."""
    M, N = x2.shape[0], weight.shape[0]
    if M == 0:
        return x2.new_empty((0, N)), x2.new_empty((0, lora_a.shape[0]))
    config = None
    if chosen == SMALL:  # its rule, or the override's set fields on it (kernels.lora.small_m)
        config = _small_config(override)
    elif chosen != "v0":
        config = forward_config(chosen, x2, weight, lora_b, bias is not None, override)
    return _forward(chosen, x2, weight, lora_a, lora_b, scale, bias, config)


def _fake_backward(dy2, x2, weight, lora_a, lora_b, ts, scale, version, bwd_config, need_dx):
    dx = x2.new_empty(x2.shape if need_dx else (0,))
    return dx, lora_a.new_empty(lora_a.shape), lora_b.new_empty(lora_b.shape)


@custom_op(
    "lora_linear_backward",
    "(Tensor dy, Tensor x, Tensor weight, Tensor lora_a, Tensor lora_b, Tensor ts, float scale, str version, "
    "str bwd_config, bool need_dx) -> (Tensor, Tensor, Tensor)",
    fake=_fake_backward,
)
def _backward_op(dy2, x2, weight, lora_a, lora_b, ts, scale, version, bwd_config, need_dx):
    """``(dX or an empty [0] tensor when not need_dx, dA, dB)``. The version is chosen again from the same
    tensors as the forward's choice (so the same one): the backward mode follows it."""
    chosen, _ = choose_version(x2, weight, lora_b, version or None)
    dx, da, db = _backward_body(
        chosen, dy2, x2, weight, lora_a, lora_b, ts, scale, need_dx, decode_config(bwd_config)
    )
    return (dx if need_dx else x2.new_empty(0)), da, db


def _backward_body(chosen, dy2, x2, weight, lora_a, lora_b, ts, scale, need_dx, override):
    """``(dX or None, dA, dB)`` once the version is chosen and the config decoded."""
    if x2.shape[0] == 0:
        dx = x2.new_zeros(x2.shape) if need_dx else None
        return dx, lora_a.new_zeros(lora_a.shape), lora_b.new_zeros(lora_b.shape)
    if chosen == SMALL:  # one kernel for dX, dA and dB: its rule's tiles, or the override's on them
        return small_m_backward(dy2, x2, weight, lora_a, lora_b, ts, scale, need_dx, _small_config(override))
    if override is not None and not isinstance(override, GemmConfig):
        raise TypeError(
            f"lora_linear: bwd_config of {chosen} must be a GemmConfig, got {type(override).__name__}"
        )
    mode = _EPILOGUE_BACKWARD.get(chosen, "torch")
    return _backward(mode, dy2, x2, weight, lora_a, lora_b, ts, scale, need_dx, override)


def _setup_context(ctx, inputs, output):
    x2, weight, lora_a, lora_b, bias, scale, version, fwd_config, bwd_config = inputs
    ctx.save_for_backward(x2, weight, lora_a, lora_b, output[1])
    ctx.scale, ctx.version, ctx.bwd_config = scale, version, bwd_config


def _autograd_backward(ctx, dy2, _dts):
    x2, weight, lora_a, lora_b, ts = ctx.saved_tensors
    need_dx = ctx.needs_input_grad[0]
    dx, da, db = _backward_op(
        dy2, x2, weight, lora_a, lora_b, ts, ctx.scale, ctx.version, ctx.bwd_config, need_dx
    )
    return (dx if need_dx else None), None, da, db, None, None, None, None, None


_forward_op.register_autograd(_autograd_backward, setup_context=_setup_context)


class LoraLinearFunction(torch.autograd.Function):
    """Eager calls where nothing intercepts torch (:func:`kernels.internals.plain_eager`): the two ops' bodies
    called directly, the version chosen once; the same formulas, without the dispatcher's cost per op call.
    Beyond :mod:`kernels.library`'s direct call of any op (whose bodies re-check the version, for callers of
    the op itself): that checks three times per fwd+bwd, 162 µs against 137 here in
    ``benchmarks/probe_lora_host.py`` on the CPU of 2026-11-29 (the unsloth order 105)."""

    @staticmethod
    def forward(ctx, x2, weight, lora_a, lora_b, bias, scale, chosen, fwd_override, bwd_override):
        y2, ts = _forward_body(chosen, x2, weight, lora_a, lora_b, bias, scale, fwd_override)
        ctx.save_for_backward(x2, weight, lora_a, lora_b, ts)
        ctx.scale, ctx.chosen, ctx.bwd_override = scale, chosen, bwd_override
        return y2

    @staticmethod
    def backward(ctx, dy2):
        x2, weight, lora_a, lora_b, ts = ctx.saved_tensors
        need_dx = ctx.needs_input_grad[0]
        dx, da, db = _backward_body(
            ctx.chosen, dy2, x2, weight, lora_a, lora_b, ts, ctx.scale, need_dx, ctx.bwd_override
        )
        return dx, None, da, db, None, None, None, None, None


def lora_linear(
    x: torch.Tensor,
    weight: torch.Tensor,
    lora_a: torch.Tensor,
    lora_b: torch.Tensor,
    scale: float,
    bias: torch.Tensor | None = None,
    *,
    version: str | None = None,
    fwd_config: GemmConfig | BranchConfig | None = None,
    bwd_config: GemmConfig | BranchConfig | None = None,
) -> torch.Tensor:
    """``x Wᵀ + b + s·(x Aᵀ) Bᵀ``: x ``[..., K]`` → ``[..., N]``, differentiable in x, lora_a and lora_b.

    ``weight`` [N, K] and ``bias`` [N] are frozen: passing them with ``requires_grad`` raises. ``version``:
    one of :data:`VERSIONS`, :data:`SMALL` (M ≤ 64; its configs are ``BranchConfig`` s), or None for the
    fastest that can run (see the module docstring for the general path and its warning).
    ``fwd_config``/``bwd_config``: :mod:`kernels.configs` carriers whose set fields override the tuned or
    rule config (``None`` fields are filled automatically).
    """
    _check(x, weight, lora_a, lora_b, scale, bias)
    fwd_types, bwd_types = (
        ((BranchConfig,),) * 2 if version == SMALL else ((GemmConfig, BranchConfig), (GemmConfig,))
    )
    for name, config, types in (("fwd_config", fwd_config, fwd_types), ("bwd_config", bwd_config, bwd_types)):
        if config is not None and not isinstance(config, types):
            expected = " or ".join(t.__name__ for t in types)
            raise TypeError(
                f"lora_linear: {name} must be a {expected} (or None), got {type(config).__name__}"
            )
    # v1's kernel indexes columns, r and K in int32 (rows in int64): an operand too large for that is copied.
    x2 = int32_offsets(as_rows(x, "x"))
    lora_a, lora_b = int32_offsets(lora_a, (0, 1)), int32_offsets(lora_b, (0, 1))
    if torch.compiler.is_compiling():  # addresses do not exist while tracing: the op chooses at run time
        if version is not None and version not in (*VERSIONS, SMALL):
            raise ValueError(f"lora_linear: version={version!r} is not one of {(*VERSIONS, SMALL)} (or None)")
        chosen = version or ""
    else:
        chosen = _chosen(x2, weight, lora_b, version, stacklevel=3)
    if plain_eager(x2, weight, lora_a, lora_b, bias):  # never while compiling
        y2 = LoraLinearFunction.apply(
            x2, weight, lora_a, lora_b, bias, float(scale), chosen, fwd_config, bwd_config
        )
    else:
        fwd, bwd = encode_config(fwd_config), encode_config(bwd_config)
        y2, _ = _forward_op(x2, weight, lora_a, lora_b, bias, float(scale), chosen, fwd, bwd)
    return y2 if x.dim() == 2 else y2.view(*x.shape[:-1], weight.shape[0])
