"""Benchmark the one-kernel MLP ``act(relu(x W1ᵀ + b1) W2ᵀ + b2)`` against eager PyTorch and torch.compile.

Two shapes of the kind the kernel is for (H small, see kernels/mlp/fused_mlp.py), swept over the row count M:

- ``dlrm-top-tail``: K=512 → H=256 → N=1, sigmoid (the last layers of DLRM's over-arch);
- ``lora-rank16``: K=4096 → H=16 → N=4096, no final activation (the shape of LoRA's rank-r path).

Metrics: GB/s (bytes of x, weights, biases and y over the median device time; the hidden activations are the
bytes fusion saves, so they are not counted) against the measured copy reference, TFLOP/s (2·M·H·(K + N)), and
``host us``, the CPU time per call (see lecture_code.bench: where it exceeds the device time, the call is
launch-bound).

Precisions, the same for every provider (eager, torch.compile, fused), named in each row:

- ``bf16``: bf16 tensors (tensor cores everywhere);
- ``fp32``: fp32 tensors, ``torch.set_float32_matmul_precision("highest")`` (PyTorch's default): no TF32,
  cuBLAS SGEMM on the CUDA cores, and the fused kernel's dots are fp32 FMA (``input_precision="ieee"``);
- ``tf32``: fp32 tensors with precision ``"high"``: cuBLAS and the fused kernel both use TF32 tensor cores.

    python -m benchmarks.bench_fused_mlp           # GPU: full sweep, bf16, tf32 and fp32
    python -m benchmarks.bench_fused_mlp --quick   # tiny sizes (CPU: Triton runs in the interpreter)
    python -m benchmarks.bench_fused_mlp --results-dir benchmarks/results/tmp   # a trial run (git-ignored)

Prints a table; saves CSV + PNG under benchmarks/results/fused_mlp/, stamped with device, versions, date.
"""

from __future__ import annotations

import argparse
import functools
from pathlib import Path

import torch

import kernels  # noqa: F401  (decides the runtime mode first)
from kernels import reference, runtime
from kernels.mlp.fused_mlp import fused_mlp
from lecture_code import bench as bu

# name: (tensor dtype, torch.set_float32_matmul_precision for every provider, what the matmuls run as)
DTYPES = {
    "bf16": (torch.bfloat16, "highest", "bf16 tensor cores"),
    "fp16": (torch.float16, "highest", "fp16 tensor cores"),
    "tf32": (torch.float32, "high", "fp32 tensors, TF32 tensor cores"),
    "fp32": (torch.float32, "highest", "fp32 tensors, no TF32 (CUDA-core FMA)"),
}
SHAPES = {  # name: (K, H, N, final activation)
    "dlrm-top-tail": (512, 256, 1, "sigmoid"),
    "lora-rank16": (4096, 16, 4096, "none"),
}
QUICK_SHAPES = {"tiny": (32, 16, 8, "sigmoid")}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="tiny sizes (the default on a CPU)")
    p.add_argument("--rows", type=int, nargs="+", help="row counts M to sweep")
    p.add_argument("--dtypes", nargs="+", choices=list(DTYPES), help="default bf16 tf32 fp32 (fp32 on CPU)")
    p.add_argument("--no-compile", action="store_true", help="skip torch.compile (slow to compile on CPU)")
    p.add_argument("--results-dir", type=Path, help="where CSV + PNG go (default benchmarks/results)")
    args = p.parse_args(argv)

    device = runtime.default_device()
    bu.setup(device)
    quick = args.quick or not bu.on_gpu(device)
    rows = args.rows or ([16, 64] if quick else [256, 1024, 4096, 16384, 65536])
    dtypes = args.dtypes or (["fp32"] if quick else ["bf16", "tf32", "fp32"])
    shapes = QUICK_SHAPES if quick else SHAPES
    meta = bu.stamp(device)
    print(f"# {meta['device']} · torch {meta['torch']} · triton {meta['triton']} · mode {runtime.mode()}")
    print("# ms: median device time (host overhead kept out); host us: CPU time per call")
    print("# each precision's matmul setting applies to eager, torch.compile and fused alike")
    precision_before = torch.get_float32_matmul_precision()

    results = []
    for shape_name, (K, H, N, final) in shapes.items():
        for dname in dtypes:
            dtype, precision, matmuls = DTYPES[dname]
            torch.set_float32_matmul_precision(precision)
            w1 = (torch.randn(H, K, device=device) / K**0.5).to(dtype)
            b1 = torch.randn(H, device=device, dtype=dtype)
            w2 = (torch.randn(N, H, device=device) / H**0.5).to(dtype)
            b2 = torch.randn(N, device=device, dtype=dtype)
            for M in rows:
                x = torch.randn(M, K, device=device, dtype=dtype)
                s = x.element_size()
                nbytes = (M * K + H * K + H + N * H + N + M * N) * s
                flops = 2 * M * H * (K + N)
                copy_ref = bu.copy_gbps(M * (K + N), dtype, device)
                providers = [("eager", lambda: reference.fused_mlp), ("triton fused", lambda: fused_mlp)]
                if not args.no_compile:
                    providers.insert(1, ("torch.compile", lambda: bu.compiled(reference.fused_mlp)))
                with torch.no_grad():
                    expected = reference.fused_mlp(x, w1, b1, w2, b2, final)
                    for provider, make in providers:
                        fn = make()
                        got = fn(x, w1, b1, w2, b2, final)  # validate before timing
                        torch.testing.assert_close(got, expected, atol=5e-2, rtol=5e-2)
                        ms = bu.median_ms(functools.partial(fn, x, w1, b1, w2, b2, final), device)
                        host = bu.host_us(functools.partial(fn, x, w1, b1, w2, b2, final), device)
                        results.append(
                            {
                                "kernel": f"{shape_name} (K={K}, H={H}, N={N})",
                                "dtype": dname,
                                "matmuls": matmuls,
                                "rows": M,
                                "provider": provider,
                                "ms": ms,
                                "host us": host,
                                "GB/s": nbytes / (ms * 1e6),
                                "TFLOP/s": flops / (ms * 1e9),
                                "copy GB/s": copy_ref,
                                "% of copy": 100 * nbytes / (ms * 1e6) / copy_ref,
                            }
                        )
                        r = results[-1]
                        host_txt = "" if host is None else f"  host {host:6.1f} us"
                        print(f"{shape_name:>14} {dname} M={M:>6} {provider:>14}: {ms:9.4f} ms "
                              f"{r['GB/s']:8.1f} GB/s {r['TFLOP/s']:7.2f} TFLOP/s{host_txt}")  # fmt: skip

    torch.set_float32_matmul_precision(precision_before)
    print()
    cols = ["kernel", "dtype", "rows", "provider", "ms", "host us", "GB/s", "TFLOP/s", "copy GB/s"]
    cols.append("% of copy")
    bu.print_table(results, cols)
    path = bu.save(results, "fused_mlp", "fused_mlp", meta, args.results_dir)
    panels = list(dict.fromkeys((r["kernel"], r["dtype"]) for r in results))
    bu.plot(results, panels, "rows", "GB/s", "copy GB/s", path.with_suffix(".png"), meta, "rows M")
    print(f"\nsaved {path} and {path.with_suffix('.png').name}")


if __name__ == "__main__":
    main()
