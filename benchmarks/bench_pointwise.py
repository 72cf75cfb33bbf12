"""Benchmark the hand-fused pointwise kernels against eager PyTorch, torch.compile and the copy reference.

Kernels: bias+ReLU (``relu(x + bias)``) and add-mul-activation (``act(x + bias + alpha·y)``), forward, over
rows × 4096 columns. Metric: GB/s = bytes read + written / median *device* time; the reference is the measured
``y.copy_(x)`` bandwidth on the same device and size, timed the same way. A second column, ``host us``, is the
CPU time per call: where it exceeds the device time, a loop of such calls is launch-bound, whatever the
kernel (see lecture_code.bench). Goal (RESULTS.md): Triton v1 ≥ 95% of the copy reference at large sizes,
and no slower than torch.compile at small ones.

    python -m benchmarks.bench_pointwise            # GPU: full sweep, fp32 and bf16
    python -m benchmarks.bench_pointwise --quick    # tiny sizes (CPU: Triton runs in the interpreter)
    python -m benchmarks.bench_pointwise --results-dir benchmarks/results/tmp   # a trial run (git-ignored)

Prints a table; saves CSV + PNG under benchmarks/results/pointwise/, stamped with device, versions, date.
"""

from __future__ import annotations

import argparse
import functools
from pathlib import Path

import torch

import kernels  # noqa: F401  (decides the runtime mode first)
from kernels import reference, runtime
from kernels.pointwise.add_mul_act import add_mul_act
from kernels.pointwise.bias_relu import bias_relu
from lecture_code import bench as bu

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
ALPHA = 0.5


def cuda_providers() -> dict:
    """The CUDA C++ versions (kernels/cuda) where the extension builds and loads here; {} otherwise."""
    try:
        from kernels import cuda as kcuda

        kcuda.load()  # builds on first use (about a minute); raises a clear error on a CPU machine
    except Exception as e:
        print(f"[cuda] skipped: {type(e).__name__}: {e}")
        return {}
    return {
        "bias_relu": kcuda.bias_relu,
        "add_mul_relu": lambda x, bias, y, alpha, activation: kcuda.add_mul_relu(x, bias, y, alpha),
    }


def cases(kernel: str, activation: str, cuda: dict):
    """(provider, make_fn, call) for one kernel; torch.compile is made fresh per shape (see bu.compiled)."""
    if kernel == "bias_relu":
        out = [
            ("eager", lambda: reference.bias_relu),
            ("torch.compile", lambda: bu.compiled(reference.bias_relu)),
            ("triton v1", lambda: bias_relu),
        ]
        if "bias_relu" in cuda:
            out.append(("cuda", lambda: cuda["bias_relu"]))
        return [(name, make, lambda f, x, b, y: f(x, b)) for name, make in out]
    out = [
        ("eager", lambda: reference.add_mul_act),
        ("torch.compile", lambda: bu.compiled(reference.add_mul_act)),
        ("triton v1", lambda: add_mul_act),
    ]
    if "add_mul_relu" in cuda and activation == "relu":  # the CUDA version exists for relu only
        out.append(("cuda", lambda: cuda["add_mul_relu"]))
    return [(name, make, lambda f, x, b, y: f(x, b, y, ALPHA, activation)) for name, make in out]


