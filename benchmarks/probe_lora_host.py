"""Host (Python) time of one ``lora_linear`` forward+backward, with every Triton launch stubbed out (CPU).

What it measures: everything :func:`kernels.lora.linear.lora_linear` does on the host per call (checks, the
version choice, autograd, the op's dispatch where a call takes it, configs, plans, allocations, the cached
launcher's key) except the work of Triton's own launcher and the GPU. How, on a machine without a GPU:

- the kernels' launchers (``_launch`` of :mod:`kernels.lora.gemm`, :mod:`kernels.lora.branch`,
  :mod:`kernels.lora.skinny`) become :class:`kernels.fast_launch.CachedLauncher` s over a stand-in for the
  ``@triton.jit`` function whose "compiled kernel" runs nothing: each call pays the real launch key and
  lookup, then a no-op runner (on a GPU: Triton's launcher, ≈ 20–30 µs more per launch, not counted here);
- the device is made to look like a GPU (as ``tests/kernels/test_gpu_features.py`` does): every device
  reports an H200's (``--gpu h200``: v3 by default) or an A100's features (``--gpu a100``: v1), SM counts
  follow, and the modules' import-time interpreter flag is turned off, so the rules and the path
  decisions are a GPU's (small M: the backward takes the cuBLAS path, as on the H200 at M = 512);
- the tensors are small fp32 CPU tensors (CPU matmuls of about a µs; bf16 ones take ≈ 13 µs each on a CPU
  and hide the rest; the path is the same, as CPU tensors skip the fp32 → v0 rule of a GPU), so the time
  is the host's. The
  ``unsloth-style`` row (:func:`kernels.reference.lora_linear_unsloth_order`, plain torch) on the same
  tensors is the floor a Python-level LoRA pays for its torch ops.

    python -m benchmarks.probe_lora_host                 # both GPUs, µs per fwd+bwd (median of repeats)
    python -m benchmarks.probe_lora_host --gpu h200 --profile   # cProfile, top functions by own time

CPU only (it refuses to run with a GPU: it patches the device's features process-wide).
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import time

import torch

import kernels  # noqa: F401  (sets TRITON_INTERPRET=1 first on a CPU machine)
import kernels.gpu_features as gpu_features
import kernels.lora.branch as branch
import kernels.lora.gemm as gemm
import kernels.lora.linear as linear
import kernels.lora.skinny as skinny
import kernels.lora.small_m as small_m
from kernels import reference
from kernels.fast_launch import CachedLauncher
from kernels.gpu_features import GpuFeatures

KB = 1024
GPUS = {
    "h200": GpuFeatures("NVIDIA H200", (9, 0), 132, 227 * KB, 228 * KB),
    "a100": GpuFeatures("NVIDIA A100-SXM4-80GB", (8, 0), 108, 163 * KB, 164 * KB),
}
EXPECTED = {"h200": "v3", "a100": "v1"}
KERNEL_MODULES = (gemm, branch, skinny)


class _NoKernel:
    """A ``@triton.jit`` function's stand-in: ``fn[grid](...)`` returns a "compiled kernel" whose runner
    (``compiled[grid]``, what :class:`CachedLauncher` keeps) only counts its calls."""

    def __init__(self, fn):
        self.arg_names = list(fn.arg_names)
        self.launches = 0

    def __getitem__(self, grid):
        return lambda *args, **kwargs: _Compiled(self)

    def run(self, *args) -> None:
        self.launches += 1


class _Compiled:
    def __init__(self, stub: _NoKernel):
        self.stub = stub

    def __getitem__(self, grid):
        return self.stub.run


def _stub_launcher(module) -> CachedLauncher:
    """A cached launcher as on a GPU (the direct path, keyed on the real arguments) of a kernel that runs
    nothing."""
    launcher = CachedLauncher(_NoKernel(module._launch.fn))
    launcher.enabled = True
    return launcher


def pretend_gpu(name: str) -> None:
    """Every device reports ``GPUS[name]``'s features; launches stubbed; rules and paths as on that GPU."""
    f = GPUS[name]
    gpu_features.features = lambda device: f
    sms = lambda device: f.sm_count  # noqa: E731
    for module in (linear, gemm, skinny):
        if hasattr(module, "sm_count"):
            module.sm_count = sms
    import kernels.launch as launch

    launch.sm_count = sms
    for module in (gemm, skinny):
        module._INTERPRET = False  # the import-time interpreter flag: a GPU's rules and paths
    torch.cuda.current_device = lambda: 0  # the launch key names the device
    for module in KERNEL_MODULES:
        module._launch = _stub_launcher(module)
    small_m.interpreting = lambda: False  # the GPU's tiles (small_m_rule)
    for name in ("_launch_fwd", "_launch_bwd"):
        launcher = CachedLauncher(_NoKernel(getattr(small_m, name).fn))
        launcher.enabled = True
        setattr(small_m, name, launcher)
    linear.device_problems.cache_clear()
    gemm.check_co_resident.cache_clear()


