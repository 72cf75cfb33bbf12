"""Which tiles make ``lora_linear(version="small")`` fastest (``kernels/lora/small_m.py``): forward and
forward + backward at M = 1 and 16 rows, K = N = 4096, r 16, each call replayed from a CUDA graph, beside the
frozen base linear in a graph. The measurements a small-M rule starts from (the goal, in a graph: ≤ +50%
over the base at M = 16).

Per shape: the rule's config first, then every ``block_n`` (columns a program owns) × ``block_k`` (depth of a
loop step) × warps × stages; every candidate's forward + backward captured, replayed and its answer (the
replay's, not an eager call's) checked against the float64 reference before its time counts (a wrong or
uncompilable one is a row with its reason, not a crash).

    python -m benchmarks.sweep_lora_small_m            # GPU: bf16; CSV under benchmarks/results/
    python -m benchmarks.sweep_lora_small_m --quick    # CPU: tiny sizes, two candidates
"""

from __future__ import annotations

import itertools

import torch

from benchmarks import bench_lora, sweeps
from kernels import reference
from kernels.configs import BranchConfig
from kernels.lora.linear import SMALL, lora_linear
from kernels.lora.small_m import small_m_rule
from lecture_code import bench as bu

SHAPES = [(1, 4096, 4096, 16), (16, 4096, 4096, 16)]  # M, K, N, r
QUICK = [(5, 64, 48, 8)]
SCALE = 2.0


def candidates(rule: BranchConfig, quick: bool) -> list[BranchConfig]:
    """The rule's config, then block_n × block_k × warps × stages."""
    if quick:
        return [rule, BranchConfig(block_k=16)]
    grid = itertools.product((16, 32, 64), (64, 128, 256), (2, 4, 8), (2, 3, 4))
    return [rule] + [BranchConfig(block_n=n, block_k=k, num_warps=w, num_stages=s) for n, k, w, s in grid]


def run_shape(M, K, N, r, dtype, device, quick: bool) -> list[dict]:
    """Rows: the base linear's fwd and fwd+bwd, then per candidate both passes (device µs in a graph, the
    largest relative error of y, dX, dA, dB against float64), or why a candidate has no time."""
    x, w, a, b, dy = bench_lora.inputs(M, K, N, r, dtype, device)  # as bench_lora draws them
    xg, ag, bg = (t.clone().requires_grad_() for t in (x, a, b))
    x64, a64, b64 = (t.double().requires_grad_() for t in (x, a, b))
    want_y = reference.lora_linear(x64, w.double(), a64, b64, SCALE)
    want = (want_y, *torch.autograd.grad(want_y, (x64, a64, b64), dy.double()))
    shape = f"{M}x{K}x{N} r{r}"

    def base_fwd():
        return torch.nn.functional.linear(x, w)

    def base_fwd_bwd():
        return torch.autograd.grad(torch.nn.functional.linear(xg, w), (xg,), dy)

    base = {"shape": shape, "config": "base (frozen linear)", "rule": False, "error": None, "why": ""}
    rows = [
        {
            **base,
            "fwd us": sweeps.graph_us(base_fwd, device),
            "fwd+bwd us": sweeps.graph_us(base_fwd_bwd, device),
        }
    ]
    rule = small_m_rule(M, K, N, r)
    for i, c in enumerate(candidates(rule, quick)):
        f = c.filled(rule)
        row = {
            "shape": shape,
            "config": f"n{f.block_n} k{f.block_k} w{f.num_warps} s{f.num_stages}",
            "rule": i == 0,
        }

        got: list[torch.Tensor] = []  # what the last call returned: on a GPU, the graph's replayed outputs

        def fwd(c=c):
            return lora_linear(x, w, ag, bg, SCALE, version=SMALL, fwd_config=c)

        def fwd_bwd(c=c, got=got):  # the backward on the same config
            y = lora_linear(xg, w, ag, bg, SCALE, version=SMALL, fwd_config=c, bwd_config=c)
            got[:] = (y, *torch.autograd.grad(y, (xg, ag, bg), dy))

        try:  # timed first, then the replay's answer checked: the graph itself, not an eager call, is checked
            fwd_bwd_us = sweeps.graph_us(fwd_bwd, device)
            err = max(((g.double() - e).norm() / e.norm()).item() for g, e in zip(got, want, strict=True))
            if not err < 3e-2:
                raise AssertionError(f"relative error {err:.3g} against the float64 reference")
            rows.append(
                {
                    **row,
                    "error": err,
                    "why": "",
                    "fwd us": sweeps.graph_us(fwd, device),
                    "fwd+bwd us": fwd_bwd_us,
                }
            )
        except Exception as e:  # noqa: BLE001 — a config that does not compile or answers wrong: its reason
            rows.append({**row, "error": None, "why": sweeps.reason(e)})
    return rows


def report(rows: list[dict], top: int) -> None:
    """Per shape: the base, the ``top`` fastest candidates by fwd+bwd, and the rule's row."""
    for shape in dict.fromkeys(r["shape"] for r in rows):
        group = [r for r in rows if r["shape"] == shape]
        timed = sorted((r for r in group[1:] if r.get("fwd+bwd us")), key=lambda r: r["fwd+bwd us"])
        shown = [group[0], *timed[:top], *[r for r in group if r["rule"] and r not in timed[:top]]]
        print(
            f"{shape}: {len(timed)} of {len(group) - 1} candidates timed (µs per call; a GPU's device time "
            "of the call replayed from a CUDA graph)"
        )
        bu.print_table(shown, ["config", "rule", "fwd us", "fwd+bwd us", "error"])


def main(argv=None) -> None:
    sweeps.main(__doc__, run_shape, SHAPES, QUICK, "lora_small_m", report, top=8, argv=argv)


if __name__ == "__main__":
    main()
