"""Pre-tuning of the LoRA kernels for given shapes: ``python -m kernels.lora.tune tune --shape M,K,N,r``.

For each shape it times the candidates of :data:`kernels.configs.CANDIDATES` (plus the rule's own config)
for the three kernels the default path runs or falls back to — the v3 forward GEMM (shrink fused), the dX
GEMM of its backward (``"fused"`` mode) and the v1 branch kernel — under the same keys
:mod:`kernels.lora.linear` looks up on every call, and stores the fastest in the persistent cache. A later
process finds them and times nothing.

On a GPU the timer is ``triton.testing.do_bench`` (median). Under the interpreter (CPU) the timer is
``time.perf_counter`` and only the rule's config and the first candidate are timed (the interpreter runs
programs one after another, so its timings say nothing about a GPU; this only shows the mechanism).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Sequence

import torch

from kernels.configs import CANDIDATES, TRITON_VERSION, default_cache, tune
from kernels.launch import sm_count
from kernels.lora.branch import branch_rule, lora_branch_
from kernels.lora.gemm import gemm_rule, lowrank_gemm, producers_take_d
from kernels.lora.linear import backward_key, forward_key
from kernels.runtime import default_device, interpreting

__all__ = ["main", "pretune"]


def _candidates(rule, family: str) -> list:
    listed = CANDIDATES[family][:1] if interpreting() else CANDIDATES[family]
    out = [rule]
    for config in listed:
        config = config.filled(rule)
        # a fused shrink's tiles may wait for their producer: no warp-specialized loop there
        if config not in out and not (family == "gemm" and config.warp_specialize):
            out.append(config)
    return out


def _line(name: str, shape, best, timings) -> str:
    ms = min(t for _, t in timings)
    return f"{name:12s} M,K,N,r={shape}: best {best} at {ms * 1e3:.1f} µs ({len(timings)} timed)"


def _tune_shape(M: int, K: int, N: int, r: int, dtype: torch.dtype, bias: bool) -> list[str]:
    device = default_device()
    x = torch.randn(M, K, device=device).to(dtype)
    w = (torch.randn(N, K, device=device) / K**0.5).to(dtype)
    a = (torch.randn(r, K, device=device) / K**0.5).to(dtype)
    b = torch.randn(N, r, device=device).to(dtype)
    b0 = torch.randn(N, device=device).to(dtype) if bias else None
    dy = torch.randn(M, N, device=device).to(dtype)
    y = torch.empty(M, N, device=device, dtype=dtype)
    ts = torch.randn(M, r, device=device).to(dtype)  # the saved s·t: the dX launch makes dB from it
    sms, shape = sm_count(device), (M, K, N, r)
    runs = [
        (
            "forward v3",
            forward_key("v3", x, b, bias),
            _candidates(gemm_rule(M, N, K, r, dtype, sms), "gemm"),
            lambda c: lowrank_gemm(x, w, True, a.t(), b.t(), 0.5, c, bias=b0),
        ),
        (
            "backward dX",
            backward_key(dy, w, b, "fused"),
            _candidates(gemm_rule(M, K, N, r, dtype, sms), "gemm"),
            lambda c: lowrank_gemm(dy, w, False, b, a, 0.5, c, g=ts if producers_take_d(r) else None),
        ),
        (
            "branch v1",
            forward_key("v1", x, b, bias),
            _candidates(branch_rule(M, K, N, r, dtype, sms), "branch"),
            lambda c: lora_branch_(y, x, a, b, 0.5, c),
        ),
    ]
    lines = []
    for name, key, candidates, run in runs:
        best, timings = tune(key, candidates, run)
        lines.append(_line(name, shape, best, timings))
    return lines


def pretune(shapes: Iterable[tuple[int, int, int, int]], dtype: torch.dtype, bias: bool = False) -> list[str]:
    """Tune the v3 forward, the dX and the v1 branch kernel for every ``(M, K, N, r)``; report lines."""
    return [line for shape in shapes for line in _tune_shape(*shape, dtype, bias)]


def _parse_shape(text: str) -> tuple[int, int, int, int]:
    parts = text.replace("x", ",").split(",")
    if len(parts) != 4:
        raise argparse.ArgumentTypeError(f"shape {text!r} must be M,K,N,r")
    return tuple(int(p) for p in parts)  # type: ignore[return-value]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kernels.lora.tune", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_tune = sub.add_parser("tune", help="time the candidates for LoRA shapes and store the fastest")
    p_tune.add_argument("--shape", type=_parse_shape, action="append", required=True, help="M,K,N,r")
    p_tune.add_argument("--dtype", default="bfloat16", choices=["float32", "float16", "bfloat16"])
    p_tune.add_argument("--bias", action="store_true", help="tune the forward with a bias")
    sub.add_parser("show", help="print the cache file and its entries")
    args = parser.parse_args(argv)
    if args.command == "show":
        print(f"cache: {default_cache().path} (this installation: triton {TRITON_VERSION})")
        for key, entry in sorted(default_cache().entries().items()):
            other = "" if f'"triton {TRITON_VERSION}"' in key else "  [another Triton: not used here]"
            print(f"{key}  ->  {entry['config']['fields']}  ({entry['ms']} ms){other}")
        return 0
    for line in pretune(args.shape, getattr(torch, args.dtype), bias=args.bias):
        print(line)
    print(f"written to {default_cache().path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