def bytes_moved(kernel: str, M: int, N: int, s: int) -> int:
    """bias_relu: read x + bias, write out. add_mul_act: read x, y + bias, write out."""
    return (2 if kernel == "bias_relu" else 3) * M * N * s + N * s


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="tiny sizes (the default on a CPU)")
    p.add_argument("--rows", type=int, nargs="+", help="row counts to sweep")
    p.add_argument("--cols", type=int, help="columns (default 4096 on GPU)")
    p.add_argument("--dtypes", nargs="+", choices=list(DTYPES), help="default fp32 bf16 (fp32 on CPU)")
    p.add_argument(
        "--activations",
        nargs="+",
        default=["relu", "gelu_tanh"],
        choices=["relu", "sigmoid", "gelu_tanh", "silu"],
        help="add_mul_act activations to sweep (the CUDA version exists for relu only)",
    )
    p.add_argument("--no-compile", action="store_true", help="skip torch.compile (slow to compile on CPU)")
    p.add_argument("--results-dir", type=Path, help="where CSV + PNG go (default benchmarks/results)")
    args = p.parse_args(argv)

    device = runtime.default_device()
    bu.setup(device)
    quick = args.quick or not bu.on_gpu(device)
    rows = args.rows or ([16, 64] if quick else [1024, 2048, 4096, 8192, 16384, 32768, 65536])
    cols = args.cols or (256 if quick else 4096)
    dtypes = args.dtypes or (["fp32"] if quick else ["fp32", "bf16"])
    cuda = cuda_providers()
    meta = bu.stamp(device)
    print(f"# {meta['device']} · torch {meta['torch']} · triton {meta['triton']} · mode {runtime.mode()}")
    print("# ms: median device time (host overhead kept out); host us: CPU time per call")

    results = []
    variants = [("bias_relu", None)] + [("add_mul_act", act) for act in args.activations]
    for kernel, activation in variants:
        name = kernel if activation is None else f"add_mul_act[{activation}]"
        for dname in dtypes:
            dtype = DTYPES[dname]
            for M in rows:
                x = torch.randn(M, cols, device=device, dtype=dtype)
                y = torch.randn(M, cols, device=device, dtype=dtype)
                bias = torch.randn(cols, device=device, dtype=dtype)
                nbytes = bytes_moved(kernel, M, cols, x.element_size())
                copy_ref = bu.copy_gbps(M * cols, dtype, device)
                expected = (
                    reference.bias_relu(x, bias)
                    if kernel == "bias_relu"
                    else reference.add_mul_act(x, bias, y, ALPHA, activation)
                )
                for provider, make, call in cases(kernel, activation, cuda):
                    if provider == "torch.compile" and args.no_compile:
                        continue
                    fn = make()
                    with torch.no_grad():
                        got = call(fn, x, bias, y)  # validate before timing: a fast wrong kernel is no result
                        torch.testing.assert_close(got, expected, atol=2e-2, rtol=2e-2)
                        ms = bu.median_ms(functools.partial(call, fn, x, bias, y), device)
                        host = bu.host_us(functools.partial(call, fn, x, bias, y), device)
                    gbps = nbytes / (ms * 1e6)
                    results.append(
                        {
                            "kernel": name,
                            "dtype": dname,
                            "rows": M,
                            "cols": cols,
                            "provider": provider,
                            "ms": ms,
                            "host us": host,
                            "GB/s": gbps,
                            "copy GB/s": copy_ref,
                            "% of copy": 100 * gbps / copy_ref,
                        }
                    )
                    r = results[-1]
                    host_txt = "" if host is None else f"  host {host:6.1f} us"
                    print(f"{r['kernel']:>24} {dname} {M:>6}x{cols} {provider:>14}: {ms:9.4f} ms "
                          f"{gbps:8.1f} GB/s ({r['% of copy']:5.1f}% of copy){host_txt}")  # fmt: skip

    compile_ms = {
        (r["kernel"], r["dtype"], r["rows"]): r["ms"] for r in results if r["provider"] == "torch.compile"
    }
    for r in results:  # > 1: faster than torch.compile at this size
        r["x compile"] = compile_ms.get((r["kernel"], r["dtype"], r["rows"]), float("nan")) / r["ms"]
    print()
    columns = ["kernel", "dtype", "rows", "provider", "ms", "host us", "GB/s", "copy GB/s", "% of copy"]
    bu.print_table(results, [*columns, "x compile"])
    path = bu.save(results, "pointwise", "pointwise", meta, args.results_dir)
    panels = list(dict.fromkeys((r["kernel"], r["dtype"]) for r in results))
    bu.plot(
        results,
        panels,
        "rows",
        "GB/s",
        "copy GB/s",
        path.with_suffix(".png"),
        meta,
        f"rows (x {cols} columns)",
    )
    print(f"\nsaved {path} and {path.with_suffix('.png').name}")


if __name__ == "__main__":
    main()
