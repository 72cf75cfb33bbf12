"""Which configs of ``add_multi_lora``'s kernels are fastest at decode sizes (T ≤ 16 tokens), each call in a
CUDA graph: the measurements a new decode rule starts from (RESULTS.md's goal: ≤ 6 µs at T = 16). Also the
split path alone at the copy goals' sizes (T = 4096 and 16384, where the call is bound by bytes).

The rule (:func:`kernels.multi_lora.shrink_expand.multi_lora_rule`) came from a sweep at T = 16 … 4096 on
the H100; at decode sizes the call is bound by latency, not bytes (2 MB of weights at T = 16, 8 adapters,
r = 16, K = N = 4096: under 1 µs of reading), so what matters is how many dependent steps each program
runs: the fused kernel's shrink is a serial loop over K in ``block_k`` steps (32 of them at the rule's 128),
the split path pays a second launch. The sweep times, per shape, the fused kernel over ``block_k``,
``block_n``, ``split``, warps and stages, the split path over its shrink's ``block_k`` and split-K and
its expand's ``block_n`` and warps, and the one-launch path over its group width, K chunks, ``block_k``
and warps; every candidate checked against the float64 reference first (a wrong
or uncompilable one is a row with its reason, not a crash). Metadata built once, outside the graph.

    python -m benchmarks.sweep_multi_lora_decode            # GPU: T = 1, 16, 4096, 16384; CSV under results/
    python -m benchmarks.sweep_multi_lora_decode --quick    # CPU: tiny sizes, two candidates a path
"""

from __future__ import annotations

import itertools

import torch

from benchmarks import sweeps
from kernels import reference
from kernels.configs import BranchConfig
from kernels.multi_lora.metadata import build_meta
from kernels.multi_lora.shrink_expand import add_multi_lora, plan
from lecture_code import bench as bu

SHAPES = [(T, 8, 16, 4096, 4096) for T in (1, 16, 4096, 16384)]  # T, L, r, K, N
DECODE = 16  # up to this many tokens every path is swept; above, the split path (the default) alone
QUICK = [(5, 3, 8, 64, 64)]
SCALE = 2.0


def fused_candidates(rule: BranchConfig, N: int, quick: bool) -> list[BranchConfig]:
    """The rule's config first, then every block_k × block_n × split (one N-tile a program, or two) × warps
    × stages."""
    if quick:
        return [rule, BranchConfig(block_k=32)]
    grid = itertools.product((128, 256, 512), (128, 256), (1, 2), (4, 8), (2, 3))
    return [rule] + [
        BranchConfig(block_k=bk, block_n=bn, split=max(1, N // bn // f), num_warps=w, num_stages=s)
        for bk, bn, f, w, s in grid
    ]


def split_candidates(shrink: BranchConfig, quick: bool) -> list[dict]:
    """The rule's configs first ({}), then the shrink's block_k × split-K (half, the rule's, double) × the
    expand's block_n × warps."""
    if quick:
        return [{}, {"shrink": BranchConfig(split=2)}]
    grid = itertools.product((128, 256), (1, 2, 4), (128, 256), (4, 8))
    return [{}] + [
        {"shrink": BranchConfig(block_k=bk, split=max(1, shrink.split * f // 2)),
         "expand": BranchConfig(block_n=bn, num_warps=w)}
        for bk, f, bn, w in grid
    ]  # fmt: skip


def one_launch_candidates(rule: BranchConfig, quick: bool) -> list[BranchConfig]:
    """The rule's config first, then every group width (block_n) × K chunks (split) × block_k × warps."""
    if quick:
        return [rule, BranchConfig(block_k=32, split=2)]
    grid = itertools.product((256, 512, 1024), (8, 16, 32), (64, 128, 256), (4, 8))
    return [rule] + [BranchConfig(block_n=n, split=k, block_k=bk, num_warps=w) for n, k, bk, w in grid]


def _short(c: BranchConfig) -> str:
    return f"m{c.block_m} n{c.block_n} k{c.block_k} split{c.split} w{c.num_warps} s{c.num_stages}"


def _inputs(T, L, r, K, N, dtype, device):
    """x, a zero y, A, B (seeded CPU generator, moved) and ids spreading the tokens over the adapters."""
    g = torch.Generator().manual_seed(T * 7 + L)
    x = torch.randn(T, K, generator=g).to(device, dtype)
    a = (torch.randn(L, r, K, generator=g) / K**0.5).to(device, dtype)
    b = (torch.randn(L, N, r, generator=g) / r**0.5).to(device, dtype)
    ids = torch.arange(T, device=device) % L
    return x, torch.zeros(T, N, device=device, dtype=dtype), a, b, ids


def run_shape(T, L, r, K, N, dtype, device, quick: bool) -> list[dict]:
    """One row per candidate: device µs of the call replayed from a CUDA graph (CPU: a plain call), its
    error against the float64 reference, or why it has no time."""
    x, y, a, b, ids = _inputs(T, L, r, K, N, dtype, device)
    meta = build_meta(ids, L)
    want = reference.multi_lora(y.double(), x.double(), [a.double()], [b.double()], ids, SCALE)
    rule = plan(T, K, (N,), r, L, dtype, device, path="fused").fused
    shrink_rule = plan(T, K, (N,), r, L, dtype, device, path="split").shrink
    one_rule = plan(T, K, (N,), r, L, dtype, device, path="one_launch").one_launch
    cases = [("split", c, i == 0) for i, c in enumerate(split_candidates(shrink_rule, quick))]
    if T <= DECODE:
        cases[:0] = [("fused", {"fused": c}, i == 0) for i, c in enumerate(fused_candidates(rule, N, quick))]
        one = one_launch_candidates(one_rule, quick)
        cases += [("one_launch", {"one_launch": c}, i == 0) for i, c in enumerate(one)]
    rows = []
    for path, configs, is_rule in cases:
        p = plan(T, K, (N,), r, L, dtype, device, path=path, configs=configs)
        used = [p.shrink, p.expand] if path == "split" else [getattr(p, path)]
        row = {"shape": f"T={T} L={L} r={r} K={K} N={N}", "path": path,
               "rule": is_rule, "config": " | ".join(_short(c) for c in used)}  # fmt: skip
        out = y.clone()

        def call(out=out, path=path, configs=configs):
            add_multi_lora(out, x, a, b, ids, SCALE, meta=meta, path=path, configs=configs)

        try:
            call()
            err = ((out.double() - want).norm() / (want - y.double()).norm()).item()
            if not err < 2e-2:
                raise AssertionError(f"relative error {err:.3g} against the float64 reference")
            rows.append({**row, "us": sweeps.graph_us(call, device), "error": err, "why": ""})
        except Exception as e:  # noqa: BLE001 — a config that does not compile or answers wrong: its reason
            rows.append({**row, "us": None, "error": None, "why": sweeps.reason(e)})
    return rows


def report(rows: list[dict], top: int) -> None:
    """Per shape and path: the ``top`` fastest candidates and the rule's row."""
    for (shape, path), group in itertools.groupby(rows, key=lambda r: (r["shape"], r["path"])):
        group = list(group)
        timed = sorted((r for r in group if r["us"] is not None), key=lambda r: r["us"])
        shown = timed[:top] + [r for r in group if r["rule"] and r not in timed[:top]]
        print(f"{shape}, {path}: {len(timed)} of {len(group)} candidates timed")
        bu.print_table(shown, ["config", "rule", "us", "error"])


def main(argv=None) -> None:
    sweeps.main(__doc__, run_shape, SHAPES, QUICK, "multi_lora_decode", report, top=6, argv=argv)


if __name__ == "__main__":
    main()
