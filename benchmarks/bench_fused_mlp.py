"""Benchmark the one-kernel MLP ``act(relu(x W1ᵀ + b1) W2ᵀ + b2)`` against eager PyTorch and torch.compile.

Two shapes of the kind the kernel is for (H small, see kernels/fused_mlp.py), swept over the row count M:

- ``dlrm-top-tail``: K=512 → H=256 → N=1, sigmoid (the last layers of DLRM's over-arch);
- ``lora-rank16``: K=4096 → H=16 → N=4096, no final activation (the shape of LoRA's rank-r path).

Metrics: GB/s (bytes of x, weights, biases and y over the median time; the hidden activations are the bytes
fusion saves, so they are not counted) against the measured copy ceiling, and TFLOP/s (2·M·H·(K + N)).

    python benchmarks/bench_fused_mlp.py           # GPU: full sweep, bf16 and fp32
    python benchmarks/bench_fused_mlp.py --quick   # tiny sizes (CPU: Triton runs in the interpreter)

Prints a table; saves CSV + PNG under benchmarks/results/fused_mlp/, stamped with device, versions, date.
"""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import kernels  # noqa: E402,F401  (decides the runtime mode first)
from kernels import reference, runtime  # noqa: E402
from kernels.fused_mlp import fused_mlp  # noqa: E402

try:
    from benchmarks import _bench_utils as bu
except ImportError:  # run as a script from benchmarks/
    import _bench_utils as bu

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
SHAPES = {  # name: (K, H, N, final activation)
    "dlrm-top-tail": (512, 256, 1, "sigmoid"),
    "lora-rank16": (4096, 16, 4096, "none"),
}
QUICK_SHAPES = {"tiny": (32, 16, 8, "sigmoid")}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="tiny sizes (the default on a CPU)")
    p.add_argument("--rows", type=int, nargs="+", help="row counts M to sweep")
    p.add_argument("--dtypes", nargs="+", choices=list(DTYPES), help="default bf16 fp32 (fp32 on CPU)")
    p.add_argument("--no-compile", action="store_true", help="skip torch.compile (slow to compile on CPU)")
    args = p.parse_args(argv)

    device = runtime.default_device()
    bu.setup(device)
    quick = args.quick or not bu.on_gpu(device)
    rows = args.rows or ([16, 64] if quick else [256, 1024, 4096, 16384, 65536])
    dtypes = args.dtypes or (["fp32"] if quick else ["bf16", "fp32"])
    shapes = QUICK_SHAPES if quick else SHAPES
    meta = bu.stamp(device)
    print(f"# {meta['device']} · torch {meta['torch']} · triton {meta['triton']} · mode {runtime.mode()}")

    results = []
    for shape_name, (K, H, N, final) in shapes.items():
        for dname in dtypes:
            dtype = DTYPES[dname]
            w1 = (torch.randn(H, K, device=device) / K**0.5).to(dtype)
            b1 = torch.randn(H, device=device, dtype=dtype)
            w2 = (torch.randn(N, H, device=device) / H**0.5).to(dtype)
            b2 = torch.randn(N, device=device, dtype=dtype)
            for M in rows:
                x = torch.randn(M, K, device=device, dtype=dtype)
                s = x.element_size()
                nbytes = (M * K + H * K + H + N * H + N + M * N) * s
                flops = 2 * M * H * (K + N)
                ceiling = bu.copy_gbps(M * (K + N), dtype, device)
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
                        results.append(
                            {
                                "kernel": f"{shape_name} (K={K}, H={H}, N={N})",
                                "dtype": dname,
                                "rows": M,
                                "provider": provider,
                                "ms": ms,
                                "GB/s": nbytes / (ms * 1e6),
                                "TFLOP/s": flops / (ms * 1e9),
                                "copy GB/s": ceiling,
                                "% of copy": 100 * nbytes / (ms * 1e6) / ceiling,
                            }
                        )
                        r = results[-1]
                        print(f"{shape_name:>14} {dname} M={M:>6} {provider:>14}: {ms:9.4f} ms "
                              f"{r['GB/s']:8.1f} GB/s {r['TFLOP/s']:7.2f} TFLOP/s")  # fmt: skip

    print()
    cols = ["kernel", "dtype", "rows", "provider", "ms", "GB/s", "TFLOP/s", "copy GB/s", "% of copy"]
    bu.print_table(results, cols)
    path = bu.save(results, "fused_mlp", "fused_mlp", meta)
    panels = list(dict.fromkeys((r["kernel"], r["dtype"]) for r in results))
    bu.plot(results, panels, "rows", "GB/s", "copy GB/s", path.with_suffix(".png"), meta, "rows M")
    print(f"\nsaved {path} and {path.with_suffix('.png').name}")


if __name__ == "__main__":
    main()