def _inputs(M: int, K: int, N: int, r: int, dtype: torch.dtype):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(M, K, generator=g).to(dtype).requires_grad_()
    w = (torch.randn(N, K, generator=g) / K**0.5).to(dtype)
    a = (torch.randn(r, K, generator=g) / K**0.5).to(dtype).requires_grad_()
    b = (torch.randn(N, r, generator=g) * 0.1).to(dtype).requires_grad_()
    dy = torch.randn(M, N, generator=g).to(dtype)
    return x, w, a, b, dy


def _step(fn, x, w, a, b, dy, **kwargs):
    y = fn(x, w, a, b, 2.0, **kwargs)
    y.backward(dy)
    x.grad = a.grad = b.grad = None


def time_us(fn, args, iters: int, repeats: int, **kwargs) -> float:
    """Median over ``repeats`` of the mean µs per forward+backward over ``iters`` calls."""
    for _ in range(20):
        _step(fn, *args, **kwargs)
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(iters):
            _step(fn, *args, **kwargs)
        samples.append((time.perf_counter() - t0) / iters * 1e6)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gpu", choices=sorted(GPUS), action="append")
    parser.add_argument("--shape", default="16,64,64,16", help="M,K,N,r (small: CPU matmuls are real)")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--iters", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--profile", action="store_true", help="cProfile the loop, print the top functions")
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args()
    if torch.cuda.is_available():
        raise SystemExit("probe_lora_host: run it on a CPU machine (it patches the device's features)")
    torch.set_num_threads(1)
    M, K, N, r = (int(v) for v in args.shape.split(","))
    inputs = _inputs(M, K, N, r, getattr(torch, args.dtype))
    floor = time_us(reference.lora_linear_unsloth_order, inputs, args.iters, args.repeats)
    print(f"shape M,K,N,r = {M},{K},{N},{r} {args.dtype}; µs per forward+backward on this CPU")
    print(f"{'unsloth-style (plain torch)':32s} {floor:8.1f}")
    for name in args.gpu or ["h200", "a100"]:
        pretend_gpu(name)
        x, w, a, b = inputs[:4]
        chosen, _ = linear.choose_version(x.detach(), w, b.detach())
        assert chosen == EXPECTED[name], (name, chosen)
        us = time_us(linear.lora_linear, inputs, args.iters, args.repeats)
        launches = {m.__name__.rsplit(".", 1)[1]: m._launch.fn.launches for m in KERNEL_MODULES}
        print(f"{'lora_linear ' + chosen + ' (' + name + ')':32s} {us:8.1f}   stubbed launches {launches}")
        if M <= small_m.MAX_M:  # the whole layer in one kernel each way
            us = time_us(linear.lora_linear, inputs, args.iters, args.repeats, version=linear.SMALL)
            print(f"{'lora_linear small (' + name + ')':32s} {us:8.1f}")
        if args.profile:
            profiler = cProfile.Profile()
            profiler.enable()
            for _ in range(args.iters):
                _step(linear.lora_linear, *inputs)
            profiler.disable()
            stats = pstats.Stats(profiler)
            stats.sort_stats("tottime").print_stats(args.top)
            stats.sort_stats("cumulative").print_stats(args.top)


if __name__ == "__main__":
    main()
